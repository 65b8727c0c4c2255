"""PSWork: the Work (pscore.collectives.work) of an asynchronous parameter-server request.
wait() reconnects shards that went away (a restarted server) and resends the failed parts with
their original sequence numbers, so a retried push is applied exactly once."""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from .. import errors
from ..collectives.work import Work

__all__ = ["PSWork"]

_NO_REPLY = "(no reply within "  # how a link dropped for a request's timeout is reported

_STATUS = ("applied", "duplicate", "dropped")


class PSWork(Work):
    """Returned by the ``*_async`` methods of PSClient. Keeps the arrays it reads and writes
    alive until it completes. ``wait(timeout)`` returns True once every shard has answered;
    ``result()`` is the output (the array for pulls, None for pushes).

    Failures wait() raises: pscore.TimeoutError when not done within `timeout` seconds (the
    request stays in flight; wait again), or the request's own error: a shard that did not
    answer within the client's timeout (TimeoutError naming the shard), bad input (ValueError,
    KeyError), or a shard unreachable for longer than the client's retry timeout
    (NetworkError). exception() reports a shard's failure as it stands, before wait() retries
    it."""

    def __init__(
        self,
        client,
        work,
        keep: tuple,
        result: Callable[[], Any] | None = None,
        table: str | None = None,
    ):
        super().__init__(work, keep, result)
        self._client = client
        self._table = table
        self.started = time.monotonic()  # for stall reports (pscore.ps.stall_watch)

    def _wait_handle(self, seconds: float | None) -> bool:
        until = None if seconds is None else time.monotonic() + seconds
        retry_until = None
        while True:
            left_ms = -1 if until is None else max(0, math.ceil((until - time.monotonic()) * 1e3))
            try:
                return self._handle.wait(left_ms)
            except errors.TimeoutError as e:  # a shard's reply did not come within its timeout
                if not self._table:
                    raise
                raise errors.TimeoutError(f"{e}{self._client._waits_for(self._table)}") from e
            except errors.NetworkError as e:
                if not self._handle.retryable:
                    raise
                # A shard dropped for not replying hangs (SIGSTOP, a deadlock): it gets one more
                # request timeout to answer a reconnect, not retry_timeout, which is for restarts.
                hung = _NO_REPLY in str(e)
                if retry_until is None:
                    wait_s = self._client.timeout if hung else self._client.retry_timeout
                    retry_until = time.monotonic() + min(wait_s, self._client.retry_timeout)
                shards = self._handle.failed_shards()
                if not shards:
                    raise
                try:
                    self._client._reconnect(shards, retry_until)
                except errors.NetworkError as again:
                    kind = errors.TimeoutError if hung else errors.NetworkError
                    raise kind(f"{e} (retrying failed: {again})") from e
                self._client._cpp.retry(self._handle)

    def status(self) -> dict:
        """For pushes: how many shard parts were applied, were duplicates of an earlier copy
        (a retry), or were dropped as late (sync tables with backup workers)."""
        return dict(zip(_STATUS, self._handle.status_counts()))

    def progress(self) -> int:
        """For pushes to sync/ssp tables: the round now open (sync) or this worker's clock."""
        return self._handle.progress()

    def __repr__(self) -> str:
        state = "done" if self.is_completed() else "pending"
        return f"PSWork({self.what}, {state})"
