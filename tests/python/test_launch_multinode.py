"""pscore-run across two 'nodes': one launcher per network namespace (netns_helpers; skipped
where namespaces are not permitted), --nnodes 2 --node-rank i, node 0's address as the master.
A job that reduces and checks its result, and one whose rank fails."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import netns_helpers

two_hosts = netns_helpers.hosts_fixture(2)

JOB = """
    import os, sys
    import numpy as np
    import pscore
    pscore.init_process_group(timeout=30)
    rank, world = pscore.get_rank(), pscore.get_world_size()
    x = np.full(200_000, rank + 1.0)   # the ring path, across the veth link
    pscore.all_reduce(x)
    assert (x == world * (world + 1) / 2).all(), x[:4]
    print(f"rank {rank} of {world} sum {x[0]} over {pscore.get_backend()}", flush=True)
    pscore.barrier()
    if rank == int(sys.argv[1]):
        raise RuntimeError(f"rank {rank} fails on purpose")
    if int(sys.argv[1]) >= 0:
        pscore.all_reduce(x)   # the others see the failed rank go
"""


def _run_nodes(hosts: list, tmp_path, port: int, fail_rank: int, nproc: int = 2) -> list:
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(JOB))
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(sys.path),
        PSCORE_TRANSPORT="tcp",  # the namespaces share /dev/shm; make the ranks use the link
        PSCORE_AUTH_TOKEN="launch-netns-secret",  # binding a non-loopback address needs one
    )
    launcher = [sys.executable, "-m", "pscore.launch", "--nnodes", "2"]
    launcher += ["--master-addr", hosts[0].addr]
    job = ["--master-port", str(port), "-n", str(nproc), str(script), str(fail_rank)]
    nodes = [
        subprocess.Popen(
            host.command(*launcher, "--node-rank", str(i), *job),
            env=env,
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, host in enumerate(hosts)
    ]
    results = []
    for node in nodes:
        try:
            out, err = node.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            node.kill()
            out, err = node.communicate()
        results.append((node.returncode, out, err))
    return results


def test_two_nodes_reduce_across_the_link(two_hosts, tmp_path):
    for attempt, nproc in enumerate((2, 2, 1)):
        results = _run_nodes(two_hosts, tmp_path, 29611 + attempt, fail_rank=-1, nproc=nproc)
        world = 2 * nproc
        total = world * (world + 1) / 2
        for node, (code, out, err) in enumerate(results):
            assert code == 0, (attempt, node, err[-3000:])
            ranks = range(node * nproc, (node + 1) * nproc)
            expected = [
                f"[rank{r}]: rank {r} of {world} sum {total} over pscore/tcp" for r in ranks
            ]
            assert sorted(out.splitlines()) == expected, (attempt, node, out, err[-3000:])


def test_a_failed_rank_on_node_1_is_summarised_there(two_hosts, tmp_path):
    (code0, _, err0), (code1, out1, err1) = _run_nodes(two_hosts, tmp_path, 29621, fail_rank=3)
    assert code1 == 1, err1[-3000:]
    assert "[rank3]: rank 3 of 4 sum 10.0 over pscore/tcp" in out1
    summary = err1[err1.index(" FAILED\n") :].splitlines()
    assert summary[1].startswith("  first failure: rank 3 (local rank 1, node 1, host "), err1
    assert summary[2].startswith("  exited with code 1 at "), err1
    assert summary[-1] == "    RuntimeError: rank 3 fails on purpose", err1
    assert "stopping the other 1 rank(s) on this node" in err1
    # Node 0's ranks lose their peers in the next all_reduce: an error, and a summary there too.
    assert code0 != 0 and "FAILED" in err0, err0[-3000:]
