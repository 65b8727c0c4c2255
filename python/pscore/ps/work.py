"""PSWork: the handle of an asynchronous parameter-server request. wait() reconnects shards that
went away (a restarted server) and resends the failed parts with their original sequence
numbers, so a retried push is applied exactly once."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from pscore import errors

_STATUS = ("applied", "duplicate", "dropped")


class PSWork:
    """Returned by the ``*_async`` methods of PSClient. Keeps the arrays it reads and writes
    alive until it completes."""

    def __init__(
        self,
        client,
        work,
        keep: tuple,
        result: Callable[[], Any] | None = None,
        table: str | None = None,
    ):
        self._client = client
        self._work = work
        self._table = table
        self._keep = keep
        self._result = result
        self._done = False

    @property
    def what(self) -> str:
        return self._work.what

    def is_completed(self) -> bool:
        """True once every shard has answered (successfully or not)."""
        if not self._done and self._work.is_completed():
            self._done = True
        return self._done

    def wait(self, timeout: float | None = None) -> Any:
        """Blocks until done and returns the result (the output array for pulls, None for
        pushes). Raises pscore.TimeoutError when not done within `timeout` seconds (the request
        stays in flight; wait again), and the request's own error when it failed: a shard that
        did not answer within the client's timeout (TimeoutError naming the shard), bad input
        (ValueError, KeyError), or a shard unreachable for longer than the client's retry
        timeout (NetworkError)."""
        if timeout is not None and (not isinstance(timeout, (int, float)) or timeout < 0):
            raise ValueError(f"timeout must be a number of seconds >= 0, got {timeout!r}")
        until = None if timeout is None else time.monotonic() + timeout
        retry_until = None
        while True:
            left_ms = -1 if until is None else max(0, math.ceil((until - time.monotonic()) * 1e3))
            try:
                finished = self._work.wait(left_ms)
            except errors.TimeoutError as e:  # a shard's reply did not come within its timeout
                if not self._table:
                    raise
                raise errors.TimeoutError(f"{e}{self._client._waits_for(self._table)}") from e
            except errors.NetworkError as e:
                if not self._work.retryable:
                    raise
                if retry_until is None:
                    retry_until = time.monotonic() + self._client.retry_timeout
                shards = self._work.failed_shards()
                if not shards:
                    raise
                try:
                    self._client._reconnect(shards, retry_until)
                except errors.NetworkError as again:
                    raise errors.NetworkError(f"{e} (retrying failed: {again})") from e
                self._client._cpp.retry(self._work)
                continue
            if not finished:
                raise errors.TimeoutError(
                    f"{self.what}: not completed within {timeout} s (still in flight)"
                )
            break
        self._done = True
        self._keep = ()
        return self._result() if self._result else None

    def status(self) -> dict:
        """For pushes: how many shard parts were applied, were duplicates of an earlier copy
        (a retry), or were dropped as late (sync tables with backup workers)."""
        return dict(zip(_STATUS, self._work.status_counts()))

    def progress(self) -> int:
        """For pushes to sync/ssp tables: the round now open (sync) or this worker's clock."""
        return self._work.progress()

    def __repr__(self) -> str:
        state = "done" if self.is_completed() else "pending"
        return f"PSWork({self.what}, {state})"
