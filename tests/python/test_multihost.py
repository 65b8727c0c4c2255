"""Ranks on two 'hosts': real network namespaces on one link (netns_helpers; needs root and
iproute2, skipped otherwise). Checks the non-loopback address path and a link that goes down."""

import json
import os
import re
import subprocess
import sys
import uuid

import netns_helpers

two_hosts = netns_helpers.hosts_fixture(2)

WORKER = r"""
import json, os, sys, time
import numpy as np
import pscore
rank, world, url, flag = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
pscore.init_process_group(init_method=url, rank=rank, world_size=world, timeout=4)
x = np.full(300_000, rank + 1, np.float64)   # ring path
pscore.all_reduce(x)
y = np.array([rank], np.int64)
pscore.all_reduce(y, op="max")
out = {"rank": rank, "sum": float(x[0]), "max": int(y[0]), "backend": pscore.get_backend()}
print(json.dumps(out), flush=True)
while not os.path.exists(flag):   # the test cuts the link, then lets us go on
    time.sleep(0.05)
start = time.monotonic()
try:
    pscore.all_reduce(x)
    out = {"error": None}
except Exception as e:
    out = {"error": type(e).__name__, "msg": str(e), "elapsed": time.monotonic() - start}
print(json.dumps(out), flush=True)
os._exit(0)
"""


def test_ranks_on_two_hosts_and_a_cut_link(two_hosts, tmp_path):
    flag = tmp_path / "go"
    url = f"tcp://{two_hosts[0].addr}:29591"
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(sys.path),
        PSCORE_TRANSPORT="tcp",
        PSCORE_AUTH_TOKEN="netns-test-secret",
    )
    placement = [0, 0, 1]  # ranks 0 and 1 on host A, rank 2 on host B
    procs = [
        subprocess.Popen(
            two_hosts[h].command(
                sys.executable, "-c", WORKER, str(r), str(len(placement)), url, str(flag)
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r, h in enumerate(placement)
    ]
    try:
        first = [json.loads(p.stdout.readline() or "{}") for p in procs]
        assert [f.get("sum") for f in first] == [6.0] * 3, [
            p.stderr.read() for p in procs if not first
        ]
        assert {f["backend"] for f in first} == {"pscore/tcp"}
        assert [f["max"] for f in first] == [2, 2, 2]
        # Cut host B off, then let every rank start the next allreduce.
        two_hosts[1].set_link(up=False)
        flag.write_text("go")
        second = [json.loads(p.stdout.readline() or "{}") for p in procs]
    finally:
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
    for r, s in enumerate(second):
        assert s.get("error") in ("TimeoutError", "NetworkError"), (r, s)
        assert s["elapsed"] < 4 + 2.0, (r, s)
        assert "allreduce #2" in s["msg"], (r, s)
    # Rank 2 is cut off from both others: its error names one of them, theirs name rank 2 or
    # the neighbour that reported it.
    assert re.search(r"rank [01]\b", second[2]["msg"]), second[2]
    assert all(re.search(r"rank [0-2]\b.*rank [0-2]\b", s["msg"]) for s in second), second


HOGWILD_MACHINE = r"""
import json, os, sys
import pscore
from pscore.hogwild import DistributedHogwild, SharedTable, train
from test_hogwild_distributed import DIM, ROWS, _machine_worker
rank, url, name, mode = int(sys.argv[1]), sys.argv[2], sys.argv[4], sys.argv[5]
steps = int(sys.argv[3])
pscore.init_process_group(init_method=url, rank=rank, world_size=2, timeout=5)
if mode == "machine-1-leaves" and rank == 1:
    os._exit(0)  # this machine goes away before the first averaging round
t = SharedTable.create(name, (ROWS, DIM))
try:
    sync = DistributedHogwild([t], 25, locked=True)
    train(_machine_worker, num_procs=2, args=(t, rank, steps), sync=sync, timeout=60)
    out = {"col0": t.numpy()[:, 0].tolist(), "sum": float(t.numpy().sum()), "rounds": sync.rounds}
except Exception as e:
    out = {"error": type(e).__name__, "msg": str(e)}
t.close()
print(json.dumps(out), flush=True)
os._exit(0)
"""


def _hogwild_machines(hosts: list, mode: str, steps: int, port: int) -> list:
    for host in hosts:  # an earlier test may have cut the link
        host.set_link(up=True)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(sys.path),
        PSCORE_TRANSPORT="tcp",
        PSCORE_AUTH_TOKEN="netns-test-secret",
    )
    url = f"tcp://{hosts[0].addr}:{port}"
    procs = [
        subprocess.Popen(
            hosts[r].command(
                sys.executable,
                "-c",
                HOGWILD_MACHINE,
                str(r),
                url,
                str(steps),
                f"pmh-{r}-{uuid.uuid4().hex[:8]}",
                mode,
            ),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]
    outs = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            p.kill()
            stdout, stderr = p.communicate()
        line = stdout.strip().splitlines()[-1] if stdout.strip() else "{}"
        outs.append((json.loads(line), stderr[-2000:]))
    return outs


def test_distributed_hogwild_between_two_hosts(two_hosts):
    """A Hogwild group of 2 worker processes per host, tables averaged across the veth link
    every 25 local steps; integer updates, so the final tables are checked exactly."""
    steps = 200
    (a, err_a), (b, err_b) = _hogwild_machines(two_hosts, "train", steps, 29592)
    assert "col0" in a and "col0" in b, (a, err_a, b, err_b)
    assert a["col0"] == b["col0"] == [steps] * 4
    assert a["sum"] == b["sum"] == steps * 4 * 8
    assert a["rounds"] == b["rounds"] >= 2


def test_distributed_hogwild_reports_a_host_that_goes_away(two_hosts):
    """Host B leaves after joining: host A's averaging round fails fast, naming rank 1, its
    workers are stopped and its train() raises instead of hanging."""
    (a, err_a), (b, _) = _hogwild_machines(two_hosts, "machine-1-leaves", 200, 29593)
    assert a.get("error") in ("NetworkError", "TimeoutError"), (a, err_a)
    assert "rank 1" in a["msg"], a
    assert b == {}, (a, b)
