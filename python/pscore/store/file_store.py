"""FileStore: a Store in one file, shared by processes on one machine (or a shared filesystem).

The file is an append-only log of records (set / delete), guarded by ``flock``: writers hold the
exclusive lock while they append, readers the shared lock while they replay what is new since
their last read. A record torn by a writer that crashed mid-append is cut off by the next writer.
Waiting (get/wait on missing keys) checks the file's size and sleeps with exponential backoff
(0.5 ms doubling to 20 ms) between checks: no lock is taken and nothing is read until the file
grew, so waiters cost almost nothing, at up to 20 ms of added latency.

With ``world_size`` given, the file is deleted when that many instances have been closed
(``close()``, garbage collection or interpreter exit), as torch's FileStore does.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import threading
import time
import weakref

from typing_extensions import Self

from ..errors import TimeoutError
from .base import (
    INTERNAL_KEY_PREFIX,
    Store,
    Timeout,
    get_timeout_message,
    parse_stored_integer,
    to_seconds,
    wait_timeout_message,
)

__all__ = ["FileStore"]

_RECORD = struct.Struct("<cII")  # op, key bytes, value bytes
_SET = b"S"
_DELETE = b"D"
_MIN_SLEEP_S = 0.0005
_MAX_SLEEP_S = 0.02
_JOINED_KEY = INTERNAL_KEY_PREFIX + "pscore/filestore/joined"
_LEFT_KEY = INTERNAL_KEY_PREFIX + "pscore/filestore/left"


class _FileLog:
    """The log and this process's replay of it. Thread-safe (a mutex beside the flock, which
    does not exclude threads sharing one file descriptor)."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)
        self.mutex = threading.Lock()
        self.data: dict[str, bytes] = {}
        self.offset = 0

    def size(self) -> int:
        return os.fstat(self.fd).st_size

    def _replay(self, end: int) -> int:
        """Applies records from self.offset up to end; returns the offset of the first byte
        not forming a whole record (a torn tail)."""
        blob = os.pread(self.fd, end - self.offset, self.offset) if end > self.offset else b""
        pos = 0
        while pos + _RECORD.size <= len(blob):
            op, key_len, value_len = _RECORD.unpack_from(blob, pos)
            stop = pos + _RECORD.size + key_len + value_len
            if stop > len(blob) or op not in (_SET, _DELETE):
                break
            key = blob[pos + _RECORD.size : pos + _RECORD.size + key_len].decode("utf-8")
            if op == _SET:
                self.data[key] = blob[pos + _RECORD.size + key_len : stop]
            else:
                self.data.pop(key, None)
            pos = stop
        self.offset += pos
        return self.offset

    def refresh(self) -> None:
        """Reads what other writers appended (shared lock)."""
        with self.mutex:
            if self.size() == self.offset:
                return
            fcntl.flock(self.fd, fcntl.LOCK_SH)
            try:
                self._replay(self.size())
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def transact(self, fn):
        """Runs fn(data) -> list of (op, key, value) records under the exclusive lock, after
        catching up; appends and applies its records; returns fn's second result."""
        with self.mutex:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            try:
                size = self.size()
                if self._replay(size) != size:
                    os.ftruncate(self.fd, self.offset)  # a writer died mid-record
                records, result = fn(self.data)
                if records:
                    blob = b"".join(_encode(op, k, v) for op, k, v in records)
                    view = memoryview(blob)
                    while view:
                        view = view[os.write(self.fd, view) :]
                    self._replay(self.offset + len(blob))
                return result
            finally:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        os.close(self.fd)


def _encode(op: bytes, key: str, value: bytes) -> bytes:
    k = key.encode("utf-8")
    return _RECORD.pack(op, len(k), len(value)) + k + value


def _add(data: dict[str, bytes], key: str, amount: int):
    current = data.get(key)
    value = amount + (parse_stored_integer(key, current) if current is not None else 0)
    return [(_SET, key, str(value).encode())], value


def _release(log: _FileLog, world_size: int | None) -> None:
    """Counts this instance out; the last of world_size instances deletes the file."""
    try:
        if world_size is not None:
            left = log.transact(lambda d: _add(d, _LEFT_KEY, 1))
            if left >= world_size:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(log.path)
    finally:
        log.close()


class FileStore(Store):
    """A Store in ``path``, usable from many processes. Missing directories are an error."""

    def __init__(self, path: str, world_size: int | None = None, timeout: Timeout = 30.0):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"FileStore path must be a str or path, not {type(path).__name__}")
        if world_size is not None and (
            isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1
        ):
            raise ValueError(f"FileStore world_size must be a positive int, got {world_size!r}")
        self._path = os.fspath(path)
        self._timeout = to_seconds(timeout)
        self._world_size = world_size
        try:
            self._log = _FileLog(self._path)
        except OSError as e:
            raise ValueError(f"FileStore cannot open {self._path!r}: {e.strerror}") from None
        self._name = f"FileStore({self._path})"
        if world_size is not None:
            self._log.transact(lambda d: _add(d, _JOINED_KEY, 1))
        self._finalizer = weakref.finalize(self, _release, self._log, world_size)

    @property
    def path(self) -> str:
        return self._path

    def close(self) -> None:
        """Releases the file (and deletes it when the last of world_size instances closes)."""
        self._finalizer()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_open(self) -> _FileLog:
        if not self._finalizer.alive:
            raise ValueError(f"{self._name} is closed")
        return self._log

    def _set(self, key: str, value: bytes) -> None:
        self._check_open().transact(lambda _data: ([(_SET, key, value)], None))

    def _get(self, key: str) -> bytes:
        log = self._check_open()
        missing = self._wait_for(log, [key], self._timeout)
        if missing:
            raise TimeoutError(get_timeout_message(self._name, key, self._timeout))
        with log.mutex:
            return log.data[key]

    def _add(self, key: str, amount: int) -> int:
        return self._check_open().transact(lambda d: _add(d, key, amount))

    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        def cas(data):
            current = data.get(key)
            if (current is None and expected == b"") or (
                current is not None and current == expected
            ):
                return [(_SET, key, desired)], desired
            return [], expected if current is None else current

        return self._check_open().transact(cas)

    def _wait(self, keys: list[str], timeout_s: float) -> None:
        missing = self._wait_for(self._check_open(), keys, timeout_s)
        if missing:
            raise TimeoutError(wait_timeout_message(self._name, timeout_s, missing))

    def _wait_for(self, log: _FileLog, keys: list[str], timeout_s: float) -> list[str]:
        """Waits until keys exist; returns those still missing at the deadline."""
        deadline = time.monotonic() + timeout_s
        sleep = _MIN_SLEEP_S
        while True:
            size = log.size()  # taken first: a write landing after the replay changes it
            log.refresh()
            with log.mutex:
                missing = [k for k in keys if k not in log.data]
            left = deadline - time.monotonic()
            if not missing or left <= 0:
                return missing
            # Sleep until the file grows (another writer) or the deadline.
            while log.size() == size and left > 0:
                time.sleep(min(sleep, left))
                sleep = min(sleep * 2, _MAX_SLEEP_S)
                left = deadline - time.monotonic()

    def _check(self, keys: list[str]) -> bool:
        log = self._check_open()
        log.refresh()
        with log.mutex:
            return all(k in log.data for k in keys)

    def _delete_key(self, key: str) -> bool:
        return self._check_open().transact(
            lambda d: ([(_DELETE, key, b"")], True) if key in d else ([], False)
        )

    def _num_keys(self) -> int:
        log = self._check_open()
        log.refresh()
        with log.mutex:
            return sum(1 for k in log.data if not k.startswith(INTERNAL_KEY_PREFIX))

    def _get_timeout(self) -> float:
        return self._timeout

    def _set_timeout(self, seconds: float) -> None:
        self._timeout = seconds

    def __repr__(self) -> str:
        return f"FileStore(path={self._path!r}, world_size={self._world_size})"
