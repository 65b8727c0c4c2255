"""``pscore-run --workers N --servers M [--worker-groups G]``: a Trainer job's roles on this node.

M parameter-server tasks and N workers run the same script. Every task gets PSCORE_NUM_SERVERS,
PSCORE_WORKER_GROUPS, PSCORE_STORE (a TCPStore the launcher serves on loopback, where the shards
publish their addresses and the job's end is told; also served with --max-restarts K, for an
elastic job's workers to agree through it) and the job's PSCORE_JOB_ID. Workers get the
rank variables over the N workers only and PSCORE_ROLE chief (rank 0) or worker; ps task i gets
PSCORE_ROLE=ps, PSCORE_SHARD=i, PSCORE_NUM_WORKERS=N and no rank (the contract of
pscore.train.run)."""

from __future__ import annotations

import dataclasses

from .. import _config
from ..store.native import TCPStore

__all__ = ["Roles", "host_store", "resolve", "server_environment", "worker_environment"]

# What a ps task must not inherit: it has no rank among the workers.
_PSCORE_RANK_VARIABLES = (
    _config.RANK,
    _config.WORLD_SIZE,
    _config.LOCAL_RANK,
    _config.LOCAL_WORLD_SIZE,
    _config.MASTER_ADDR,
    _config.MASTER_PORT,
)
_RANK_VARIABLES = (
    *("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"),
    *("GROUP_RANK", "GROUP_WORLD_SIZE"),
    *(v.name for v in _PSCORE_RANK_VARIABLES),
)


@dataclasses.dataclass(frozen=True)
class Roles:
    workers: int
    servers: int
    groups: int
    store_port: int  # the launcher's store (0 without servers or --max-restarts)

    @property
    def store_url(self) -> str:
        return f"tcp://127.0.0.1:{self.store_port}"


def resolve(args, nnodes: int, pick_port) -> Roles | None:
    """Checks --workers / --servers / --worker-groups against -n and --nnodes and sets
    args.nproc (the workers on this node). None: a plain run (-n, or --workers alone)."""
    workers, servers, groups = args.workers, args.servers, args.worker_groups
    if workers is not None and args.nproc is not None:
        raise ValueError(
            f"-n {args.nproc} and --workers {workers} both say how many workers to start; "
            "give one (--workers with --servers for a job with parameter servers)"
        )
    if workers is None and (servers is not None or groups is not None):
        flag = "--servers" if servers is not None else "--worker-groups"
        raise ValueError(f"{flag} needs --workers N (the training workers; not -n)")
    if workers is None:
        args.nproc = 1 if args.nproc is None else args.nproc
        return None
    args.nproc = workers
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if servers is not None and servers < 1:
        raise ValueError(f"--servers must be >= 1, got {servers} (leave it out for no servers)")
    groups = 1 if groups is None else groups
    if groups < 1 or workers % groups:
        raise ValueError(
            f"--worker-groups {groups} does not divide --workers {workers} into equal groups"
        )
    # an elastic job's store outlives ranks
    restarts = (args.max_restarts > 0 or args.elastic) and nnodes == 1
    if servers is None and groups == 1 and not restarts:
        return None
    if nnodes > 1:
        raise ValueError(
            "--servers / --worker-groups start a Trainer job on one node; across nodes run "
            "pserver with PSCORE_STORE, or use TF_CONFIG (see docs/train.md)"
        )
    return Roles(workers, servers or 0, groups, pick_port() if servers or restarts else 0)


def _job_variables(env: dict, roles: Roles) -> None:
    env[_config.NUM_SERVERS.name] = str(roles.servers)
    env[_config.WORKER_GROUPS.name] = str(roles.groups)
    if roles.store_port:
        env[_config.STORE.name] = roles.store_url


def worker_environment(env: dict, roles: Roles, rank: int) -> dict:
    """A worker's environment (``env``: its rank environment) with the job's roles."""
    env = dict(env)
    _job_variables(env, roles)
    env[_config.ROLE.name] = "chief" if rank == 0 else "worker"
    return env


def server_environment(env: dict, roles: Roles, shard: int) -> dict:
    """ps task `shard`'s environment, from a worker's (``env``) without the rank variables."""
    env = dict(env)
    for name in _RANK_VARIABLES:
        env.pop(name, None)
    _job_variables(env, roles)
    env[_config.ROLE.name] = "ps"
    env[_config.SHARD.name] = str(shard)
    env[_config.NUM_WORKERS.name] = str(roles.workers)
    return env


def host_store(roles: Roles, job_id: str) -> TCPStore:
    """The job's store, served by the launcher for the whole run (started after the tasks: it
    runs threads, and the tasks are forked first; they retry until it is up)."""
    return TCPStore("127.0.0.1", roles.store_port, is_master=True, job_id=job_id)
