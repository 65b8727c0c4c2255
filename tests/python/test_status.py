"""`pscore status` against a real job: a TCPStore, two `pserver` shards a client pushed to, and
a `pscore-run` job's ranks; the table and --json agree with what was pushed; a stopped shard
shows as DOWN; a store that is not there, or a job it does not hold, is a clear error."""

from __future__ import annotations

import gc
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from conftest import free_port
from test_ps_support import CHILD_PYTHONPATH, pserver_process

import pscore
from pscore import _ps
from pscore.commands import main as pscore_main
from pscore.store import TCPStore

ROWS, DIM, DENSE, SPARSE_PUSHES = 10, 4, 100, 3


def run_status(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pscore.status", *args],
        env=dict(os.environ, PYTHONPATH=CHILD_PYTHONPATH),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture
def job():
    """A store, two shards registered in it, and a client that pushed to both."""
    store = TCPStore("127.0.0.1", 0, is_master=True)
    url = f"tcp://127.0.0.1:{store.port}"
    shards = [
        pserver_process("--store", url, "--shard", str(s), "--num-shards", "2") for s in range(2)
    ]
    client = pscore.PSClient(store=url)
    try:
        client.create_sparse("emb", DIM)
        client.create_dense("w", (DENSE,))
        for _ in range(SPARSE_PUSHES):
            client.push_sparse("emb", np.arange(ROWS), np.ones((ROWS, DIM), np.float32))
        client.push("w", np.ones(DENSE, np.float32))
        yield url, client, shards
    finally:
        client.close()
        for proc in shards:
            proc.kill()
            proc.wait(timeout=30)
            proc.stdout.close()
            proc.stderr.close()


def _json(*args: str) -> dict:
    r = run_status(*args, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_json_reports_what_was_pushed(job):
    url, client, _ = job
    expected = client.stats()  # each shard's own account, asked before status adds its requests
    snap = _json("--store", url, "--interval", "0")
    assert snap["job"] == "pscore" and snap["store"] == url and snap["ranks"] == []
    shards = snap["shards"]
    assert [s["state"] for s in shards] == ["up", "up"]
    assert sum(s["stats"]["sparse_rows"] for s in shards) == ROWS
    assert sum(s["stats"]["dense_elements"] for s in shards) == DENSE
    assert [s["stats"]["tables"] for s in shards] == [e["tables"] for e in expected]
    for s, e in zip(shards, expected):
        by_type = s["stats"]["requests_by_type"]
        assert by_type["push_sparse"] == SPARSE_PUSHES  # ids 0..9 land on both shards
        assert by_type.get("push", 0) == e["requests_by_type"].get("push", 0)
        assert s["address"] == f"127.0.0.1:{e['port']}"
        assert s["connections"] == 1  # the test's client; status's own is not counted
    assert sum(s["stats"]["requests_by_type"].get("push", 0) for s in shards) >= 1


def test_rates_come_from_two_samples(job):
    url, client, _ = job
    stop = threading.Event()

    def push_until_stopped():
        while not stop.is_set():
            client.push_sparse("emb", np.arange(ROWS), np.ones((ROWS, DIM), np.float32))

    pusher = threading.Thread(target=push_until_stopped)
    pusher.start()
    try:
        snap = _json("--store", url, "--interval", "0.5")
    finally:
        stop.set()
        pusher.join(timeout=60)
    for s in snap["shards"]:
        rates = s["rates"]
        assert rates["requests_by_type_per_s"]["push_sparse"] > 0
        assert "stats" not in rates["requests_by_type_per_s"]
        assert rates["requests_per_s"] == pytest.approx(
            sum(rates["requests_by_type_per_s"].values())
        )
        assert rates["bytes_in_per_s"] > 0


def _table(text: str, header: str) -> list[dict]:
    """The rows of the table whose header line starts with `header`, as dicts."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    columns = lines[start].split()
    rows = []
    for line in lines[start + 1 :]:
        if not line or line.startswith(" "):
            break
        rows.append(dict(zip(columns, line.split())))
    return rows


def test_table_shows_each_shard_and_a_down_one(job):
    url, _, shards = job
    r = run_status("--store", url, "--interval", "0")
    assert r.returncode == 0, r.stderr
    rows = _table(r.stdout, "SHARD")
    assert [row["STATE"] for row in rows] == ["up", "up"]
    assert sum(int(row["ROWS"]) for row in rows) == ROWS
    assert sum(int(row["ELEMENTS"]) for row in rows) == DENSE
    assert f"push_sparse={SPARSE_PUSHES}" in r.stdout

    shards[1].kill()
    shards[1].wait(timeout=30)
    r = run_status("--store", url, "--interval", "0", "--timeout", "2")
    assert r.returncode == 0, r.stderr
    rows = _table(r.stdout, "SHARD")
    assert [row["STATE"] for row in rows] == ["up", "DOWN"]
    assert rows[1]["ROWS"] == "-"
    assert "shard 1 DOWN: " in r.stdout


def test_watch_refreshes_until_interrupted(job):
    url, _, _ = job
    watch = subprocess.Popen(
        [sys.executable, "-m", "pscore.status", "--store", url, "--json", "--watch", "0.2"],
        env=dict(os.environ, PYTHONPATH=CHILD_PYTHONPATH),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        first, second = (json.loads(watch.stdout.readline()) for _ in range(2))
    finally:
        watch.send_signal(signal.SIGINT)
        _, err = watch.communicate(timeout=60)
    assert watch.returncode == 0, err
    assert second["time"] > first["time"]
    assert [s["state"] for s in second["shards"]] == ["up", "up"]


def test_store_that_is_not_there_is_named():
    url = f"tcp://127.0.0.1:{free_port()}"  # nothing serves there
    started = time.monotonic()
    r = run_status("--store", url, "--timeout", "1", timeout=30)
    assert r.returncode == 1
    assert r.stderr.startswith(f"pscore status: cannot reach the store at {url} (timeout 1 s)")
    assert time.monotonic() - started < 30


def test_a_job_the_store_does_not_hold(job):
    url, _, _ = job
    r = run_status("--store", url, "--job", "other")
    assert r.returncode == 1
    assert r.stderr.startswith(f"pscore status: no job 'other' in the store at {url}")


def test_the_rank_record_does_not_keep_rank_zeros_store_serving():
    port = free_port()
    for _ in range(2):  # the second init serves the store on the same port again
        pscore.init_process_group(init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
        pscore.destroy_process_group()
        gc.collect()


def test_stats_of_a_shard_that_does_not_exist():
    client = _ps.Client(_ps.ClientOptions(), 2)
    with pytest.raises(IndexError, match=r"stats: shard 2 is not in 0\.\.1"):
        client.stats(2)


def test_the_pscore_command(capsys):
    assert pscore_main(["--help"]) == 0
    assert "status" in capsys.readouterr().out
    assert pscore_main(["stauts"]) == 2
    assert "no command named 'stauts'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        pscore_main(["status"])
    assert e.value.code == 2


def _start_job(tmp_path, script: str, launch_args: list[str]):
    """Starts `pscore-run launch_args script.py READY STOP`; returns (the job, the store URL
    the script's chief wrote to READY, STOP)."""
    path = tmp_path / "job.py"
    path.write_text(script)
    ready, stop = tmp_path / "ready", tmp_path / "stop"
    run = subprocess.Popen(
        [sys.executable, "-m", "pscore.launch", *launch_args, str(path), str(ready), str(stop)],
        env=dict(os.environ, PYTHONPATH=CHILD_PYTHONPATH),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 120
    while not ready.exists():
        if run.poll() is not None or time.monotonic() > deadline:
            _stop_job(run, stop)
            raise AssertionError(f"the job did not start: {run.stdout.read()}")
        time.sleep(0.05)
    return run, ready.read_text(), stop


def _stop_job(run: subprocess.Popen, stop) -> str:
    stop.write_text("")
    try:
        out, _ = run.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        run.kill()
        out, _ = run.communicate()
    assert run.returncode == 0, out
    return out


RANK_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import pscore
    pscore.init_process_group()
    pscore.barrier()
    if pscore.get_rank() == 0:
        with open(sys.argv[1] + ".tmp", "w") as f:
            f.write(os.environ["MASTER_PORT"])
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.05)
    """
)


def test_ranks_of_a_pscore_run_job(tmp_path):
    run, port, stop = _start_job(tmp_path, RANK_SCRIPT, ["-n", "2"])
    try:
        snap = _json("--store", f"tcp://127.0.0.1:{port}", "--interval", "0")
    finally:
        _stop_job(run, stop)
    ranks = snap["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert {r["state"] for r in ranks} == {"running"}
    assert {r["backend"] for r in ranks} == {"tcp"}
    assert all(r["world_size"] == 2 and r["pid"] > 0 for r in ranks)
    assert ranks[0]["pid"] != ranks[1]["pid"]
    assert snap["shards"] == []


TRAINER_SCRIPT = textwrap.dedent(
    """
    import os, sys, time
    import torch
    import pscore
    from pscore.train import Trainer
    trainer = Trainer(torch.nn.Linear(4, 2), torch.nn.functional.cross_entropy,
                      strategy="ps-async").setup()
    pscore.barrier()  # both workers are set up: connected to the shard
    if trainer.run.is_chief:
        with open(sys.argv[1] + ".tmp", "w") as f:
            f.write(os.environ["PSCORE_STORE"])
        os.replace(sys.argv[1] + ".tmp", sys.argv[1])
    while not os.path.exists(sys.argv[2]):
        time.sleep(0.05)
    """
)


def test_a_trainer_job_shows_its_shard_and_its_ranks_roles(tmp_path):
    run, url, stop = _start_job(tmp_path, TRAINER_SCRIPT, ["--workers", "2", "--servers", "1"])
    try:
        r = run_status("--store", url, "--interval", "0")
    finally:
        out = _stop_job(run, stop)
    assert r.returncode == 0, r.stderr
    assert f"pscore-run: the job's store: pscore status --store {url}" in out
    (shard,) = _table(r.stdout, "SHARD")
    assert shard["STATE"] == "up" and shard["CONNS"] == "2"  # the two workers
    ranks = _table(r.stdout, "RANK")
    assert [(x["RANK"], x["ROLE"], x["STRATEGY"], x["STATE"]) for x in ranks] == [
        ("0", "chief", "ps-async", "running"),
        ("1", "worker", "ps-async", "running"),
    ]
