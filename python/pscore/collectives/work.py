"""Work: the one protocol of an operation that may still be running (torch.distributed's Work
API). ``async_op=True`` collectives and the parameter-server client's ``*_async`` calls return
one; the torch backend's operations follow it as torch's own Work type:

- ``wait(timeout=None)``: blocks until done and returns True; raises the operation's failure, or
  pscore.TimeoutError when it is still running after ``timeout`` seconds (or a timedelta); the
  operation keeps running, so wait again;
- ``is_completed()``, ``is_success()``;
- ``exception()``: the failure as an exception object (not raised), or None;
- ``result()``: waits, then returns the operation's output (a pull's array; None when the
  outputs are the caller's buffers).

This class implements it over a native handle: the C++ Work (csrc/common/work.h) as
csrc/bindings/work.h binds it."""

from __future__ import annotations

import datetime
import math
from typing import Any, Callable

from ..errors import TimeoutError as PscoreTimeoutError

__all__ = ["CollectiveWork", "CompletedWork", "Work", "timeout_seconds"]

Timeout = float | datetime.timedelta | None


def timeout_seconds(timeout: Timeout) -> float | None:
    """Seconds of a wait's timeout (None: no limit); ValueError unless a number or timedelta
    >= 0."""
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        timeout = timeout.total_seconds()
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:
        raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
    return float(timeout)


def _ms(seconds: float | None) -> int:
    return -1 if seconds is None else math.ceil(seconds * 1000)


class Work:
    """A running operation. Holds the buffers it reads and writes (``keepalive``) until it
    completes; ``result`` makes its output."""

    def __init__(self, handle, keepalive: Any = None, result: Callable[[], Any] | None = None):
        self._handle = handle
        self._keepalive = keepalive
        self._result = result

    @property
    def what(self) -> str:
        """The operation, as messages name it ("rank 0: allreduce #3", "push 'w'")."""
        return self._handle.what

    def wait(self, timeout: Timeout = None) -> bool:
        """Blocks until done; raises the operation's failure, or pscore.TimeoutError past
        `timeout` (the operation keeps running)."""
        seconds = timeout_seconds(timeout)
        if not self._wait_handle(seconds):
            raise PscoreTimeoutError(
                f"{self.what}: not completed within {seconds:g} s (still running after waiting; "
                "wait again for it)"
            )
        self._keepalive = None
        return True

    def _wait_handle(self, seconds: float | None) -> bool:
        """The native wait: False when still running after `seconds`. Subclasses add what their
        failures need (the group's failure report, the parameter server's retries)."""
        return self._handle.wait(_ms(seconds))

    def is_completed(self) -> bool:
        return self._handle.is_completed()

    def is_success(self) -> bool:
        return self.is_completed() and not self._handle.failed()

    def exception(self) -> BaseException | None:
        """The failure as an exception object (not raised), or None (also while it runs)."""
        if not self._handle.failed():
            return None
        try:
            self._handle.wait(0)  # rethrows the failure, translated to its Python class
        except Exception as e:  # noqa: BLE001 - returned, not swallowed
            return e
        return None

    def result(self) -> Any:
        self.wait()
        return self._result() if self._result else None


class CollectiveWork(Work):
    """The Work of a collective or point-to-point call on a group: a failure carries what the
    other ranks reported about it (ProcessGroup.explain)."""

    def __init__(self, handle, keepalive: Any, group):
        super().__init__(handle, keepalive)
        self._group = group

    def _wait_handle(self, seconds: float | None) -> bool:
        try:
            return self._handle.wait(_ms(seconds))
        except Exception as e:  # noqa: BLE001 - raised again, with the other ranks' accounts
            raise self._group.explain(e) from None

    def source_rank(self) -> int:
        """The global rank a receive got its message from (for src=None, known once it is done);
        -1 for other operations."""
        local = self._handle.source
        return local if local < 0 else self._group.ranks[local]


class _Done:
    """The native side of an operation that finished at once."""

    what = "completed"
    source = -1

    def wait(self, _timeout_ms: int = -1) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def failed(self) -> bool:
        return False


class CompletedWork(Work):
    """A Work for operations that finished at once (world of one, non-members)."""

    def __init__(self, result: Any = None):
        super().__init__(_Done(), result=lambda: result)

    def source_rank(self) -> int:
        return -1
