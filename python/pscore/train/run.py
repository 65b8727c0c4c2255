"""Where this process stands in a training job: its role (chief, worker or ps), its rank among
the workers, how many workers and parameter-server shards the job has and how the workers are
grouped.

The environment contract (what pscore-run --workers N --servers M [--worker-groups G] sets, and
what a user sets by hand): every task gets PSCORE_NUM_SERVERS=M, PSCORE_WORKER_GROUPS=G and
PSCORE_STORE (the store where the shards publish their addresses). Workers get the usual
PSCORE_RANK / PSCORE_WORLD_SIZE / master variables over the N workers only, and PSCORE_ROLE
chief (rank 0) or worker. A ps task gets PSCORE_ROLE=ps, PSCORE_SHARD and PSCORE_NUM_WORKERS=N
and no rank. Under TF_CONFIG the roles, ranks and shard count come from the cluster instead.
Under Slurm (srun, block distribution) every task gets the same PSCORE_NUM_SERVERS=M: the last
M of the SLURM_NTASKS tasks are the ps tasks (shard SLURM_PROCID - (SLURM_NTASKS - M)), the
others the workers (rank SLURM_PROCID, task 0 the chief on the nodelist's first node, which
serves the job's store at MASTER_PORT, else a port derived from SLURM_JOB_ID); a
PSCORE_NUM_WORKERS that disagrees, or another distribution, is a ValueError.

A ClusterSpec with SINGA's topology (``cluster=ClusterSpec(nworker_groups=2, ...)``) gives the
worker groups; the job that runs must agree with it (its workers, its shard count for a PS
framework, PSCORE_WORKER_GROUPS when set), else ValueError."""

from __future__ import annotations

import dataclasses
from typing import Any

from .. import _config
from ..cluster.discovery import ClusterEnv, discover
from ..cluster.spec import ClusterSpec
from ..cluster.topology import Topology

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
    topology: Topology | None = None  # SINGA's, from the ClusterSpec: "auto" follows it

    @property
    def is_chief(self) -> bool:
        return self.rank == 0

    @property
    def is_server(self) -> bool:
        return self.role == "ps"


def current_run(cluster: Any = None) -> Run:
    """This process's Run from the environment (and `cluster`, a pscore.ClusterSpec or the
    dict one is made from)."""
    if cluster is not None and not isinstance(cluster, ClusterSpec):
        cluster = ClusterSpec(cluster)
    run = _environment_run(cluster)
    topology = getattr(cluster, "topology", None)
    return run if topology is None else _with_topology(run, topology)


def _environment_run(cluster: Any) -> Run:
    groups = _config.WORKER_GROUPS.get()
    if _config.ROLE.get() == "ps":
        return _server_run(groups)
    env = discover()
    spec = cluster if cluster is not None and cluster.jobs else env.cluster_spec
    servers = _config.NUM_SERVERS.get()
    if servers is None:
        servers = spec.num_tasks("ps") if spec is not None and "ps" in spec.jobs else 0
    if not env.is_collective_member:
        if env.role == "ps":
            return Run("ps", -1, env.world_size, servers, groups, env.task_index, env)
        raise ValueError(
            f"a {env.role!r} task does not train; the Trainer runs on chief, worker and ps tasks"
        )
    role = "chief" if env.rank == 0 else "worker"
    return Run(role, env.rank, env.world_size, servers, groups, env=env)


def _with_topology(run: Run, t: Topology) -> Run:
    """`run` with the topology's worker groups; ValueError where the job disagrees with it."""
    if run.world_size != t.workers:
        raise ValueError(
            f"the ClusterSpec has nworker_groups x nworkers_per_group = {t.nworker_groups} x "
            f"{t.nworkers_per_group} = {t.workers} workers, but this job runs {run.world_size}"
        )
    given_groups = _config.WORKER_GROUPS.raw()
    if given_groups is not None and run.worker_groups != t.nworker_groups:
        raise ValueError(
            f"the ClusterSpec has nworker_groups={t.nworker_groups}, but "
            f"{_config.WORKER_GROUPS.name}={run.worker_groups}"
        )
    if t.servers and run.num_servers != t.servers:
        raise ValueError(
            f"the ClusterSpec's {t.strategy} framework has nserver_groups x nservers_per_group "
            f"= {t.servers} parameter-server shards, but the job has {run.num_servers} (start "
            f"them with pscore-run --servers {t.servers}, or list them as TF_CONFIG's ps tasks)"
        )
    return dataclasses.replace(run, worker_groups=t.nworker_groups, topology=t)


def _server_run(groups: int) -> Run:
    c = _config
    values = {v.name: v.get() for v in (c.SHARD, c.NUM_SERVERS, c.NUM_WORKERS)}
    missing = [name for name, v in values.items() if v is None]
    if missing:
        raise ValueError(f"{c.ROLE.name}=ps needs {', '.join(missing)} as well")
    shard, servers, workers = values.values()
    if not 0 <= shard < servers:
        raise ValueError(f"{c.SHARD.name}={shard} is outside 0..{c.NUM_SERVERS.name}-1 ({servers})")
    return Run("ps", -1, workers, servers, groups, shard)
