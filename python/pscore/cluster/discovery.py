"""Where a process sits in its job: ``discover()`` reads the environment launchers set, and
``ClusterSpec`` is TensorFlow's job -> task-address map.

Sources, first match wins:

1. ``PSCORE_RANK`` / ``PSCORE_WORLD_SIZE`` (+ ``PSCORE_MASTER_ADDR``, ``PSCORE_MASTER_PORT``,
   ``PSCORE_LOCAL_RANK``, ``PSCORE_LOCAL_WORLD_SIZE``), set by ``pscore-run``;
2. torchrun / torch.distributed: ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``,
   ``LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` (also what Kubeflow's PyTorchJob sets); under torchrun
   (``TORCHELASTIC_USE_AGENT_STORE=True``) the store is the agent's, keyed by
   ``TORCHELASTIC_RUN_ID`` and ``TORCHELASTIC_RESTART_COUNT``;
3. ``TF_CONFIG`` (TFJob, tf.distribute): chief first, then workers, form the collective world;
   ``ps`` and ``evaluator`` tasks are outside it (rank -1) but reported with the cluster;
4. Slurm (``SLURM_PROCID``, ``SLURM_NTASKS``...): the first node of the nodelist is the master;
   with ``PSCORE_NUM_SERVERS=M`` the last M tasks are ``ps`` tasks (rank -1, ``task_index`` the
   shard) and the others the collective world, which keeps task 0 on the master's node;
5. Open MPI (``OMPI_COMM_WORLD_*``): the master comes from ``PSCORE_MASTER_ADDR`` /
   ``MASTER_ADDR`` (``127.0.0.1`` when every rank is on one node).

With none of them set, the process is a world of one (``source == "default"``). When a source
gives no local rank / local world size, one node is assumed (local = global).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping

from .. import _config
from .._config import Var
from .slurm import expand_nodelist, tasks_on_node
from .spec import ClusterSpec, split_address

__all__ = ["ClusterEnv", "discover"]

DEFAULT_MASTER_PORT = 29500  # torch.distributed's default, used by the Open MPI source
_TF_COLLECTIVE_JOBS = ("chief", "master", "worker")  # "master": older TFJob name of chief


@dataclasses.dataclass(frozen=True)
class ClusterEnv:
    """This process's place in the job. ``rank`` is -1 for TF tasks outside the collective
    world (ps, evaluator); ``role``/``task_index`` are the TF task (``worker``/rank otherwise)."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int
    source: str
    role: str = "worker"
    task_index: int = 0
    cluster_spec: ClusterSpec | None = None
    hosts: list[str] = dataclasses.field(default_factory=list)  # Slurm: the expanded nodelist
    # torchrun: the agent serves the store at master_addr:master_port and every rank connects to
    # it as a client; this attempt's keys live under this prefix (pscore.store.torch_store).
    # None: rank 0 serves the store.
    agent_store_prefix: str | None = None

    @property
    def is_collective_member(self) -> bool:
        return self.rank >= 0


def discover(environ: Mapping[str, str] | None = None) -> ClusterEnv:
    """Reads this process's rank, world and master from the environment (see the module doc).
    Raises ValueError naming the variable for malformed values."""
    env = os.environ if environ is None else environ
    if _config.RANK.name in env or _config.WORLD_SIZE.name in env:
        return _from_pscore(env)
    if "RANK" in env or "WORLD_SIZE" in env:
        return _from_torchrun(env)
    if env.get("TF_CONFIG", "").strip():
        return _from_tf_config(env)
    if "SLURM_PROCID" in env and ("SLURM_NTASKS" in env or "SLURM_STEP_NUM_TASKS" in env):
        return _from_slurm(env)
    if "OMPI_COMM_WORLD_RANK" in env:
        return _from_openmpi(env)
    return ClusterEnv(0, 1, 0, 1, "127.0.0.1", 0, "default")


# ----------------------------------------------------------------------------- helpers


# A variable is a launcher's name (RANK, SLURM_PROCID...) or one of pscore's own, declared in
# pscore._config (which reads those).
Key = str | Var


def _name(key: Key) -> str:
    return key.name if isinstance(key, Var) else key


def _text(env: Mapping[str, str], key: Key) -> str | None:
    """The stripped value, or None when unset or blank."""
    if isinstance(key, Var):
        return key.raw(env)
    return env.get(key, "").strip() or None


def _int(env: Mapping[str, str], key: Key, default: int | None = None) -> int:
    text = _text(env, key)
    if text is None:
        if default is None:
            raise ValueError(f"environment variable {_name(key)} is not set")
        return default
    try:
        return int(text, 10)
    except ValueError:
        raise ValueError(f"environment variable {_name(key)}={text!r} is not an integer") from None


def _first(env: Mapping[str, str], *keys: Key) -> Key | None:
    return next((k for k in keys if _text(env, k) is not None), None)


def _check_world(rank: int, world: int, rank_key: Key, world_key: Key) -> None:
    if world < 1:
        raise ValueError(f"{_name(world_key)}={world} must be >= 1")
    if not 0 <= rank < world:
        raise ValueError(f"{_name(rank_key)}={rank} is out of range for {_name(world_key)}={world}")


def _check_port(port: int, key: Key) -> int:
    if not 0 <= port <= 65535:
        raise ValueError(f"{_name(key)}={port} is not a port number (0..65535)")
    return port


def _local(
    env: Mapping[str, str], rank_names: tuple, size_names: tuple, rank: int, world: int
) -> tuple:
    """(local_rank, local_world_size) from the first set names; one node when not given."""
    r_key, s_key = _first(env, *rank_names), _first(env, *size_names)
    local_rank = _int(env, r_key) if r_key else rank
    local_world = _int(env, s_key) if s_key else world
    if local_world < 1 or not 0 <= local_rank < local_world:
        raise ValueError(
            f"{_name(r_key) if r_key else 'the local rank'}={local_rank} is out of range for "
            f"{_name(s_key) if s_key else 'the local world size'}={local_world}"
        )
    return local_rank, local_world


def _master(env: Mapping[str, str], addr_names: tuple, port_names: tuple, world: int) -> tuple:
    """(addr, port) from the first set names; a world of one may leave them out."""
    a_key, p_key = _first(env, *addr_names), _first(env, *port_names)
    for key, keys in ((a_key, addr_names), (p_key, port_names)):
        if key is None and world > 1:
            names = " or ".join(map(_name, keys))
            raise ValueError(f"{names} must be set when the world has {world} ranks")
    addr = _text(env, a_key) if a_key else "127.0.0.1"
    port = _check_port(_int(env, p_key), p_key) if p_key else 0
    return addr, port


# ----------------------------------------------------------------------------- sources


def _from_pscore(env: Mapping[str, str]) -> ClusterEnv:
    c = _config
    rank, world = _int(env, c.RANK), _int(env, c.WORLD_SIZE)
    _check_world(rank, world, c.RANK, c.WORLD_SIZE)
    addr, port = _master(env, (c.MASTER_ADDR, "MASTER_ADDR"), (c.MASTER_PORT, "MASTER_PORT"), world)
    local = _local(
        env, (c.LOCAL_RANK, "LOCAL_RANK"), (c.LOCAL_WORLD_SIZE, "LOCAL_WORLD_SIZE"), rank, world
    )
    return ClusterEnv(rank, world, *local, addr, port, "pscore", task_index=rank)


def _from_torchrun(env: Mapping[str, str]) -> ClusterEnv:
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    _check_world(rank, world, "RANK", "WORLD_SIZE")
    addr, port = _master(env, ("MASTER_ADDR",), ("MASTER_PORT",), world)
    local = _local(env, ("LOCAL_RANK",), ("LOCAL_WORLD_SIZE",), rank, world)
    prefix = None
    if env.get("TORCHELASTIC_USE_AGENT_STORE") == "True":
        run_id = env.get("TORCHELASTIC_RUN_ID", "none")
        prefix = f"pscore/{run_id}/attempt_{_int(env, 'TORCHELASTIC_RESTART_COUNT', 0)}"
    return ClusterEnv(
        rank, world, *local, addr, port, "torchrun", task_index=rank, agent_store_prefix=prefix
    )


def _from_tf_config(env: Mapping[str, str]) -> ClusterEnv:
    try:
        config = json.loads(env["TF_CONFIG"])
    except json.JSONDecodeError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from None
    if not isinstance(config, dict):
        raise ValueError("TF_CONFIG must be a JSON object with 'cluster' and 'task'")  # noqa: TRY004 - malformed config
    spec = ClusterSpec.from_tf_config(config)
    task = config.get("task")
    if not isinstance(task, dict) or not isinstance(task.get("type"), str):
        raise ValueError('TF_CONFIG has no \'task\': {"type": ..., "index": ...}')  # noqa: TRY004 - malformed config
    role = task["type"]
    index = task.get("index", 0)
    if isinstance(index, bool) or not isinstance(index, int):
        raise ValueError(f"TF_CONFIG task index {index!r} is not an integer")  # noqa: TRY004 - malformed config
    members = [
        (job, i) for job in _TF_COLLECTIVE_JOBS if job in spec.jobs for i in spec.task_indices(job)
    ]
    if not members:
        raise ValueError("TF_CONFIG cluster has no chief or worker tasks")
    if role in spec.jobs and index not in spec.task_indices(role):
        raise ValueError(f"TF_CONFIG task {role}:{index} is not in the cluster's {role!r} job")
    master_host, master_port = split_address(spec.task_address(*members[0]))
    me = (role, index)
    rank = members.index(me) if me in members else -1
    hosts = [split_address(spec.task_address(*m))[0] for m in members]
    local_rank, local_world = 0, 1
    if rank >= 0:
        local_world = hosts.count(hosts[rank])
        local_rank = hosts[:rank].count(hosts[rank])
    return ClusterEnv(
        rank,
        len(members),
        local_rank,
        local_world,
        master_host,
        master_port,
        "tf_config",
        role=role,
        task_index=index,
        cluster_spec=spec,
    )


def _from_slurm(env: Mapping[str, str]) -> ClusterEnv:
    world_name = _first(env, "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS") or "SLURM_NTASKS"
    rank, world = _int(env, "SLURM_PROCID"), _int(env, world_name)
    _check_world(rank, world, "SLURM_PROCID", world_name)
    list_name = _first(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    hosts = expand_nodelist(env[list_name], list_name) if list_name else []
    addr_key = _first(env, _config.MASTER_ADDR, "MASTER_ADDR")
    if addr_key:
        addr = _text(env, addr_key)
    elif hosts:
        addr = hosts[0]
    elif world == 1:
        addr = "127.0.0.1"
    else:
        raise ValueError("Slurm: SLURM_JOB_NODELIST is not set and neither is MASTER_ADDR")
    port_key = _first(env, _config.MASTER_PORT, "MASTER_PORT")
    if port_key:
        port = _check_port(_int(env, port_key), port_key)
    elif "SLURM_JOB_ID" in env:
        port = 10000 + _int(env, "SLURM_JOB_ID") % 20000  # the same on every task of the job
    else:
        raise ValueError("Slurm: set MASTER_PORT (SLURM_JOB_ID, which derives one, is not set)")
    local_rank = _int(env, "SLURM_LOCALID", 0)
    local_world = _slurm_local_world(env, hosts, world)
    if not 0 <= local_rank < local_world:
        raise ValueError(
            f"SLURM_LOCALID={local_rank} is out of range for {local_world} tasks on this node"
        )
    whole = ClusterEnv(
        rank, world, local_rank, local_world, addr, port, "slurm", task_index=rank, hosts=hosts
    )
    servers = _config.NUM_SERVERS.get(env)
    return _slurm_with_servers(env, whole, servers) if servers else whole


def _slurm_with_servers(env: Mapping[str, str], whole: ClusterEnv, servers: int) -> ClusterEnv:
    """The Slurm job split into workers (the first tasks) and `servers` ps tasks (the last).
    Under srun's block distribution a node runs consecutive tasks, this task's node those from
    SLURM_PROCID - SLURM_LOCALID on; its workers are the node's local world."""
    c = _config
    workers = whole.world_size - servers
    if servers < 0 or workers < 1:
        raise ValueError(
            f"Slurm: {c.NUM_SERVERS.name}={servers} leaves no worker among the job's "
            f"{whole.world_size} tasks (SLURM_NTASKS)"
        )
    told = c.NUM_WORKERS.get(env)
    if told is not None and told != workers:
        raise ValueError(
            f"Slurm: {c.NUM_WORKERS.name}={told}, but SLURM_NTASKS={whole.world_size} tasks less "
            f"{c.NUM_SERVERS.name}={servers} ps tasks leave {workers} workers"
        )
    distribution = env.get("SLURM_DISTRIBUTION", "block").strip() or "block"
    if not distribution.startswith("block"):
        raise ValueError(
            f"Slurm: SLURM_DISTRIBUTION={distribution}; ps and worker tasks need srun's block "
            "distribution (srun --distribution=block), where a node runs consecutive tasks"
        )
    if whole.rank >= workers:
        shard = whole.rank - workers
        return dataclasses.replace(
            whole,
            rank=-1,
            world_size=workers,
            local_rank=0,
            local_world_size=1,
            role="ps",
            task_index=shard,
        )
    first_here = whole.rank - whole.local_rank
    workers_here = min(first_here + whole.local_world_size, workers) - first_here
    return dataclasses.replace(whole, world_size=workers, local_world_size=workers_here)


def _slurm_local_world(env: Mapping[str, str], hosts: list[str], world: int) -> int:
    per_node = env.get("SLURM_NTASKS_PER_NODE", "").strip()
    if per_node.isdigit():
        return int(per_node)
    name = _first(env, "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE")
    if name:
        return tasks_on_node(env[name], _int(env, "SLURM_NODEID", 0), name)
    if len(hosts) <= 1:
        return world
    if world % len(hosts) == 0:
        return world // len(hosts)
    raise ValueError(
        "Slurm: cannot tell how many tasks run on this node; set SLURM_NTASKS_PER_NODE"
    )


def _from_openmpi(env: Mapping[str, str]) -> ClusterEnv:
    rank, world = _int(env, "OMPI_COMM_WORLD_RANK"), _int(env, "OMPI_COMM_WORLD_SIZE")
    _check_world(rank, world, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")
    local_rank = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK", rank)
    local_world = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE", world)
    if not 0 <= local_rank < local_world:
        raise ValueError(
            f"OMPI_COMM_WORLD_LOCAL_RANK={local_rank} is out of range for "
            f"OMPI_COMM_WORLD_LOCAL_SIZE={local_world}"
        )
    addr_key = _first(env, _config.MASTER_ADDR, "MASTER_ADDR")
    if addr_key:
        addr = _text(env, addr_key)
    elif local_world == world:
        addr = "127.0.0.1"
    else:
        raise ValueError(
            "Open MPI across nodes: set MASTER_ADDR (or PSCORE_MASTER_ADDR) to rank 0's host, "
            "e.g. mpirun -x MASTER_ADDR=host0"
        )
    port_key = _first(env, _config.MASTER_PORT, "MASTER_PORT")
    port = _check_port(_int(env, port_key), port_key) if port_key else DEFAULT_MASTER_PORT
    return ClusterEnv(rank, world, local_rank, local_world, addr, port, "openmpi", task_index=rank)
