"""RedisStore: a Store in a real Redis server (via redis-py), keys under "<prefix>/".

Waiting does not poll: a get/wait on missing keys subscribes to one pub/sub channel per missing
key, re-checks (closing the race with a writer), then blocks in the subscription until a
set/add/compare_set publishes on a key's channel (every write here publishes in the same
transaction). As a safety net against writers that do not publish (another Redis client), the
keys are re-checked at least once a second.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

from ..errors import NetworkError, TimeoutError
from .base import (
    Store,
    Timeout,
    get_timeout_message,
    to_seconds,
    wait_timeout_message,
)

__all__ = ["RedisStore"]

_CHANNEL_PREFIX = b"pscore-store-notify:"
_RECHECK_S = 1.0
# KEYS[1] the key, KEYS[2] its channel; ARGV[1] expected, ARGV[2] desired.
_COMPARE_SET_LUA = """
local v = redis.call('GET', KEYS[1])
if (not v and ARGV[1] == '') or (v and v == ARGV[1]) then
  redis.call('SET', KEYS[1], ARGV[2])
  redis.call('PUBLISH', KEYS[2], '1')
  return ARGV[2]
end
if not v then return ARGV[1] end
return v
"""


def _import_redis():
    try:
        import redis
    except ImportError:
        raise ImportError(
            "RedisStore needs redis-py: pip install 'pscore[redis]' (or pip install redis)"
        ) from None
    return redis


class RedisStore(Store):
    """A Store in the Redis server at host:port (database ``db``), keys under ``prefix``.

    Connecting retries until ``timeout`` while the server is not up yet."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 6379,
        prefix: str = "pscore",
        timeout: Timeout = 30.0,
        *,
        db: int = 0,
        password: str | None = None,
    ):
        redis = _import_redis()
        if not isinstance(prefix, str):
            raise TypeError(f"RedisStore prefix must be str, not {type(prefix).__name__}")
        if isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"RedisStore port must be in 1..65535, got {port!r}")
        self._redis_mod = redis
        self._timeout = to_seconds(timeout)
        self._prefix = prefix
        self._name = f"RedisStore({host}:{port}/{db}, prefix={prefix!r})"
        self._client = redis.Redis(
            host=host,
            port=port,
            db=db,
            password=password,
            socket_connect_timeout=_socket_timeout(self._timeout),
            socket_timeout=_socket_timeout(self._timeout),
            **_no_retry(),
        )
        self._compare_set_script = self._client.register_script(_COMPARE_SET_LUA)
        self._connect()

    def _connect(self) -> None:
        deadline = time.monotonic() + self._timeout
        delay = 0.01
        while True:
            try:
                self._client.ping()
                return
            except self._redis_mod.ConnectionError as e:
                if time.monotonic() + delay > deadline:
                    raise TimeoutError(
                        f"{self._name}: cannot reach redis-server within {self._timeout:g} s: {e}"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @contextlib.contextmanager
    def _errors(self, what: str) -> Iterator[None]:
        """Turns redis-py's connection failures into pscore.errors.NetworkError."""
        try:
            yield
        except (self._redis_mod.ConnectionError, self._redis_mod.TimeoutError) as e:
            raise NetworkError(f"{self._name}: {what} failed: {e}") from None

    def _full(self, key: str) -> bytes:
        return f"{self._prefix}/{key}".encode()

    def _channel(self, key: str) -> bytes:
        return _CHANNEL_PREFIX + self._full(key)

    @property
    def prefix(self) -> str:
        return self._prefix

    def _set(self, key: str, value: bytes) -> None:
        with self._errors(f"set({key!r})"):
            pipe = self._client.pipeline(transaction=True)
            pipe.set(self._full(key), value).publish(self._channel(key), b"1").execute()

    def _get(self, key: str) -> bytes:
        deadline = time.monotonic() + self._timeout
        with self._errors(f"get({key!r})"):
            while True:
                value = self._client.get(self._full(key))
                if value is not None:
                    return value
                left = deadline - time.monotonic()
                if left <= 0 or self._wait_for([key], left):
                    raise TimeoutError(get_timeout_message(self._name, key, self._timeout))

    def _add(self, key: str, amount: int) -> int:
        redis = self._redis_mod
        with self._errors(f"add({key!r})"):
            pipe = self._client.pipeline(transaction=True)
            pipe.incrby(self._full(key), amount).publish(self._channel(key), b"1")
            try:
                return int(pipe.execute()[0])
            except redis.ResponseError:
                current = self._client.get(self._full(key)) or b""
                raise ValueError(
                    f"add: key {key!r} holds {current[:64]!r}, which is not an integer"
                ) from None

    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        with self._errors(f"compare_set({key!r})"):
            return self._compare_set_script(
                keys=[self._full(key), self._channel(key)], args=[expected, desired]
            )

    def _missing(self, keys: list[str]) -> list[str]:
        pipe = self._client.pipeline(transaction=False)
        for k in keys:
            pipe.exists(self._full(k))
        return [k for k, present in zip(keys, pipe.execute()) if not present]

    def _wait_for(self, keys: list[str], timeout_s: float) -> list[str]:
        """Blocks until keys exist (see the module docstring); returns those still missing."""
        missing = self._missing(keys)
        if not missing:
            return missing
        deadline = time.monotonic() + timeout_s
        pubsub = self._client.pubsub(ignore_subscribe_messages=True)
        try:
            pubsub.subscribe(*[self._channel(k) for k in missing])
            while True:
                missing = self._missing(missing)
                left = deadline - time.monotonic()
                if not missing or left <= 0:
                    return missing
                pubsub.get_message(timeout=min(left, _RECHECK_S))
        finally:
            pubsub.close()

    def _wait(self, keys: list[str], timeout_s: float) -> None:
        with self._errors(f"wait({keys!r})"):
            missing = self._wait_for(keys, timeout_s)
        if missing:
            raise TimeoutError(wait_timeout_message(self._name, timeout_s, missing))

    def _check(self, keys: list[str]) -> bool:
        if not keys:
            return True
        with self._errors("check"):
            return self._client.exists(*[self._full(k) for k in keys]) == len(keys)

    def _delete_key(self, key: str) -> bool:
        with self._errors(f"delete_key({key!r})"):
            return self._client.delete(self._full(key)) > 0

    def _num_keys(self) -> int:
        pattern = _glob_escape(self._prefix) + b"/*"
        with self._errors("num_keys"):
            return sum(1 for _ in self._client.scan_iter(match=pattern, count=1000))

    def _get_timeout(self) -> float:
        return self._timeout

    def _set_timeout(self, seconds: float) -> None:
        self._timeout = seconds

    def close(self) -> None:
        self._client.close()

    def __repr__(self) -> str:
        return self._name


def _socket_timeout(seconds: float) -> float | None:
    return None if seconds > 1e9 else seconds  # socket timeouts must be finite; None blocks


def _no_retry() -> dict:
    """Turns off redis-py's own retries (recent versions retry 3 times with backoff): this store
    retries connecting itself, within its timeout."""
    try:
        from redis.backoff import NoBackoff
        from redis.retry import Retry
    except ImportError:  # redis-py too old to retry on its own
        return {}
    return {"retry": Retry(NoBackoff(), 0)}


def _glob_escape(text: str) -> bytes:
    out = bytearray()
    for ch in text.encode("utf-8"):
        if ch in b"*?[]\\":
            out += b"\\"
        out.append(ch)
    return bytes(out)
