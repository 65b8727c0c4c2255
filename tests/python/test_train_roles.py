"""Roles and clusters of a Trainer job: SINGA's ClusterProto topology choosing the strategy, the
job's checks against it, TF_CONFIG's chief / worker / ps tasks started in any order, and pserver
processes started by hand."""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys

import pytest
from train_ps_helpers import HANG_GUARD_S, environment, launch, write

torch = pytest.importorskip("torch")

import pscore
from pscore.launch.launcher import free_port
from pscore.store.native import TCPStore
from pscore.train import strategies
from pscore.train.run import current_run

SANDBLASTER = dict(nworker_groups=1, nserver_groups=1, nworkers_per_group=3, nservers_per_group=2,
                   server_worker_separate=True)  # fmt: skip
ALLREDUCE = dict(nworker_groups=1, nserver_groups=1, nworkers_per_group=3, nservers_per_group=3)
DOWNPOUR = dict(nworker_groups=2, nserver_groups=1, nworkers_per_group=2, nservers_per_group=2,
                server_worker_separate=True)  # fmt: skip
HOGWILD = dict(nworker_groups=3, nserver_groups=3)


@pytest.mark.parametrize(
    ("fields", "strategy", "workers", "servers"),
    [
        (SANDBLASTER, "ps-sync", 3, 2),
        (ALLREDUCE, "allreduce", 3, 0),
        (DOWNPOUR, "ps-async", 4, 2),
        (HOGWILD, "distributed-hogwild", 3, 0),
    ],
)
def test_singa_frameworks_choose_the_strategy(fields, strategy, workers, servers):
    topology = pscore.ClusterSpec(**fields).topology
    assert (topology.strategy, topology.workers, topology.servers) == (strategy, workers, servers)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (dict(nworker_groups=2, nserver_groups=3), "nworker_groups=2 with nserver_groups=3"),
        (dict(nworker_groups=2, nserver_groups=0), "is none of SINGA's frameworks"),
        (dict(nworker_groups=2, nserver_groups=2, server_worker_separate=True), "none of SINGA"),
        (dict(nworkers_per_procs=2), "nworkers_per_procs=2: pscore runs one worker"),
        (dict(nworkers_per_group=0), "nworkers_per_group must be an int >= 1, got 0"),
    ],
)
def test_a_topology_no_framework_runs_is_refused(fields, message):
    with pytest.raises(ValueError, match=message):
        pscore.ClusterSpec(**fields)
    with pytest.raises(TypeError, match="server_worker_separate must be True or False"):
        pscore.ClusterSpec(server_worker_separate="yes")


def test_topology_rides_along_with_the_tf_form():
    spec = pscore.ClusterSpec({"worker": ["h:1", "h:2"]}, **DOWNPOUR)
    assert spec.num_tasks("worker") == 2 and spec.topology.nworker_groups == 2
    assert pscore.ClusterSpec(spec) == spec != pscore.ClusterSpec({"worker": ["h:1", "h:2"]})


def run_of(monkeypatch, fields, workers=1, **env):
    for name in ("PSCORE_NUM_SERVERS", "PSCORE_WORKER_GROUPS", "PSCORE_ROLE", "TF_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PSCORE_RANK", "0")
    monkeypatch.setenv("PSCORE_WORLD_SIZE", str(workers))
    monkeypatch.setenv("PSCORE_MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("PSCORE_MASTER_PORT", "1")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return current_run(pscore.ClusterSpec(**fields))


def test_the_job_must_match_its_topology(monkeypatch):
    run = run_of(monkeypatch, DOWNPOUR, workers=4, PSCORE_NUM_SERVERS="2")
    assert (run.worker_groups, run.num_servers) == (2, 2)
    assert strategies.auto(run, torch.nn.Linear(2, 2)) == "ps-async"
    with pytest.raises(ValueError, match="2 x 2 = 4 workers, but this job runs 3"):
        run_of(monkeypatch, DOWNPOUR, workers=3, PSCORE_NUM_SERVERS="2")
    with pytest.raises(ValueError, match="= 2 parameter-server shards, but the job has 0"):
        run_of(monkeypatch, DOWNPOUR, workers=4)
    with pytest.raises(ValueError, match="nworker_groups=2, but PSCORE_WORKER_GROUPS=4"):
        run_of(monkeypatch, DOWNPOUR, workers=4, PSCORE_NUM_SERVERS="2", PSCORE_WORKER_GROUPS="4")


def test_auto_follows_the_topology_into_the_trainer(monkeypatch):
    monkeypatch.delenv("PSCORE_RANK", raising=False)
    spec = pscore.ClusterSpec(nworker_groups=1, nserver_groups=1, server_worker_separate=True)
    with pytest.raises(ValueError, match=r"ps-sync framework has .* 1 parameter-server shards"):
        pscore.Trainer(torch.nn.Linear(2, 2), torch.nn.functional.mse_loss, strategy="auto",
                       cluster=spec)  # fmt: skip


def test_worker_groups_must_divide_the_workers(monkeypatch):
    run = run_of(monkeypatch, {}, workers=3, PSCORE_NUM_SERVERS="1", PSCORE_WORKER_GROUPS="2")
    with pytest.raises(ValueError, match="2 worker groups do not divide 3 workers"):
        strategies.make("ps-async", run, None).check(run)


# --- the same script on every task ---------------------------------------------------------
SCRIPT = """
    import torch, pscore
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(64, 4, generator=g), torch.randint(0, 2, (64,), generator=g)
    trainer = pscore.Trainer(model, torch.nn.functional.cross_entropy, strategy="ps-sync",
                             optimizer_args={"lr": 0.1})
    trainer.fit((x, y), epochs=2, batch_size=16)
    print("done", trainer.run.role, model.weight.sum().item(), flush=True)
"""


def test_tf_config_tasks_start_in_any_order_ps_last(tmp_path):
    script = write(tmp_path, "tf.py", SCRIPT)
    cluster = {r: [f"127.0.0.1:{free_port()}"] for r in ("chief", "worker", "ps")}
    procs = {}
    try:
        for role in ("worker", "chief", "ps"):
            tf = json.dumps({"cluster": cluster, "task": {"type": role, "index": 0}})
            procs[role] = subprocess.Popen(
                [sys.executable, script],
                env=environment(TF_CONFIG=tf),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            if role != "ps":
                with contextlib.suppress(subprocess.TimeoutExpired):
                    procs[role].wait(1.5)  # the next task starts once this one is under way
        outs = {role: p.communicate(timeout=HANG_GUARD_S) for role, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    for role, p in procs.items():
        assert p.returncode == 0, (role, outs[role][1][-3000:])
    weights = {r: outs[r][0].split()[-1] for r in ("chief", "worker")}
    assert weights["chief"] == weights["worker"]  # both pulled the servers' final weights


def test_pserver_by_hand_with_workers_from_pscore_run(tmp_path):
    """pserver processes + workers that find them through PSCORE_STORE / PSCORE_NUM_SERVERS;
    the servers are the user's: they keep running until told to stop."""
    store = TCPStore("127.0.0.1", 0, is_master=True)
    url = f"tcp://127.0.0.1:{store.port}"
    flags = ["--num-shards", "2", "--num-workers", "2", "--store", url]
    servers = [
        subprocess.Popen(
            [sys.executable, "-m", "pscore.ps.pserver", "--shard", str(i), *flags],
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        script = write(tmp_path, "job.py", SCRIPT)
        result = launch(["-n", "2", script], tmp_path, PSCORE_STORE=url, PSCORE_NUM_SERVERS="2")
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.count("done") == 2
        assert all(s.poll() is None for s in servers)
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
        for s in servers:
            s.communicate(timeout=30)
    assert all(s.returncode == 0 for s in servers)


PS_TASK = """
    import torch, pscore
    pscore.Trainer(torch.nn.Linear(2, 2), torch.nn.functional.mse_loss, strategy="ps-sync")
"""


def test_a_ps_task_whose_store_vanishes_exits_non_zero(tmp_path):
    port = free_port()
    store = subprocess.Popen(
        [sys.executable, "-m", "pscore.store.server", "--port", str(port)],
        env=environment(),
        stdout=subprocess.PIPE,
        text=True,
    )
    roles = {"PSCORE_ROLE": "ps", "PSCORE_SHARD": "0", "PSCORE_NUM_SERVERS": "1"}
    roles |= {"PSCORE_NUM_WORKERS": "2", "PSCORE_STORE": f"tcp://127.0.0.1:{port}"}
    ps = subprocess.Popen(
        [sys.executable, write(tmp_path, "ps.py", PS_TASK)],
        env=environment(**roles),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert "serving on 127.0.0.1:" in ps.stdout.readline()
        store.terminate()
        store.communicate(timeout=30)
        _, err = ps.communicate(timeout=HANG_GUARD_S)
    finally:
        for p in (ps, store):
            if p.poll() is None:
                p.kill()
    assert ps.returncode == 1
    assert "ps task (shard 0): the job's store at tcp://127.0.0.1:" in err
    assert "stopped answering after 0 of 2 workers finished" in err
