"""The Python ``Store`` API every pscore store shares (torch.distributed.Store semantics).

Keys are ``str``; values are ``bytes`` (``str`` values are stored UTF-8 encoded); ``add`` keeps
integers as decimal text, so ``get`` after ``add`` returns e.g. ``b"5"``. ``get`` and ``wait``
block until their keys exist, at most the timeout, then raise [pscore.errors.TimeoutError][]
naming the keys still missing. Timeouts are seconds (``float``) or ``datetime.timedelta``.
"""

from __future__ import annotations

import abc
import datetime
import math
from collections.abc import Iterable
from typing import Union

__all__ = [
    "INTERNAL_KEY_PREFIX",
    "Store",
    "Timeout",
    "check_amount",
    "check_key",
    "check_keys",
    "format_keys",
    "get_timeout_message",
    "parse_stored_integer",
    "to_bytes",
    "to_ms",
    "to_seconds",
    "wait_timeout_message",
]

Timeout = Union[float, int, datetime.timedelta]
Value = Union[bytes, bytearray, memoryview, str]

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
# Keys starting with this character are a store's own bookkeeping; num_keys() skips them.
INTERNAL_KEY_PREFIX = "\x00"


def to_seconds(timeout: Timeout, name: str = "timeout", allow_zero: bool = False) -> float:
    """Normalises a timeout (seconds or timedelta) to float seconds; ValueError when invalid."""
    if isinstance(timeout, datetime.timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise TypeError(
            f"{name} must be seconds (int/float) or datetime.timedelta, "
            f"not {type(timeout).__name__}"
        )
    if math.isnan(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be {bound} seconds, got {seconds!r}")
    return seconds


# Longer timeouts (about 30 years) mean "forever" (the C++ stores' kMaxFiniteTimeoutMs).
MAX_FINITE_TIMEOUT_MS = 1 << 50


def to_ms(seconds: float) -> int:
    """Seconds to whole milliseconds for the C++ stores (-1, "forever", when infinite)."""
    if math.isinf(seconds) or seconds * 1000.0 > MAX_FINITE_TIMEOUT_MS:
        return -1
    return math.ceil(seconds * 1000.0)


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"store keys must be str, not {type(key).__name__}")
    return key


def check_keys(keys: object) -> list[str]:
    if isinstance(keys, (str, bytes)):
        raise TypeError("keys must be a list of str (got a single string; wrap it in a list)")
    try:
        items = list(keys)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"keys must be a list of str, not {type(keys).__name__}") from None
    return [check_key(k) for k in items]


def to_bytes(value: object, name: str = "value") -> bytes:
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"store {name} must be bytes or str, not {type(value).__name__}")


def check_amount(amount: object) -> int:
    if isinstance(amount, bool) or not isinstance(amount, int):
        raise TypeError(f"add amount must be an int, not {type(amount).__name__}")
    if not INT64_MIN <= amount <= INT64_MAX:
        raise ValueError(f"add amount {amount} does not fit in a signed 64-bit integer")
    return amount


def format_keys(keys: Iterable[str], limit: int = 16) -> str:
    keys = list(keys)
    text = ", ".join(repr(k) for k in keys[:limit])
    if len(keys) > limit:
        text += f" and {len(keys) - limit} more"
    return text


def wait_timeout_message(who: str, timeout_s: float, missing: Iterable[str]) -> str:
    return (
        f"{who}: wait timed out after {to_ms(timeout_s)} ms; "
        f"keys still missing: {format_keys(missing)}"
    )


def get_timeout_message(who: str, key: str, timeout_s: float) -> str:
    return f"{who}: get({key!r}) timed out after {to_ms(timeout_s)} ms: key {key!r} was never set"


def parse_stored_integer(key: str, value: bytes) -> int:
    try:
        text = value.decode("ascii")
        if text.strip() != text:
            raise ValueError
        return int(text, 10)
    except (UnicodeDecodeError, ValueError):
        raise ValueError(
            f"add: key {key!r} holds {value[:64]!r}, which is not an integer"
        ) from None


class Store(abc.ABC):
    """Base class: argument checking here, the storage in the subclasses' ``_`` methods."""

    def set(self, key: str, value: Value) -> None:
        self._set(check_key(key), to_bytes(value))

    def get(self, key: str) -> bytes:
        """Value of ``key``; blocks until it exists, at most ``timeout``."""
        return self._get(check_key(key))

    def add(self, key: str, amount: int) -> int:
        """Adds ``amount`` to the integer at ``key`` (missing counts as 0); returns the sum."""
        return self._add(check_key(key), check_amount(amount))

    def compare_set(self, key: str, expected: Value, desired: Value) -> bytes:
        """Sets ``key`` to ``desired`` if it holds ``expected`` (or is missing and ``expected``
        is empty); returns the value now stored (``expected`` when the key is missing)."""
        return self._compare_set(
            check_key(key), to_bytes(expected, "expected"), to_bytes(desired, "desired")
        )

    def wait(self, keys: Iterable[str], timeout: Timeout | None = None) -> None:
        """Blocks until every key exists; ``timeout`` None uses the store's timeout."""
        seconds = self.timeout_s if timeout is None else to_seconds(timeout, allow_zero=True)
        self._wait(check_keys(keys), seconds)

    def check(self, keys: Iterable[str]) -> bool:
        """True when every key exists now (does not block)."""
        return self._check(check_keys(keys))

    def delete_key(self, key: str) -> bool:
        """Removes ``key``; True when it existed."""
        return self._delete_key(check_key(key))

    def num_keys(self) -> int:
        return self._num_keys()

    @property
    def timeout(self) -> datetime.timedelta:
        """Default timeout of get/wait (a timedelta, as torch's Store.timeout; timedelta.max
        when infinite)."""
        seconds = self.timeout_s
        if seconds >= datetime.timedelta.max.total_seconds():
            return datetime.timedelta.max
        return datetime.timedelta(seconds=seconds)

    @timeout.setter
    def timeout(self, value: Timeout) -> None:
        self.set_timeout(value)

    @property
    def timeout_s(self) -> float:
        """Default timeout of get/wait in seconds."""
        return self._get_timeout()

    def set_timeout(self, timeout: Timeout) -> None:
        self._set_timeout(to_seconds(timeout))

    # Subclasses implement these; arguments are already checked and normalised.
    @abc.abstractmethod
    def _set(self, key: str, value: bytes) -> None: ...

    @abc.abstractmethod
    def _get(self, key: str) -> bytes: ...

    @abc.abstractmethod
    def _add(self, key: str, amount: int) -> int: ...

    @abc.abstractmethod
    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes: ...

    @abc.abstractmethod
    def _wait(self, keys: list[str], timeout_s: float) -> None: ...

    @abc.abstractmethod
    def _check(self, keys: list[str]) -> bool: ...

    @abc.abstractmethod
    def _delete_key(self, key: str) -> bool: ...

    @abc.abstractmethod
    def _num_keys(self) -> int: ...

    @abc.abstractmethod
    def _get_timeout(self) -> float: ...

    @abc.abstractmethod
    def _set_timeout(self, seconds: float) -> None: ...
