"""Where this process stands in a training job: its role (chief, worker or ps), its rank among
the workers, how many workers and parameter-server shards the job has and how the workers are
grouped. Read from the launcher's environment (pscore-run, torchrun, TF_CONFIG, Slurm, MPI)
and the Trainer's cluster= argument."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..cluster.discovery import ClusterEnv, discover

__all__ = ["Run", "current_run"]


@dataclasses.dataclass(frozen=True)
class Run:
    role: str  # "chief" or "worker" (both train), "ps" (serves a shard)
    rank: int  # among the workers, 0 = the chief; -1 for ps tasks
    world_size: int  # workers
    num_servers: int = 0  # parameter-server shards (0: none configured)
    worker_groups: int = 1  # ps-async / ssp: workers split into this many synchronous groups
    shard: int = -1  # ps tasks: the shard this task serves
    env: ClusterEnv | None = None

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_server(self) -> bool:
        return self.role == "ps"


def current_run(cluster: Any = None) -> Run:
    """This process's Run from the environment (and `cluster`, a pscore.ClusterSpec)."""
    env = discover()
    spec = cluster if cluster is not None else env.cluster_spec
    if not env.is_collective_member:
        if env.role == "ps":
            servers = spec.num_tasks("ps") if spec is not None else 0
            return Run("ps", -1, _workers(spec), servers, shard=env.task_index, env=env)
        raise ValueError(
            f"a {env.role!r} task does not train; the Trainer runs on chief, worker and ps tasks"
        )
    servers = spec.num_tasks("ps") if spec is not None and "ps" in spec.jobs else 0
    role = "chief" if env.rank == 0 else "worker"
    return Run(role, env.rank, env.world_size, servers, env=env)


def _workers(spec: Any) -> int:
    if spec is None:
        return 0
    return sum(spec.num_tasks(j) for j in ("chief", "worker") if j in spec.jobs)
