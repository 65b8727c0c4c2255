"""A pscore Store over a torch.distributed Store, and the store torchrun's agent serves.

Under torchrun the agent already serves a TCPStore on MASTER_ADDR:MASTER_PORT and tells the
workers so with ``TORCHELASTIC_USE_AGENT_STORE=True``; a worker that tried to serve its own store
on that port would find it taken. pscore's ranks then meet in the agent's store instead, as
clients, under ``pscore/<TORCHELASTIC_RUN_ID>/attempt_<TORCHELASTIC_RESTART_COUNT>`` so that the
workers of a restarted attempt never read keys an earlier attempt left behind.
"""

from __future__ import annotations

import datetime

from .errors import TimeoutError as PscoreTimeoutError
from .store_base import Store, get_timeout_message, wait_timeout_message


class TorchStore(Store):
    """A pscore Store over a torch.distributed Store (TCPStore, FileStore, PrefixStore...).
    torch's timeouts become pscore.errors.TimeoutError naming the keys; its other errors (e.g.
    DistNetworkError when the store's host is gone) pass through."""

    def __init__(self, store):
        self._store = store

    @property
    def torch_store(self):
        return self._store

    def _set(self, key: str, value: bytes) -> None:
        self._store.set(key, value)

    def _get(self, key: str) -> bytes:
        try:
            return self._store.get(key)
        except Exception as e:
            if not _is_timeout(e):
                raise
            message = get_timeout_message("TorchStore", key, self._get_timeout())
            raise PscoreTimeoutError(message) from e

    def _add(self, key: str, amount: int) -> int:
        return self._store.add(key, amount)

    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        return self._store.compare_set(key, expected, desired)

    def _wait(self, keys: list[str], timeout_s: float) -> None:
        try:
            self._store.wait(keys, datetime.timedelta(seconds=timeout_s))
        except Exception as e:
            if not _is_timeout(e):
                raise
            missing = [k for k in keys if not self._store.check([k])]
            raise PscoreTimeoutError(wait_timeout_message("TorchStore", timeout_s, missing)) from e

    def _check(self, keys: list[str]) -> bool:
        return self._store.check(keys)

    def _delete_key(self, key: str) -> bool:
        return self._store.delete_key(key)

    def _num_keys(self) -> int:
        return self._store.num_keys()

    def _get_timeout(self) -> float:
        return self._store.timeout.total_seconds()

    def _set_timeout(self, seconds: float) -> None:
        self._store.set_timeout(datetime.timedelta(seconds=seconds))

    def __repr__(self) -> str:
        return f"TorchStore({self._store!r})"


def _is_timeout(error: Exception) -> bool:
    import torch.distributed as dist

    return isinstance(error, dist.DistStoreError) and "timeout" in str(error).lower()


def agent_store(host: str, port: int, prefix: str, timeout_s: float) -> Store:
    """A client of the store torchrun's agent serves at host:port, seen under ``prefix``
    (ClusterEnv.agent_store_prefix: this attempt's keys)."""
    import torch.distributed as dist

    from .store import PrefixStore

    client = dist.TCPStore(
        host, port, is_master=False, timeout=datetime.timedelta(seconds=timeout_s)
    )
    return PrefixStore(prefix, TorchStore(client))
