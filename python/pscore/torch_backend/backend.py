"""The "pscore" torch.distributed ProcessGroup: every operation runs asynchronously: it returns at
once, `wait()` waits on pscore directly, and a completer thread resolves the Work's future when
pscore finishes, so DDP's backward keeps computing while gradient buckets are reduced.
"""

from __future__ import annotations

import atexit
import datetime
import queue
import threading
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup as _TorchProcessGroup
from torch._C._distributed_c10d import Work as _TorchWork

from ..collectives.group import build_group
from ..store.torch_store import TorchStore, served_by_rank_zero
from . import barrier
from .ops import TorchOperations
from .tensors import Staging

__all__ = ["BACKEND_NAME", "PscoreProcessGroup", "register"]

BACKEND_NAME = "pscore"
"""The name torch.distributed knows the backend by: init_process_group("pscore")."""
STOP_WAIT_S = 5.0  # at exit, how long the completer may take to finish resolving a future


def _seconds(timeout) -> float | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
    return None if seconds <= 0 else seconds  # torch's "no timeout" is zero


class _AsyncWork(_TorchWork):
    """An operation still running in pscore, as torch's Work type (what DDP and c10d need) with
    pscore's Work protocol (pscore.collectives.work): wait(timeout), is_completed, exception,
    result. Its future resolves on the completer thread, and wait() waits on pscore's works
    directly (no hand-off through that thread). `finish` (the write-back of staged outputs) runs
    once, on whichever thread sees the works done first."""

    def __init__(self, works, finish=None):
        super().__init__()
        self._works = works
        self._finish = finish
        self._finish_lock = threading.Lock()
        self._future = torch.futures.Future()

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self._works.wait(_seconds(timeout))  # raises the operation's error
        self._finished()
        return True

    def _finished(self) -> None:
        with self._finish_lock:
            finish, self._finish = self._finish, None
            if finish is not None:
                finish()

    def is_completed(self) -> bool:
        return self._works.is_completed()

    def source_rank(self) -> int:
        """The sender of a receive (known once it is done), -1 for other operations."""
        return self._works.source_rank()

    _source_rank = source_rank  # what torch.distributed.recv(src=None) asks

    def is_success(self) -> bool:
        return self.is_completed() and self.exception() is None

    def exception(self):
        """The operation's failure, or None (also while it runs)."""
        return self._works.exception()

    def result(self) -> list:
        """The output tensors (torch's Work.result), once the operation is done."""
        self.wait()
        return self._future.wait()

    def get_future(self):
        return self._future


class _AllOf:
    """Waits for several pscore works, first error wins; a timeout bounds them all together."""

    def __init__(self, works):
        self._works = works

    def wait(self, timeout_s: float | None = None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for w in self._works:
            w.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self._works)

    def exception(self):
        """The first failure among the completed works, or None."""
        for w in self._works:
            if w.is_completed() and w.exception() is not None:
                return w.exception()
        return None

    def source_rank(self) -> int:
        return self._works[0].source_rank() if self._works else -1


class _Completer:
    """One thread per group that waits for pscore's works in submission order (the order they
    complete in) and resolves their torch futures.

    At interpreter exit it stops touching torch before the interpreter finalizes: resolving a
    future or freeing a torch Work releases the GIL, and a thread that takes it back from a
    finalizing interpreter is ended through a noexcept frame, which aborts the process
    ("terminate called without an active exception"). So torch objects are resolved and dropped
    only under `_resolving`, which exit takes; after that the thread keeps what it still gets,
    unresolved. Waiting on pscore is safe at exit (csrc/bindings/gil.h)."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._resolving = threading.Lock()
        self._stopped = False
        self._kept: list = []  # what arrived after stop: never freed on this thread
        self._thread = threading.Thread(
            target=self._run, name="pscore-torch-completer", daemon=True
        )
        self._thread.start()
        atexit.register(self.stop)

    def track(self, work, result, finish=None) -> _AsyncWork:
        torch_work = _AsyncWork(work, finish)
        self._queue.put((work, result, torch_work))
        return torch_work

    def stop(self) -> None:
        """The thread touches no torch object after this returns (it waits for one being
        resolved, at most STOP_WAIT_S)."""
        got = self._resolving.acquire(timeout=STOP_WAIT_S)
        self._stopped = True
        if got:
            self._resolving.release()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            error = None
            try:
                item[0].wait()
            except Exception as e:  # noqa: BLE001 - handed to whoever waits on the future
                error = e
            with self._resolving:
                if self._stopped:
                    self._kept.append((item, error))
                else:
                    self._resolve(item[2], item[1], error)
                del item, error

    @staticmethod
    def _resolve(torch_work, result, error) -> None:
        """Writes staged outputs back, then resolves the future (under `_resolving`)."""
        if error is None:
            try:
                torch_work._finished()
            except Exception as e:  # noqa: BLE001 - handed to whoever waits on the future
                error = e
        if error is None:
            torch_work.get_future().set_result(result)
        else:
            torch_work.get_future().set_exception(error)


class PscoreProcessGroup(TorchOperations, _TorchProcessGroup):
    """A torch ProcessGroup whose collectives run on a pscore group."""

    def __init__(self, store, rank: int, world_size: int, timeout: datetime.timedelta):
        super().__init__(rank, world_size)
        self._completer = _Completer()
        self._group = build_group(
            TorchStore(store),
            rank,
            world_size,
            timeout.total_seconds(),
            "torch",
            list(range(world_size)),
            store_host=0 if served_by_rank_zero(store) else None,
        )

    # Set by torch after __init__; a Python group has no backend object to hold them.
    _name = ""
    _desc = ""

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def getGroupName(self) -> str:
        return self._name

    def setGroupName(self, name: str) -> None:
        self._name = name

    def getGroupDesc(self) -> str:
        return self._desc

    def setGroupDesc(self, desc: str) -> None:
        self._desc = desc

    def _run(
        self, name: str, start, result=(), staging: Staging | None = None, opts=None
    ) -> _AsyncWork | None:
        """Runs operation `name`: start(async_op) issues pscore's calls and returns their works.
        A call torch makes blocking (opts.asyncOp False: torch would wait at once) runs on the
        caller's thread and returns None, torch's "done already": no Work, future or completer
        hand-off. Otherwise the returned Work's future resolves to `result` once staged outputs
        are written back. A profiler sees the operation as "pscore:<name>" until it completes."""
        blocking = not getattr(opts, "asyncOp", True)
        if not torch.autograd._profiler_enabled():
            if blocking:
                _run_here(start, staging)
                return None
            return self._track(start, result, staging)
        # a call that raises ends the span here, one that starts ends it on completion
        with torch.autograd.profiler.record_function(f"{BACKEND_NAME}:{name}") as span:
            if blocking:
                _run_here(start, staging)
                return None
            work = self._track(start, result, staging)
            span._call_end_callbacks_on_future(work.get_future())
        return work

    def _track(self, start, result, staging: Staging | None) -> _AsyncWork:
        finish = staging.finish if staging is not None else None
        return self._completer.track(_AllOf(start(True)), list(result), finish)


def _run_here(start, staging: Staging | None) -> None:
    """A blocking operation: pscore runs it on this thread when nothing is queued before it."""
    start(False)
    if staging is not None:
        staging.finish()


def _create(store, rank: int, world_size: int, timeout: datetime.timedelta):
    return PscoreProcessGroup(store, rank, world_size, timeout)


def register() -> None:
    """Registers the "pscore" backend with torch.distributed for CPU and CUDA tensors (CUDA ones
    staged through pinned host memory; idempotent)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu", "cuda"])
    barrier.install(PscoreProcessGroup)
