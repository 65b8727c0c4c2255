"""Process groups: the default group made by init_process_group, sub-groups from new_group, and
the bookkeeping that maps global ranks to group ranks (torch.distributed's model)."""

from __future__ import annotations

import datetime
import functools
import threading

from .. import _C, _config, stall
from .._enums import by_name
from ..store.create import create_store, env_store
from ..store.native import TCPStore
from ..store.prefix import PrefixStore
from . import failure_report, nccl_link, registration, rendezvous
from .stall_watch import GroupWatch

__all__ = [
    "NON_GROUP_MEMBER",
    "ProcessGroup",
    "build_group",
    "default_group",
    "destroy_process_group",
    "init_process_group",
    "is_initialized",
    "new_group",
    "resolve",
    "timeout_seconds",
    "tuning_from_env",
]

BACKENDS = ("tcp", "pscore", "cpu", "nccl", "auto")  # nccl, auto: CUDA tensors on NCCL
_BROKEN = ": the group is broken: "  # how a call on a group broken earlier fails (C++)


class CoreCalls:
    """The core group's collectives for the latency path (functions.py): _C.fast_calls'
    functions, bound to the group, which skip pybind11's dispatcher (~100-150 ns a call) and take
    the ProcessGroup methods' arguments, positionally."""

    __slots__ = (
        "all_to_all",
        "all_to_all_single",
        "allgather",
        "allgather_into",
        "allreduce",
        "barrier",
        "broadcast",
        "gather",
        "reduce",
        "reduce_scatter",
        "reduce_scatter_from",
        "scatter",
    )

    def __init__(self, native):
        calls = _C.fast_calls(native)
        for name in self.__slots__:
            setattr(self, name, calls[name])


class ProcessGroup:
    """A set of ranks with their own connections. `ranks` are global ranks, in group order.
    `nccl`: the group's NCCL side (nccl_link.py) for CUDA tensors, or None; `core`: the native
    group's latency-path methods (CoreCalls)."""

    def __init__(
        self, native, ranks: list[int], name: str, timeout_s: float, store=None, store_host=None
    ):
        self.native = native
        self.core = CoreCalls(native)
        self.nccl: nccl_link.NcclLink | None = None
        self.ranks = ranks
        self.name = name
        self.timeout_s = timeout_s
        self.store = store
        self.store_host = store_host  # the global rank whose process serves `store`, if known
        self._explained: dict[tuple[type, str], BaseException] = {}
        self._explaining = threading.Lock()
        self.stall_watch: GroupWatch | None = None  # reports this group's stalled collectives

    # Fixed for the native group's life; cached: every collective reads them (a native property
    # costs ~50 ns a read, an instance attribute ~15).
    @functools.cached_property
    def rank(self) -> int:
        return self.native.rank

    @functools.cached_property
    def size(self) -> int:
        return self.native.size

    @property
    def transport(self) -> str:
        return self.native.transport

    def explain(self, exc: BaseException) -> BaseException:
        """Adds the other ranks' accounts of a failure and names the rank that failed first
        (pscore.collectives.failure_report); bounded in time. Once per failure: threads that see
        the same error (the torch backend's completer and the caller both wait on a work) share
        one report rather than racing on the store."""
        key = (type(exc), str(exc))
        known = self._known_cause(str(exc))
        if known is not None:
            return type(exc)(known)
        with self._explaining:
            if key not in self._explained:
                self._explained[key] = failure_report.explain(
                    self.store, self.rank, exc, self._store_host_name()
                )
            explained = self._explained[key]
        return type(explained)(str(explained)) if explained is not exc else exc

    def _known_cause(self, message: str) -> str | None:
        """A later call's "<op>: the group is broken: <cause>" with the cause as it was
        explained when it happened; None when that failure was not explained here. The
        accounts are not read again: the ranks that posted none would cost another wait."""
        prefix, broken, cause = message.partition(_BROKEN)
        if not broken:
            return None
        with self._explaining:
            for (_, text), explained in self._explained.items():
                if text == cause:
                    return f"{prefix}{broken}{explained}"
        return None

    def _store_host_name(self) -> str | None:
        """How this group's messages name the rank serving the store: "rank R" in this group's
        numbering, with its global rank when that differs; None when unknown or not a member
        (then its leaving says nothing about this group's failure)."""
        host = self.store_host
        if host is None or host not in self.ranks:
            return None
        mine = self.ranks.index(host)
        return f"rank {mine}" if mine == host else f"rank {mine} (global rank {host})"

    def group_rank(self, global_rank: int, what: str) -> int:
        try:
            return self.ranks.index(global_rank)
        except ValueError:
            raise ValueError(
                f"{what} {global_rank} is not in group {self.name} {self.ranks}"
            ) from None

    def __repr__(self) -> str:
        return (
            f"ProcessGroup(name={self.name!r}, rank={self.rank}, size={self.size}, "
            f"transport={self.transport!r})"
        )


class _NonMember:
    """What new_group returns on ranks outside the new group (torch's
    GroupMember.NON_GROUP_MEMBER)."""

    def __repr__(self) -> str:
        return "NON_GROUP_MEMBER"


NON_GROUP_MEMBER = _NonMember()
"""What new_group returns on ranks outside the group: collectives given it return at once,
point-to-point calls refuse it."""

_world: dict = {
    "group": None,
    "store": None,
    "rank": None,
    "groups": 0,
    "store_host": None,
    "master_addr": None,  # sub-groups advertise the address the default group did
    "nccl": False,  # whether the default group's backend sends CUDA tensors to NCCL
    "nccl_groups": [],  # groups whose NCCL communicators destroy_process_group destroys
}


def timeout_seconds(timeout) -> float:
    if timeout is None:
        return _config.TIMEOUT.get()
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


def tuning_from_env() -> dict:
    """Algorithm choices and waiting from PSCORE_SMALL_ALLREDUCE_BYTES,
    PSCORE_ALLREDUCE_ALGORITHM, PSCORE_LARGE_BROADCAST_BYTES, PSCORE_ALLGATHER_ALGORITHM,
    PSCORE_REDUCE_SCATTER_ALGORITHM, PSCORE_SPIN_US and PSCORE_YIELD_US (unset: the core's
    default, -1)."""
    spin_us, yield_us = _config.SPIN_US.get(), _config.YIELD_US.get()
    large_broadcast = _config.LARGE_BROADCAST_BYTES.get()
    return {
        "small_allreduce_bytes": _config.SMALL_ALLREDUCE_BYTES.get(),
        "allreduce_algorithm": by_name(_C.AllreduceAlgorithm)[_config.ALLREDUCE_ALGORITHM.get()],
        "large_broadcast_bytes": -1 if large_broadcast is None else large_broadcast,
        "allgather_algorithm": by_name(_C.AllgatherAlgorithm)[_config.ALLGATHER_ALGORITHM.get()],
        "reduce_scatter_algorithm": by_name(_C.ReduceScatterAlgorithm)[
            _config.REDUCE_SCATTER_ALGORITHM.get()
        ],
        "spin_us": -1 if spin_us is None else spin_us,
        "yield_us": -1 if yield_us is None else yield_us,
    }


def build_group(
    store,
    rank: int,
    world: int,
    timeout_s: float,
    name: str,
    ranks: list[int],
    master_addr=None,
    store_host: int | None = None,
    nccl: bool = False,
) -> ProcessGroup:
    """Connects this rank to the group's other `ranks` (global ranks) through `store`, whose
    server runs in global rank `store_host`'s process when known (None: elsewhere or unknown).
    nccl: CUDA tensors go to an NCCL communicator, made on the group's first CUDA operation."""
    prefixed = PrefixStore(f"pscore/{name}", store)
    job = _config.JOB_ID.get()
    hosts_store = ranks[rank] == 0  # global rank 0 serves pscore's own stores
    transport, fit = rendezvous.connect(
        prefixed, rank, world, timeout_s, job, master_addr, hosts_store=hosts_store
    )
    native = _C.ProcessGroup(
        transport,
        timeout_ms=int(timeout_s * 1000),
        ranks_fit_cores=int(fit),
        **tuning_from_env(),
    )
    group = ProcessGroup(native, ranks, name, timeout_s, prefixed, store_host)
    if nccl:
        group.nccl = nccl_link.NcclLink(group)
        _world["nccl_groups"].append(group)
    if world > 1:
        group.stall_watch = GroupWatch(native, prefixed, name, timeout_s)
    return group


def init_process_group(
    backend: str = "tcp",
    init_method: str | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    timeout=None,
    store=None,
    group_name: str = "world",
) -> ProcessGroup:
    """Joins the default group. With nothing given, rank, world size and the master's address
    come from the environment (PSCORE_*, torchrun, TF_CONFIG, Slurm, Open MPI). backend "nccl"
    sends CUDA tensors to NCCL (an error when NCCL does not load), "auto" when NCCL loads;
    CPU tensors take TCP/shm with every backend."""
    if _world["group"] is not None:
        raise RuntimeError(
            "pscore.init_process_group was already called; destroy_process_group first"
        )
    if backend is None:
        backend = "tcp"
    if str(backend).lower() not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported; use one of {BACKENDS}")
    use_nccl = nccl_link.wanted(str(backend).lower())
    timeout_s = timeout_seconds(timeout)
    master_addr = None
    store_host = None  # the store's server runs in rank 0 when pscore starts it (env://, tcp://)
    if store is None:
        from_env = init_method is None or init_method == "env://"
        if from_env or rank is None or world_size is None:
            from .. import cluster

            env = cluster.discover()
            if env.rank < 0 and rank is None:
                raise ValueError(
                    f"this process is a {env.source} '{env.role}' task, which "
                    "does not join the collective group; serve parameters with `pserver` instead"
                )
            rank = env.rank if rank is None else rank
            world_size = env.world_size if world_size is None else world_size
            master_addr = env.master_addr
        if from_env:
            store = env_store(env, rank, world_size, timeout_s)
        else:
            store = create_store(init_method, rank, world_size, timeout_s)
            if master_addr is None and init_method.startswith("tcp://"):
                master_addr = init_method[len("tcp://") :].rsplit(":", 1)[0]
        store_host = 0 if isinstance(store, TCPStore) else None  # not torchrun's agent store
    elif rank is None or world_size is None:
        raise ValueError("init_process_group(store=...) needs rank and world_size")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is out of range for world_size {world_size}")
    registration.register(store, rank, world_size, str(backend).lower(), group_name, timeout_s)
    group = build_group(
        store,
        rank,
        world_size,
        timeout_s,
        group_name,
        list(range(world_size)),
        master_addr,
        store_host,
        nccl=use_nccl,
    )
    registration.mark_connected()
    _world.update(
        group=group,
        store=store,
        rank=rank,
        groups=0,
        store_host=store_host,
        master_addr=master_addr,
        nccl=use_nccl,
    )
    return group


def default_group() -> ProcessGroup:
    return resolve(None)


def resolve(group) -> ProcessGroup | None:
    """The group to run on, or None when this rank is not a member."""
    if group is None:  # the default group, looked up here: every collective comes this way
        g = _world["group"]
        if g is None:
            raise RuntimeError("pscore is not initialised: call pscore.init_process_group() first")
        return g
    if group is NON_GROUP_MEMBER:
        return None
    return group


def new_group(ranks=None, timeout=None, backend=None) -> ProcessGroup | _NonMember:
    """Creates a sub-group. Every rank of the default group must call it, in the same order.
    backend: as init_process_group's; None inherits the default group's."""
    world = default_group()
    if backend is not None and str(backend).lower() not in BACKENDS:
        raise ValueError(f"backend {backend!r} is not supported; use one of {BACKENDS}")
    use_nccl = _world["nccl"] if backend is None else nccl_link.wanted(str(backend).lower())
    ranks = sorted(set(range(world.size) if ranks is None else ranks))
    for r in ranks:
        if not 0 <= r < world.size:
            raise ValueError(f"new_group: rank {r} is out of range for world size {world.size}")
    _world["groups"] += 1
    name = f"group{_world['groups']}"
    timeout_s = timeout_seconds(timeout) if timeout is not None else world.timeout_s
    me = _world["rank"]
    if me not in ranks:
        if me == 0:  # hosts the store, usually: stays until the members no longer need it
            store = PrefixStore(f"pscore/{name}", _world["store"])
            rendezvous.wait_until_done(store, len(ranks), timeout_s, f"new_group {ranks}, rank 0")
        return NON_GROUP_MEMBER
    return build_group(
        _world["store"],
        ranks.index(me),
        len(ranks),
        timeout_s,
        name,
        ranks,
        _world["master_addr"],
        store_host=_world["store_host"],
        nccl=use_nccl,
    )


def destroy_process_group(group=None) -> None:
    """Forgets the default group and its store, so init_process_group may run again (a
    sub-group given here is left alone but for its NCCL communicator); a group's connections
    close when its last reference goes. NCCL communicators are destroyed: the given group's, or
    with None every group's."""
    target = _world["group"] if group is None else group
    if isinstance(target, ProcessGroup) and target.stall_watch is not None:
        stall.unregister(target.stall_watch)  # its store may go with the group
    for g in list(_world["nccl_groups"]) if group is None else [target]:
        if isinstance(g, ProcessGroup) and g.nccl is not None:
            g.nccl.destroy()
    if group is None:
        _world.update(
            group=None,
            store=None,
            rank=None,
            groups=0,
            store_host=None,
            master_addr=None,
            nccl=False,
            nccl_groups=[],
        )


def is_initialized() -> bool:
    """True between init_process_group and destroy_process_group."""
    return _world["group"] is not None
