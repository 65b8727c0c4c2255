"""srun for test_deploy_slurm.py: runs one step over the whole allocation with block
distribution, every task in its node's network namespace with the variables slurmd gives a task.
The allocation is SRUN_NODES="node01=netns=tasks,node02=...", in node order (the test also
gives the batch script Slurm's compressed SLURM_JOB_NODELIST / SLURM_TASKS_PER_NODE for it).
Takes the options examples/slurm uses and refuses others, so a script that needs more of srun
fails here rather than passing untested.

    python slurm_srun.py [--distribution=block] [--kill-on-bad-exit[=1]] program args...
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from netns_helpers import in_host

__all__ = ["main"]


def parse(argv: list[str]) -> tuple[bool, list[str]]:
    """(kill on bad exit, the program's argv)."""
    kill = False
    while argv and argv[0].startswith("-"):
        option = argv.pop(0)
        if option in ("--kill-on-bad-exit", "--kill-on-bad-exit=1", "-K", "-K1"):
            kill = True
        elif option != "--distribution=block":
            sys.exit(f"srun (test): option {option!r} is not emulated")
    if not argv:
        sys.exit("srun (test): no program")
    return kill, argv


def task_environments() -> list[tuple[str, str, dict[str, str]]]:
    """(node, netns, environment) of every task of the step, in task order."""
    nodes = [item.split("=") for item in os.environ["SRUN_NODES"].split(",")]
    ntasks = sum(int(count) for _, _, count in nodes)
    step = {
        "SLURM_STEP_ID": "0",
        "SLURM_STEPID": "0",
        "SLURM_STEP_NODELIST": os.environ["SLURM_JOB_NODELIST"],
        "SLURM_STEP_NUM_NODES": str(len(nodes)),
        "SLURM_STEP_NUM_TASKS": str(ntasks),
        "SLURM_STEP_TASKS_PER_NODE": os.environ["SLURM_TASKS_PER_NODE"],
        "SLURM_DISTRIBUTION": "block",
    }
    tasks, first = [], 0
    for node_id, (node, netns, count) in enumerate(nodes):
        gtids = ",".join(str(first + i) for i in range(int(count)))
        for local in range(int(count)):
            env = dict(os.environ, **step)
            env.update(
                SLURM_PROCID=str(first + local),
                SLURM_LOCALID=str(local),
                SLURM_NODEID=str(node_id),
                SLURMD_NODENAME=node,
                SLURM_GTIDS=gtids,
            )
            tasks.append((node, netns, env))
        first += int(count)
    return tasks


def main() -> int:
    kill, program = parse(sys.argv[1:])
    procs = [
        subprocess.Popen(in_host(netns, node, program), env=env)
        for node, netns, env in task_environments()
    ]
    while any(p.poll() is None for p in procs):
        if kill and any(p.returncode not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.terminate()
        time.sleep(0.1)
    return max(abs(p.returncode) for p in procs)


if __name__ == "__main__":
    sys.exit(main())
