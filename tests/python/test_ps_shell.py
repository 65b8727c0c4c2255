"""The parameter server started from the shell, as a job's pods start it: TF_CONFIG (Kubeflow's
TFJob) and PSCORE_STORE with a pscore-store process, tasks started in any order and workers
calling PSClient() with no arguments; PSClient(store=URL) for every kind of store URL; pserver's
error for a store that is not there, its --help, and a start with no runpy warning."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import free_port
from test_ps_support import CHILD_PYTHONPATH, pserver_process

import pscore
from pscore.ps import SGD, PSClient, environment
from pscore.store import TCPStore

N = 100_000  # 400 KB: the table is split over both shards
STEPS = 3
# Each of two sync workers pushes (its id + 1) per step; a round applies their mean, 1.5.
EXPECTED = -1.5 * STEPS

# One write per line: torchrun's workers share its stdout unbuffered (print() writes in pieces).
WORKER = f"""
import sys
import numpy as np
from pscore.ps import SGD, PSClient, environment

c = PSClient()
c.create_dense("w", ({N},), optimizer=SGD(lr=1.0), consistency="sync")
for _ in range({STEPS}):
    w = c.push_pull("w", np.full({N}, c.worker_id + 1, np.float32))
sys.stdout.write(f"{{c.worker_id}} {{c.num_shards}} {{w.min()}} {{w.max()}}\\n")
sys.stdout.flush()
c.worker_done()
"""


def _env(extra: dict) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PSCORE_", "TF_CONFIG", "RANK", "WORLD_SIZE", "MASTER_"))
    }
    env.update(PYTHONPATH=CHILD_PYTHONPATH, **extra)
    return env


def _run_pserver(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs `python -m pscore.ps.pserver args` to its end (these runs are expected to exit)."""
    return subprocess.run(
        [sys.executable, "-m", "pscore.ps.pserver", *args],
        capture_output=True,
        text=True,
        env=_env(env or {}),
        timeout=60,
        check=False,
    )


def _start(args: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(env)
    )


def _finish(proc: subprocess.Popen, what: str, timeout: float = 120) -> str:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"{what} did not finish: {out} {err}") from None
    assert proc.returncode == 0, f"{what} exited {proc.returncode}: {out} {err}"
    assert err == "", f"{what} wrote to stderr: {err}"
    return out


def _stop(proc: subprocess.Popen, what: str) -> str:
    proc.send_signal(signal.SIGTERM)
    return _finish(proc, what, 60)


def _start_in_order(order: list[str], commands: dict) -> dict:
    """Starts the named tasks in `order`, a moment apart, so that a later one really is later."""
    procs = {}
    for name in order:
        procs[name] = _start(*commands[name])
        time.sleep(0.3)
    return procs


def _check_workers(outputs: list[str]) -> None:
    assert len(outputs) == 2, outputs
    ids = []
    for out in outputs:
        worker, shards, low, high = out.split()
        ids.append(int(worker))
        assert int(shards) == 2
        assert float(low) == float(high) == EXPECTED, out
    assert sorted(ids) == [0, 1]


def _tf_config(cluster: dict, kind: str, index: int) -> dict:
    return {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}})}


@pytest.mark.parametrize(
    "order",
    [
        ["worker0", "worker1", "ps0", "ps1"],
        ["ps1", "worker1", "ps0", "worker0"],
        ["ps0", "ps1", "worker1", "worker0"],
    ],
)
def test_tf_config_job_starts_in_any_order(order, monkeypatch):
    cluster = {
        "worker": [f"127.0.0.1:{free_port()}" for _ in range(2)],
        "ps": [f"127.0.0.1:{free_port()}" for _ in range(2)],
    }
    commands = {
        f"{kind}{i}": (
            [sys.executable, "-m", "pscore.ps.pserver"]
            if kind == "ps"
            else [sys.executable, "-c", WORKER],
            _tf_config(cluster, kind, i),
        )
        for kind in ("ps", "worker")
        for i in range(2)
    }
    procs = _start_in_order(order, commands)
    try:
        _check_workers([_finish(procs[f"worker{i}"], f"worker {i}") for i in range(2)])
        # An evaluator reads, as a worker that pushes nothing (id -1).
        for var in ("PSCORE_STORE", "PSCORE_RANK", "PSCORE_WORLD_SIZE", "RANK", "WORLD_SIZE"):
            monkeypatch.delenv(var, raising=False)
        cluster["evaluator"] = ["127.0.0.1:1"]
        monkeypatch.setenv("TF_CONFIG", _tf_config(cluster, "evaluator", 0)["TF_CONFIG"])
        evaluator = PSClient()
        assert evaluator.worker_id == -1
        assert np.all(evaluator.pull("w") == EXPECTED)
        assert [s["dense_elements"] for s in evaluator.stats()] == [N // 2, N // 2]
        evaluator.close()
        for i in range(2):
            out = _stop(procs[f"ps{i}"], f"ps {i}")
            port = cluster["ps"][i].rsplit(":", 1)[1]
            assert f"shard {i}/2 (TF_CONFIG task ps:{i} at 127.0.0.1:{port}) serving on " in out
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


LAUNCHERS = {
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone"],
    "pscore-run": [sys.executable, "-m", "pscore.launch"],
}


@pytest.mark.parametrize(
    ("launcher", "order"),
    [
        ("torchrun", ["workers", "ps1", "ps0", "store"]),
        ("torchrun", ["store", "ps0", "ps1", "workers"]),
        # pscore-run makes up a job id for its own collectives: the servers must not need it.
        ("pscore-run", ["store", "ps0", "ps1", "workers"]),
    ],
)
def test_pscore_store_job_under_a_launcher_starts_in_any_order(launcher, order, tmp_path):
    port = free_port()
    env = {"PSCORE_STORE": f"tcp://127.0.0.1:{port}"}
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    commands = {
        "store": ([sys.executable, "-m", "pscore.store.server", "--port", str(port)], {}),
        "workers": ([*LAUNCHERS[launcher], "--nproc-per-node", "2", str(script)], env),
    }
    for s in range(2):
        shard = ["--shard", str(s), "--num-shards", "2", "--num-workers", "2"]
        commands[f"ps{s}"] = ([sys.executable, "-m", "pscore.ps.pserver", *shard], env)
    procs = _start_in_order(order, commands)
    try:
        out, err = procs["workers"].communicate(timeout=180)
        assert procs["workers"].returncode == 0, err
        _check_workers([re.sub(r"^\[rank\d+\]: ", "", line) for line in out.splitlines()])
        for s in range(2):
            assert f"shard {s}/2 serving on" in _stop(procs[f"ps{s}"], f"pserver {s}")
        out = _stop(procs["store"], "pscore-store")
        assert out == f"pscore-store: serving tcp://127.0.0.1:{port}\npscore-store: stopped\n"
    finally:
        for p in procs.values():
            p.kill()
            p.wait()


def test_the_ps_job_id_is_the_users_not_one_pscore_run_made_up():
    assert environment.job_id({}) == "pscore"
    assert environment.job_id({"PSCORE_JOB_ID": "j"}) == "j"
    made_up = {"PSCORE_JOB_ID": "f00", "PSCORE_JOB_ID_ORIGIN": "pscore-run"}
    assert environment.job_id(made_up) == "pscore"


def _store_url(kind: str, tmp_path, redis_server) -> tuple[str, object]:
    """A store URL of `kind` and what keeps its store alive."""
    if kind == "file":
        return f"file://{tmp_path}/store", None
    if kind == "redis":
        return f"{redis_server.url}/0?prefix=ps-{os.getpid()}-{time.monotonic_ns()}", None
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=30)
    return f"tcp://127.0.0.1:{master.port}", master


@pytest.mark.parametrize("kind", ["file", "tcp", "redis"])
def test_psclient_takes_the_store_urls_pserver_takes(kind, tmp_path, request):
    redis_server = request.getfixturevalue("redis_server") if kind == "redis" else None
    url, _keep = _store_url(kind, tmp_path, redis_server)
    servers = [
        pserver_process("--store", url, "--shard", str(s), "--num-shards", "2") for s in range(2)
    ]
    try:
        c = PSClient(store=url)
        assert c.num_shards == 2
        c.create_dense("v", (N,), optimizer=SGD(lr=1.0))
        c.push("v", np.ones(N, np.float32))
        assert np.all(PSClient(store=url).pull("v") == -1.0)
        c.save(str(tmp_path / "ckpt"))  # the names docs/ps.md gives
        assert sorted(os.listdir(tmp_path / "ckpt")) == [
            "shard-00000-of-00002.safetensors",
            "shard-00001-of-00002.safetensors",
        ]
    finally:
        for p in servers:
            p.kill()
            p.wait()


def test_store_arguments_that_are_not_stores():
    with pytest.raises(TypeError, match="pscore Store or a URL string, not int"):
        PSClient(store=42)
    with pytest.raises(ValueError, match="unknown scheme 'http'"):
        PSClient(store="http://127.0.0.1:1")
    with pytest.raises(ValueError, match="not both"):
        PSClient(["127.0.0.1:1"], store="file:///tmp/x")


def test_psclient_names_pscore_store_when_its_url_is_bad(monkeypatch):
    monkeypatch.setenv("PSCORE_STORE", "h:1")
    with pytest.raises(ValueError, match=r"^PSCORE_STORE='h:1': init_method 'h:1': unknown scheme"):
        PSClient()


def test_psclient_on_a_store_no_shard_registered_in_says_so(tmp_path):
    for job in ("", "j1"):
        with pytest.raises(pscore.TimeoutError) as info:
            PSClient(store=f"file://{tmp_path}/store", job_id=job, connect_timeout=0.5)
        assert str(info.value).startswith(
            f"no parameter-server shard registered within 0.5 s under job id {job!r} (is a "
            "pserver serving with this --store and --job-id?): "
        )


def test_psclient_without_servers_says_where_to_look(monkeypatch):
    for var in ("PSCORE_STORE", "TF_CONFIG"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ValueError, match="set PSCORE_STORE=URL or a TF_CONFIG with a 'ps' job"):
        PSClient()


def test_pserver_fails_fast_without_its_store():
    url = f"tcp://127.0.0.1:{free_port()}"
    for _ in range(3):
        start = time.monotonic()
        r = _run_pserver("--store", url, "--store-timeout", "1")
        assert r.returncode == 1
        assert r.stderr == (
            f"pserver: no store answered at {url} within 1 s (is pscore-store, or the job's "
            "store, serving there?)\n"
        )
        assert time.monotonic() - start < 30
    with pytest.raises(pscore.TimeoutError, match=f"no store answered at {url} within 1 s"):
        PSClient(store=url, connect_timeout=1)


def test_a_busy_metrics_port_is_named():
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        r = _run_pserver("--metrics-port", str(port))
    assert r.returncode == 2
    assert r.stderr == (
        f"pserver: [Errno 98] cannot serve metrics on 127.0.0.1:{port}: Address already in use\n"
    )


def test_pserver_says_it_waits_for_a_store_that_comes_later():
    """Not silent for --store-timeout (300 s): one line after a moment, then serving once the
    store is up."""
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    server = _start([sys.executable, "-m", "pscore.ps.pserver", "--store", url], {})
    store = None
    try:
        assert server.stderr.readline() == f"pserver: waiting up to 300 s for the store at {url}\n"
        store = _start([sys.executable, "-m", "pscore.store.server", "--port", str(port)], {})
        assert "serving" in store.stdout.readline()
        assert server.stdout.readline().startswith("pserver: shard 0/1 serving on 127.0.0.1:")
        assert "shard 0 stopped" in _stop(server, "pserver")
        _stop(store, "pscore-store")
    finally:
        for p in (server, store):
            if p is not None:
                p.kill()
                p.wait()


def test_pserver_rejects_a_tf_config_task_that_is_not_ps():
    cluster = {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}
    r = _run_pserver(env=_tf_config(cluster, "worker", 0))
    assert r.returncode == 2
    assert "TF_CONFIG says this is task worker:0; pserver serves a 'ps' task" in r.stderr


@pytest.mark.parametrize(
    ("args", "env", "code", "message"),
    [
        (["--store", "http://h:1"], {}, 2, "pserver: --store 'http://h:1': init_method "),
        ([], {"PSCORE_STORE": "h:1"}, 2, "pserver: PSCORE_STORE 'h:1': init_method 'h:1': "),
        (["--max-frame-mb", "-1"], {}, 2, "pserver: --max-frame-mb must be >= 1, got -1\n"),
        (["--max-frame-mb", "0"], {}, 2, "pserver: --max-frame-mb must be >= 1, got 0\n"),
        (
            ["--drain-timeout", "-3"],
            {},
            2,
            "pserver: --drain-timeout must be >= 0 seconds, got -3.0\n",
        ),
        (["--metrics-port", "99999"], {}, 2, "pserver: metrics_port 99999 is outside 0..65535\n"),
        (
            ["--recover", "/proc/no/such"],
            {},
            1,
            "pserver: shard 0: cannot create directory /proc/no: No such file or directory\n",
        ),
    ],
)
def test_bad_option_values_are_one_line_errors(args, env, code, message):
    r = _run_pserver(*args, env=env)
    assert r.returncode == code
    assert r.stderr.startswith(message) and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize("module", ["pscore.ps.pserver", "pscore.store.server"])
def test_commands_start_and_stop_without_warnings(module):
    for _ in range(3):
        proc = _start([sys.executable, "-X", "dev", "-m", module], {})
        assert "serving" in proc.stdout.readline()
        assert "stopped" in _stop(proc, module)


@pytest.mark.parametrize("module", ["pscore.ps.pserver", "pscore.store.server"])
def test_every_option_in_help_has_a_default(module):
    r = subprocess.run(
        [sys.executable, "-m", module, "--help"],
        capture_output=True,
        text=True,
        env=_env({}),
        timeout=60,
        check=True,
    )
    blocks = re.split(r"\n  (?=--)", r.stdout.split("options:", 1)[1])[1:]
    flags = {b.split()[0]: " ".join(b.split()) for b in blocks}
    assert len(flags) >= 4
    for flag, text in flags.items():
        assert "(default: " in text, f"{module} --help: {flag} names no default: {text}"
    if module == "pscore.ps.pserver":
        for flag in ("--shard", "--num-shards", "--num-workers", "--threads", "--max-frame-mb"):
            assert flag in flags


def test_a_ps_task_with_a_name_binds_every_interface_and_needs_a_token():
    port = free_port()
    cluster = {"worker": ["w-0.invalid:1"], "ps": [f"ps-0.invalid:{port}"]}
    env = _tf_config(cluster, "ps", 0)
    r = _run_pserver(env=env)
    assert r.returncode == 2
    assert "on '0.0.0.0' (reachable from other hosts) without an auth token" in r.stderr
    assert "--insecure for pscore-store and pserver" in r.stderr
    proc = _start([sys.executable, "-m", "pscore.ps.pserver"], {**env, "PSCORE_AUTH_TOKEN": "tok"})
    try:
        assert f"(TF_CONFIG task ps:0 at ps-0.invalid:{port}) serving on" in proc.stdout.readline()
        c = PSClient([f"127.0.0.1:{port}"], auth_token="tok", worker_id=0)
        assert c.stats()[0]["connections"] == 1
    finally:
        proc.kill()
        proc.wait()


def test_command_line_options_override_tf_config():
    cluster = {"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2", f"127.0.0.1:{free_port()}"]}
    args = ("--port", "0", "--shard", "0", "--num-shards", "1", "--num-workers", "5")
    proc = pserver_process(*args, env=_tf_config(cluster, "ps", 1))
    try:
        assert "shard 0/1 (TF_CONFIG task ps:1" in proc.banner
        address = proc.banner.split("serving on ")[1].strip()
        assert address != cluster["ps"][1]
        PSClient([address], worker_id=4).close()  # five workers: 4 is a valid id
        with pytest.raises(pscore.Error, match=r"worker id 5 outside \[-1, 5\)"):
            PSClient([address], worker_id=5, connect_timeout=1)
    finally:
        proc.kill()
        proc.wait()


def test_pscore_store_wins_over_tf_config():
    tf = _tf_config({"worker": ["127.0.0.1:1"], "ps": ["127.0.0.1:2"]}, "worker", 0)
    assert environment.find_servers(tf) == (["127.0.0.1:2"], None)
    both = {**tf, "PSCORE_STORE": "file:///tmp/s"}
    assert environment.find_servers(both) == (None, "file:///tmp/s")


def test_pscore_store_on_every_interface_names_its_insecure_flag():
    r = subprocess.run(
        [sys.executable, "-m", "pscore.store.server", "--host", "0.0.0.0", "--port", "0"],
        capture_output=True,
        text=True,
        env=_env({}),
        timeout=60,
        check=False,
    )
    assert r.returncode == 2
    assert "without an auth token" in r.stderr and "--insecure" in r.stderr, r.stderr
