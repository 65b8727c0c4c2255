"""examples/slurm: what pscore reads from each task's Slurm variables (roles, ranks, errors),
then the sbatch script itself, run as Slurm would run it: the batch script on the first node
of an allocation its #SBATCH lines ask for, every node a network namespace with its own name,
and srun (tests/python/slurm_srun.py) starting the tasks with the variables slurmd sets."""

import os
import re
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from netns_helpers import named_hosts

import pscore
from pscore.cluster import discover

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "slurm" / "train_digits.sbatch"
RUN_TIMEOUT_S = 240  # a hang guard: the job takes ~20-40 s here


def task_env(procid: int, per_node: list[int], **extra: str) -> dict[str, str]:
    """Slurm's variables for task `procid` of a block-distributed step on nodes node01...
    with `per_node` tasks each."""
    node_id = next(i for i in range(len(per_node)) if procid < sum(per_node[: i + 1]))
    nodes = ",".join(f"node{i + 1:02d}" for i in range(len(per_node)))
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": nodes,
        "SLURM_NTASKS": str(sum(per_node)),
        "SLURM_TASKS_PER_NODE": ",".join(map(str, per_node)),
        "SLURM_PROCID": str(procid),
        "SLURM_NODEID": str(node_id),
        "SLURM_LOCALID": str(procid - sum(per_node[:node_id])),
        **extra,
    }


# ----------------------------------------------------------------------------- roles


def test_the_last_tasks_serve_and_the_others_train():
    per_node = [2, 2]  # tasks 0, 1 on node01; 2 (a worker) and 3 (the ps task) on node02
    envs = [discover(task_env(r, per_node, PSCORE_NUM_SERVERS="1")) for r in range(4)]
    assert [(e.role, e.rank, e.task_index) for e in envs] == [
        ("worker", 0, 0), ("worker", 1, 1), ("worker", 2, 2), ("ps", -1, 0),
    ]  # fmt: skip
    assert {e.world_size for e in envs} == {3}
    assert [(e.local_rank, e.local_world_size) for e in envs[:3]] == [(0, 2), (1, 2), (0, 1)]
    assert {(e.master_addr, e.master_port) for e in envs} == {("node01", 10000 + 4242)}


def test_without_servers_every_task_trains():
    envs = [discover(task_env(r, [2, 1])) for r in range(3)]
    assert [(e.role, e.rank, e.world_size) for e in envs] == [("worker", r, 3) for r in range(3)]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"PSCORE_NUM_SERVERS": "3"}, "PSCORE_NUM_SERVERS=3 leaves no worker among the job's 3"),
        (
            {"PSCORE_NUM_SERVERS": "1", "PSCORE_NUM_WORKERS": "3"},
            "PSCORE_NUM_WORKERS=3, but SLURM_NTASKS=3 tasks less PSCORE_NUM_SERVERS=1",
        ),
        (
            {"PSCORE_NUM_SERVERS": "1", "SLURM_DISTRIBUTION": "cyclic"},
            "SLURM_DISTRIBUTION=cyclic; ps and worker tasks need srun's block distribution",
        ),
    ],
)
def test_inconsistent_variables_are_refused(extra, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        discover(task_env(0, [2, 1], **extra))


def test_a_ps_task_knows_its_shard_and_the_workers(monkeypatch):
    from pscore.train.run import current_run

    for key, value in task_env(4, [3, 2], PSCORE_NUM_SERVERS="2").items():
        monkeypatch.setenv(key, value)
    run = current_run()
    assert (run.role, run.shard, run.num_servers, run.world_size) == ("ps", 1, 2, 3)


# ----------------------------------------------------------------------------- the script


def sbatch_options(script: Path) -> dict[str, str]:
    return dict(re.findall(r"^#SBATCH --([\w-]+)=(\S+)", script.read_text(), re.MULTILINE))


def tasks_per_node(options: dict[str, str]) -> list[int]:
    """Slurm's block layout of the allocation: the first nodes get the extra tasks."""
    nodes = int(options.get("nodes", "1"))
    if "ntasks-per-node" in options:
        return [int(options["ntasks-per-node"])] * nodes
    base, extra = divmod(int(options["ntasks"]), nodes)
    return [base + (i < extra) for i in range(nodes)]


def compressed_tasks(counts: list[int]) -> str:
    """Slurm's SLURM_TASKS_PER_NODE form: [2, 2, 1] -> "2(x2),1"."""
    runs: list[list[int]] = []
    for c in counts:
        if runs and runs[-1][0] == c:
            runs[-1][1] += 1
        else:
            runs.append([c, 1])
    return ",".join(f"{c}(x{n})" if n > 1 else str(c) for c, n in runs)


def batch_env(options: dict[str, str], nodes: list[str], counts: list[int], home: str) -> dict:
    """What sbatch gives the batch script (on the first node of the allocation)."""
    nodelist = f"node[01-{len(nodes):02d}]" if len(nodes) > 1 else nodes[0]
    slurm = {
        "SLURM_JOB_ID": "73519",
        "SLURM_JOBID": "73519",
        "SLURM_JOB_NAME": options.get("job-name", "sbatch"),
        "SLURM_JOB_NODELIST": nodelist,
        "SLURM_NODELIST": nodelist,
        "SLURM_JOB_NUM_NODES": str(len(nodes)),
        "SLURM_NNODES": str(len(nodes)),
        "SLURM_NTASKS": str(sum(counts)),
        "SLURM_NPROCS": str(sum(counts)),
        "SLURM_TASKS_PER_NODE": compressed_tasks(counts),
        "SLURM_JOB_CPUS_PER_NODE": compressed_tasks(counts),
        "SLURM_CPUS_PER_TASK": options.get("cpus-per-task", "1"),
        "SLURM_SUBMIT_DIR": str(ROOT),
        "SLURM_SUBMIT_HOST": "login01",
        "SLURM_CLUSTER_NAME": "test",
        "SLURM_NODEID": "0",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURMD_NODENAME": nodes[0],
    }
    if "ntasks-per-node" in options:
        slurm["SLURM_NTASKS_PER_NODE"] = options["ntasks-per-node"]
    return slurm | {
        "HOME": home,
        "PYTHONPATH": os.path.dirname(os.path.dirname(pscore.__file__)),
        "OMP_NUM_THREADS": "1",
    }


def test_the_sbatch_script_runs_to_the_end(tmp_path):
    options = sbatch_options(SCRIPT)
    counts = tasks_per_node(options)
    nodes = [f"node{i + 1:02d}" for i in range(len(counts))]
    (tmp_path / ".pscore-token").write_text(secrets.token_hex(32) + "\n")
    (tmp_path / ".pscore-token").chmod(0o600)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text(
        f'#!/bin/sh\nexec {sys.executable} {Path(__file__).parent}/slurm_srun.py "$@"\n'
    )
    srun.chmod(0o755)
    env = batch_env(options, nodes, counts, str(tmp_path))
    env["PATH"] = os.pathsep.join(
        [str(bin_dir), os.path.dirname(sys.executable), os.environ["PATH"]]
    )
    with named_hosts({n: [] for n in nodes}) as hosts:
        env["SRUN_NODES"] = ",".join(f"{n}={hosts[n].namespace}={c}" for n, c in zip(nodes, counts))
        batch = subprocess.Popen(
            hosts[nodes[0]].command("bash", str(SCRIPT)), env=env, cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        )  # fmt: skip
        try:
            output = batch.communicate(timeout=RUN_TIMEOUT_S)[0]
        finally:  # the batch script, srun and its tasks share one process group
            if batch.poll() is None:
                os.killpg(batch.pid, signal.SIGKILL)
                batch.wait()
        ps_address = hosts[nodes[-1]].addr
    assert batch.returncode == 0, output
    assert re.search(r"strategy ps-sync: .* test accuracy 0\.9\d+", output), output
    assert f"pscore: ps task (shard 0) serving on {ps_address}:" in output, output
