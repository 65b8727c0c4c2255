"""A process group's NCCL side (backends "nccl" and "auto"): CUDA tensors of the group's
collectives go to one NCCL communicator (csrc/gpu/nccl_communicator.h), made on the group's
first CUDA operation with the unique id rank 0 hands the others through the group's store, as
torch does. CPU tensors stay on the group's TCP/shm transport.

Semantics follow torch.distributed's NCCL backend: a call returns once its operation is enqueued
on the caller's current stream; Work.wait() makes the caller's current stream wait for it
(wait(timeout) blocks the host instead). The first call of each (operation, dtype, size) compares
them through the store, so ranks that disagree get an error rather than a hang."""

from __future__ import annotations

import threading
import warnings
from typing import Any, Callable

from .. import _gpu, buffer, cuda_libraries
from ..buffer import BufferView
from ..errors import Error
from ..errors import TimeoutError as PscoreTimeoutError
from . import rendezvous
from .work import Work

__all__ = ["NcclLink", "NcclWork", "load_nccl", "nccl_missing_message", "wanted"]

_INSTALL = (
    "install NCCL with `pip install nvidia-nccl-cu13` (CUDA 13) or `pip install "
    "nvidia-nccl-cu12` (CUDA 12), or point PSCORE_NCCL_LIBRARY at a libnccl.so.2"
)
_warned_fallback = threading.Event()


def nccl_missing_message(backend: str, cause: BaseException) -> str:
    return f"backend={backend!r} needs NCCL, which did not load: {cause}\nTo use it, {_INSTALL}."


def load_nccl() -> str:
    """Loads NCCL (once per process) from pscore.cuda_libraries' candidates; its version.
    pscore.Error naming every candidate tried (or the missing symbol) when it cannot."""
    cuda_libraries.register_candidates()
    return _gpu.nccl_version()


def wanted(backend: str) -> bool:
    """Whether groups of `backend` send CUDA tensors to NCCL: never for the CPU backends; for
    "nccl" always (pscore.Error saying how to get NCCL when it does not load); for "auto" when
    NCCL loads (else one warning per process, and CUDA tensors take the staged TCP/shm path)."""
    if backend not in ("nccl", "auto"):
        return False
    try:
        load_nccl()
    except Error as e:
        if backend == "nccl":
            raise Error(nccl_missing_message(backend, e)) from None
        if not _warned_fallback.is_set():
            _warned_fallback.set()
            warnings.warn(
                f"pscore backend='auto': NCCL did not load, so CUDA tensors take the TCP/shm "
                f"path (staged through host memory): {e}\nFor NCCL, {_INSTALL}.",
                RuntimeWarning,
                stacklevel=3,
            )
        return False
    return True


class NcclWork(Work):
    """The Work of an NCCL operation (torch's NCCL Work): wait() orders the caller's current
    stream after it and returns at once; wait(timeout) blocks the host until it completes."""

    def __init__(self, handle, keepalive: Any, device: int, stream: int, source: int = -1):
        super().__init__(handle, keepalive)
        self._device = device
        self._stream = stream
        self._source = source

    def wait(self, timeout=None) -> bool:
        if timeout is not None:
            return super().wait(timeout)
        self._handle.wait_stream(_current_stream(self._device, self._stream))
        return True

    def source_rank(self) -> int:
        return self._source


def _current_stream(device: int, default: int) -> int:
    """torch's current stream on `device` when torch is loaded, else `default`."""
    torch = buffer._torch()
    if torch is None:
        return default
    return buffer._cuda_stream(torch, device)


class NcclLink:
    """A group's NCCL communicators, each made on its first use, and the header checks: one of
    the whole group for collectives, and one per pair of ranks for send/recv (as torch's), so
    that point-to-point calls need no call from the other ranks."""

    def __init__(self, group):
        self._group = group
        self._comms: dict = {}  # None: the group's; a peer's group rank: that pair's
        self._failed: dict = {}  # why joining one failed, raised again by later calls
        self._lock = threading.Lock()
        self._checked: set = set()
        self._checks = 0

    def communicator(self, device: int, peer: int | None = None):
        """The communicator on CUDA device `device`: the group's, or with `peer` (a group rank)
        the two-rank one of this rank and peer. Joined on first use: its lowest rank posts a
        unique id in the store, the members wait (with the group's timeout) until all have come
        for it, then join. ValueError when a later buffer is on another device."""
        with self._lock:
            if peer in self._failed:  # the members' keys are spent: joining again cannot work
                failed = self._failed[peer]
                raise type(failed)(f"{failed} (when this NCCL communicator was made)")
            comm = self._comms.get(peer)
            if comm is None:
                try:
                    comm = self._comms[peer] = self._join(device, peer)
                except Exception as e:
                    self._failed[peer] = e
                    raise
            elif comm.device != device:
                raise ValueError(
                    f"group {self._group.name}'s NCCL communicator is on cuda:{comm.device}; "
                    f"this rank's CUDA tensors for it must all be there, got one on cuda:{device}"
                )
            return comm

    def _join(self, device: int, peer: int | None):
        g = self._group
        if peer is None:
            members, prefix, label = list(range(g.size)), "nccl", g.name
        else:
            members = sorted((g.rank, peer))
            prefix, label = f"nccl/p2p/{members[0]}-{members[1]}", f"{g.name} send/recv"
        me = members.index(g.rank)
        if me == 0:
            g.store.set(f"{prefix}/id", _gpu.nccl_unique_id())
        # Every member comes before any blocks in ncclCommInitRank, which has no timeout of its
        # own: a member that never comes is a TimeoutError here.
        try:
            rendezvous._gather(
                g.store, f"{prefix}/joined", me, len(members), str(device), g.timeout_s
            )
        except TimeoutError as e:
            raise PscoreTimeoutError(
                f"rank {g.rank}: the NCCL communicator of group {label} (group ranks {members}) "
                f"is made by its members' first CUDA operation on it, which one has not made: {e}"
            ) from None
        return _gpu.NcclCommunicator(
            me,
            len(members),
            g.store.get(f"{prefix}/id"),
            device,
            timeout_ms=int(g.timeout_s * 1000),
            group=label,
            ranks=[g.ranks[m] for m in members],
        )

    def check(self, kind: str, signature: tuple) -> None:
        """On the first call of `signature` on this rank, compares it with every rank's through
        the store: ValueError naming each rank's call when they differ."""
        g = self._group
        key = (kind, *signature)
        if g.size == 1 or key in self._checked:
            return
        self._checks += 1
        mine = " ".join(str(part) for part in key)
        calls = rendezvous._gather(
            g.store, f"nccl/check/{self._checks}", g.rank, g.size, mine, g.timeout_s
        )
        if any(call != mine for call in calls):
            listed = "; ".join(f"rank {r}: {call}" for r, call in enumerate(calls))
            raise ValueError(
                f"rank {g.rank}: nccl {kind} on group {g.name}: the ranks' calls differ ({listed})"
            )
        self._checked.add(key)

    def run(
        self,
        kind: str,
        signature: tuple | None,
        first: BufferView,
        keep: Any,
        async_op: bool,
        call: Callable,
        source: int = -1,
        peer: int | None = None,
    ) -> NcclWork | None:
        """Enqueues call(communicator) on `first`'s device and stream after checking `signature`
        (None: not checked); with `peer` (a group rank) on the pair's communicator, for
        send/recv. Its Work when async_op."""
        if peer is not None and peer == self._group.rank:
            verb = {"send": "send to", "recv": "receive from"}[kind]
            raise ValueError(f"{kind}: a rank cannot {verb} itself")
        comm = self.communicator(first.device_index, peer)
        if signature is not None:
            self.check(kind, signature)
        handle = call(comm)
        if not async_op:
            return None
        return NcclWork(handle, keep, first.device_index, first.stream, source)

    def destroy(self) -> None:
        """Destroys the communicators (after their outstanding operations, up to the timeout)."""
        with self._lock:
            comms, self._comms = list(self._comms.values()), {}
        for comm in comms:
            comm.destroy()
