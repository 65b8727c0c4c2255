"""A pscore Store over a torch.distributed Store, and the store torchrun's agent serves.

Under torchrun the agent already serves a TCPStore on MASTER_ADDR:MASTER_PORT and tells the
workers so with ``TORCHELASTIC_USE_AGENT_STORE=True``; a worker that tried to serve its own store
on that port would find it taken. pscore's ranks then meet in the agent's store instead, as
clients, under ``pscore/<TORCHELASTIC_RUN_ID>/attempt_<TORCHELASTIC_RESTART_COUNT>`` so that the
workers of a restarted attempt never read keys an earlier attempt left behind.
"""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import Callable

from ..errors import NetworkError
from ..errors import TimeoutError as PscoreTimeoutError
from .base import Store, format_keys, get_timeout_message, wait_timeout_message

__all__ = ["TorchStore", "agent_store", "served_by_rank_zero"]


class TorchStore(Store):
    """A pscore Store over a torch.distributed Store (TCPStore, FileStore, PrefixStore...).
    torch's errors become pscore's: its timeouts pscore.errors.TimeoutError (naming the keys),
    its network errors (e.g. the store's host is gone) pscore.errors.NetworkError."""

    def __init__(self, store):
        self._store = store

    @property
    def torch_store(self):
        return self._store

    def _set(self, key: str, value: bytes) -> None:
        with _translated(f"set({key!r})"):
            self._store.set(key, value)

    def _get(self, key: str) -> bytes:
        def timed_out() -> str:
            return get_timeout_message("TorchStore", key, self._get_timeout())

        with _translated(f"get({key!r})", timed_out):
            return self._store.get(key)

    def _add(self, key: str, amount: int) -> int:
        with _translated(f"add({key!r})"):
            return self._store.add(key, amount)

    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        with _translated(f"compare_set({key!r})"):
            return self._store.compare_set(key, expected, desired)

    def _wait(self, keys: list[str], timeout_s: float) -> None:
        def timed_out() -> str:
            missing = [k for k in keys if not self._check([k])]
            return wait_timeout_message("TorchStore", timeout_s, missing)

        with _translated(f"wait({format_keys(keys)})", timed_out):
            self._store.wait(keys, datetime.timedelta(seconds=timeout_s))

    def _check(self, keys: list[str]) -> bool:
        with _translated(f"check({format_keys(keys)})"):
            return self._store.check(keys)

    def _delete_key(self, key: str) -> bool:
        with _translated(f"delete_key({key!r})"):
            return self._store.delete_key(key)

    def _num_keys(self) -> int:
        with _translated("num_keys()"):
            return self._store.num_keys()

    def _get_timeout(self) -> float:
        return self._store.timeout.total_seconds()

    def _set_timeout(self, seconds: float) -> None:
        self._store.set_timeout(datetime.timedelta(seconds=seconds))

    def __repr__(self) -> str:
        return f"TorchStore({self._store!r})"


def served_by_rank_zero(store) -> bool:
    """Whether torch's `store` (under any PrefixStores) is a TCPStore whose server runs in rank
    0's process: torch's env:// and tcp:// rendezvous put it there (as does the documented
    ``TCPStore(..., is_master=rank == 0)``); under torchrun the agent serves the workers' store."""
    import torch.distributed as dist

    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    return isinstance(store, dist.TCPStore) and not agent


@contextlib.contextmanager
def _translated(what: str, timed_out: Callable[[], str] | None = None):
    """Raises torch's network errors as pscore's NetworkError and, for the calls that wait, its
    timeouts as pscore's TimeoutError with the message `timed_out` returns."""
    import torch.distributed as dist

    try:
        yield
    except dist.DistNetworkError as e:
        raise NetworkError(f"TorchStore: {what} failed: {e}") from e
    except dist.DistStoreError as e:
        if timed_out is None or "timeout" not in str(e).lower():
            raise
        raise PscoreTimeoutError(timed_out()) from e


def agent_store(host: str, port: int, prefix: str, timeout_s: float) -> Store:
    """A client of the store torchrun's agent serves at host:port, seen under ``prefix``
    (ClusterEnv.agent_store_prefix: this attempt's keys)."""
    import torch.distributed as dist

    from .prefix import PrefixStore

    client = dist.TCPStore(
        host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s)
    )
    return PrefixStore(prefix, TorchStore(client))
