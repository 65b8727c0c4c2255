"""Work: the handle an `async_op=True` call returns (torch.distributed's Work API)."""

from __future__ import annotations

import datetime
from typing import Any, Callable


class Work:
    """A running operation. Holds the buffers it reads and writes alive until it completes."""

    def __init__(
        self, handle, keepalive: Any = None, result: Callable[[], Any] | None = None, group=None
    ):
        self._handle = handle
        self._keepalive = keepalive
        self._result = result
        self._group = group

    def wait(self, timeout: float | datetime.timedelta | None = None) -> bool:
        """Blocks until done; raises the operation's error, or TimeoutError past `timeout`."""
        if isinstance(timeout, datetime.timedelta):
            timeout = timeout.total_seconds()
        limit_ms = -1 if timeout is None else int(timeout * 1000)
        try:
            self._handle.wait(limit_ms)
        except Exception as e:
            if self._group is None or not self._handle.is_completed():
                raise
            raise self._group.explain(e) from None
        self._keepalive = None
        return True

    def is_completed(self) -> bool:
        return self._handle.is_completed()

    def is_success(self) -> bool:
        return self._handle.is_completed() and not self._handle.failed()

    def exception(self) -> Exception | None:
        """The failure as an exception object (not raised), or None."""
        if not self._handle.failed():
            return None
        try:
            self._handle.wait(0)
        except Exception as e:  # noqa: BLE001 - returned, not swallowed
            return e
        return None

    def result(self) -> Any:
        self.wait()
        return self._result() if self._result else None

    def source_rank(self) -> int:
        """The global rank a receive got its message from (for src=None, known once it is done);
        -1 for other operations."""
        local = self._handle.source if self._handle is not None else -1
        if local < 0 or self._group is None:
            return local
        return self._group.ranks[local]


class CompletedWork(Work):
    """A Work for operations that finished at once (world of one, non-members)."""

    def __init__(self, result: Any = None):
        super().__init__(None)
        self._value = result

    def wait(self, timeout=None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def exception(self):
        return None

    def result(self):
        return self._value
