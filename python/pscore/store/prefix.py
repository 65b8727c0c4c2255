"""PrefixStore: a view of any pscore Store under a key prefix (torch's PrefixStore)."""

from __future__ import annotations

from .base import Store

__all__ = ["PrefixStore"]


class PrefixStore(Store):
    """A view of ``store`` where every key is ``"<prefix>/<key>"``. ``num_keys`` and the timeout
    are the inner store's (as torch's PrefixStore)."""

    def __init__(self, prefix: str, store: Store):
        if not isinstance(prefix, str):
            raise TypeError(f"PrefixStore prefix must be str, not {type(prefix).__name__}")
        if not isinstance(store, Store):
            raise TypeError(f"PrefixStore wraps a pscore Store, not {type(store).__name__}")
        self._prefix = prefix
        self._store = store

    @property
    def prefix(self) -> str:
        return self._prefix

    @property
    def underlying_store(self) -> Store:
        return self._store

    def _full(self, key: str) -> str:
        return f"{self._prefix}/{key}"

    def _set(self, key: str, value: bytes) -> None:
        self._store._set(self._full(key), value)

    def _get(self, key: str) -> bytes:
        return self._store._get(self._full(key))

    def _add(self, key: str, amount: int) -> int:
        return self._store._add(self._full(key), amount)

    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        return self._store._compare_set(self._full(key), expected, desired)

    def _wait(self, keys: list[str], timeout_s: float) -> None:
        self._store._wait([self._full(k) for k in keys], timeout_s)

    def _check(self, keys: list[str]) -> bool:
        return self._store._check([self._full(k) for k in keys])

    def _delete_key(self, key: str) -> bool:
        return self._store._delete_key(self._full(key))

    def _num_keys(self) -> int:
        return self._store._num_keys()

    def _get_timeout(self) -> float:
        return self._store._get_timeout()

    def _set_timeout(self, seconds: float) -> None:
        self._store._set_timeout(seconds)

    def __repr__(self) -> str:
        return f"PrefixStore({self._prefix!r}, {self._store!r})"
