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

from .. import _C, buffer, cuda_libraries
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
    return _C.nccl_version()


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
    """A group's NCCL communicator, made on its first CUDA operation, and the header checks."""

    def __init__(self, group):
        self._group = group
        self._comm = None
        self._failed: Exception | None = None  # why joining failed, raised again by later calls
        self._lock = threading.Lock()
        self._checked: set = set()
        self._checks = 0

    def communicator(self, device: int):
        """The communicator on CUDA device `device`, joined on first use: rank 0 posts a unique
        id, every rank waits (with the group's timeout) until all have come for it, then joins;
        ValueError when a later buffer is on another device."""
        with self._lock:
            if self._failed is not None:  # the ranks' keys are spent: joining again cannot work
                raise type(self._failed)(
                    f"{self._failed} (when this group's NCCL communicator was made)"
                )
            if self._comm is None:
                try:
                    self._comm = self._join(device)
                except Exception as e:
                    self._failed = e
                    raise
            elif self._comm.device != device:
                raise ValueError(
                    f"group {self._group.name}'s NCCL communicator is on cuda:{self._comm.device}; "
                    f"this rank's CUDA tensors for it must all be there, got one on cuda:{device}"
                )
            return self._comm

    def _join(self, device: int):
        g = self._group
        if g.rank == 0:
            g.store.set("nccl/id", _C.nccl_unique_id())
        # Every rank reaches its first CUDA operation before any blocks in ncclCommInitRank,
        # which has no timeout of its own: a rank that never comes is a TimeoutError here.
        try:
            rendezvous._gather(g.store, "nccl/joined", g.rank, g.size, str(device), g.timeout_s)
        except TimeoutError as e:
            raise PscoreTimeoutError(
                f"rank {g.rank}: group {g.name}'s NCCL communicator: {e}. It is made by the "
                "group's first CUDA operation, which every rank of the group must call (a "
                "collective, before any CUDA send/recv)"
            ) from None
        return _C.NcclCommunicator(
            g.rank,
            g.size,
            g.store.get("nccl/id"),
            device,
            timeout_ms=int(g.timeout_s * 1000),
            group=g.name,
            ranks=list(g.ranks),
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
    ) -> NcclWork | None:
        """Enqueues call(communicator) on `first`'s device and stream after checking `signature`
        (None: not checked, for send/recv, which only two ranks call); its Work when async_op."""
        comm = self.communicator(first.device_index)
        if signature is not None:
            self.check(kind, signature)
        handle = call(comm)
        if not async_op:
            return None
        return NcclWork(handle, keep, first.device_index, first.stream, source)

    def destroy(self) -> None:
        """Destroys the communicator (after its outstanding operations, up to the timeout)."""
        with self._lock:
            comm, self._comm = self._comm, None
        if comm is not None:
            comm.destroy()
