"""Rendezvous stores (torch.distributed.Store semantics) and ``create_store(init_method, ...)``.

``TCPStore`` and ``HashStore`` are the C++ stores of ``pscore._store``; ``FileStore`` and
``RedisStore`` are Python; ``PrefixStore`` wraps any of them. All share the API of
:class:`pscore.store_base.Store`: set, get, add, compare_set, wait, check, delete_key, num_keys,
timeout / set_timeout. Blocking calls release the GIL and raise
:class:`pscore.errors.TimeoutError` naming the keys still missing.
"""

from __future__ import annotations

import math
import urllib.parse

from pscore import _config, _store
from pscore.cluster import ClusterEnv, discover
from pscore.file_store import FileStore
from pscore.redis_store import RedisStore
from pscore.store_base import Store, Timeout, to_ms, to_seconds

__all__ = [
    "FileStore",
    "HashStore",
    "PrefixStore",
    "RedisStore",
    "Store",
    "TCPStore",
    "create_store",
]


class _CppStore(Store):
    """A Store backed by a pscore._store object (the C++ implementation)."""

    _impl: _store.Store

    def _set(self, key: str, value: bytes) -> None:
        self._impl.set(key, value)

    def _get(self, key: str) -> bytes:
        return self._impl.get(key)

    def _add(self, key: str, amount: int) -> int:
        return self._impl.add(key, amount)

    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        return self._impl.compare_set(key, expected, desired)

    def _wait(self, keys: list[str], timeout_s: float) -> None:
        self._impl.wait(keys, to_ms(timeout_s))

    def _check(self, keys: list[str]) -> bool:
        return self._impl.check(keys)

    def _delete_key(self, key: str) -> bool:
        return self._impl.delete_key(key)

    def _num_keys(self) -> int:
        return self._impl.num_keys()

    def _get_timeout(self) -> float:
        ms = self._impl.timeout_ms
        return math.inf if ms < 0 else ms / 1000.0

    def _set_timeout(self, seconds: float) -> None:
        self._impl.timeout_ms = to_ms(seconds)


class HashStore(_CppStore):
    """An in-process store: threads of one process share it (ranks as threads, tests)."""

    def __init__(self, timeout: Timeout = 30.0):
        self._impl = _store.HashStore(to_ms(to_seconds(timeout)))

    def __repr__(self) -> str:
        return "HashStore()"


def _check_port(port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"TCPStore port must be an int, not {type(port).__name__}")
    if not 0 <= port <= 65535:
        raise ValueError(f"TCPStore port must be in 0..65535, got {port}")
    return port


def _check_optional(name: str, value: object, kind: type) -> None:
    if value is not None and not isinstance(value, kind):
        raise TypeError(
            f"TCPStore {name} must be a {kind.__name__} or None, not {type(value).__name__}"
        )


def _check_world_size(world_size: object) -> int | None:
    if world_size is None:
        return None
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int or None, got {world_size!r}")
    return world_size


class TCPStore(_CppStore):
    """torch.distributed.TCPStore: the master (``is_master=True``) runs the server thread and
    binds ``host:port`` (port 0 picks a free one, see ``.port``; a busy port raises
    pscore.errors.NetworkError); everyone connects, retrying until ``timeout`` while the master
    is not up. With ``world_size`` and ``wait_for_workers`` the master's constructor returns once
    ``world_size`` instances (itself included) have connected.

    ``bind_host`` (master only) overrides the bind address: by default ``host`` when it is a
    loopback address, otherwise every interface.

    Security (docs/security.md): with a shared secret - ``auth_token``, or by default
    ``PSCORE_AUTH_TOKEN`` / the file named by ``PSCORE_AUTH_TOKEN_FILE`` - every connection runs
    a mutual HMAC-SHA256 challenge-response bound to ``job_id`` (default ``PSCORE_JOB_ID`` or
    ``"pscore"``); a client whose token differs raises pscore.errors.NetworkError
    "authentication with store at host:port failed (wrong PSCORE_AUTH_TOKEN?)". A master whose
    bind address other hosts can reach needs a token, or ``insecure=True`` (default
    ``PSCORE_INSECURE=1``); otherwise it raises ValueError."""

    def __init__(
        self,
        host: str,
        port: int,
        world_size: int | None = None,
        is_master: bool = False,
        timeout: Timeout = 30.0,
        wait_for_workers: bool = False,
        *,
        bind_host: str | None = None,
        auth_token: str | None = None,
        insecure: bool | None = None,
        job_id: str | None = None,
    ):
        if not isinstance(host, str) or not host:
            raise ValueError(f"TCPStore host must be a non-empty str, got {host!r}")
        _check_port(port)
        if port == 0 and not is_master:
            raise ValueError("TCPStore: a client needs the master's port; 0 is for the master")
        self._world_size = _check_world_size(world_size)
        _check_optional("auth_token", auth_token, str)
        _check_optional("insecure", insecure, bool)
        _check_optional("job_id", job_id, str)
        self._impl = _store.TCPStore(
            host,
            port,
            is_master=bool(is_master),
            world_size=-1 if world_size is None else world_size,
            wait_for_workers=bool(wait_for_workers),
            timeout_ms=to_ms(to_seconds(timeout)),
            bind_host=bind_host,
            auth_token=auth_token,  # None: PSCORE_AUTH_TOKEN / PSCORE_AUTH_TOKEN_FILE
            insecure=insecure,  # None: PSCORE_INSECURE
            job_id=_config.JOB_ID.get() if job_id is None else job_id,
        )

    @property
    def host(self) -> str:
        return self._impl.host

    @property
    def port(self) -> int:
        """The server's port (the one picked when the master asked for port 0)."""
        return self._impl.port

    @property
    def is_master(self) -> bool:
        return self._impl.is_master

    @property
    def world_size(self) -> int | None:
        return self._world_size

    @property
    def dropped_connections(self) -> int:
        """Master only: connections its server dropped for breaking the protocol."""
        return self._impl.dropped_connections

    @property
    def authenticated(self) -> bool:
        """True when this store's connections authenticate with a token."""
        return self._impl.authenticated

    @property
    def auth_failures(self) -> int:
        """Master only: connections its server refused in the handshake (no, wrong or unwanted
        token, another job)."""
        return self._impl.auth_failures

    def __repr__(self) -> str:
        return f"TCPStore(host={self.host!r}, port={self.port}, is_master={self.is_master})"


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


def _check_rank(rank: int | None, world_size: int | None, scheme: str) -> None:
    if rank is None or world_size is None:
        raise ValueError(f"{scheme}:// init_method needs rank and world_size")
    for name, v in (("rank", rank), ("world_size", world_size)):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int, not {type(v).__name__}")
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1} (world_size {world_size})")


def _tcp_store(host: str, port: int, rank: int, world_size: int, timeout: float) -> TCPStore:
    if port == 0 and world_size > 1:
        raise ValueError(
            f"tcp store at {host}:0: other ranks cannot find a port picked at random; "
            "give the master a fixed port (port 0 works only with world_size 1)"
        )
    return TCPStore(host, port, world_size, is_master=rank == 0, timeout=timeout)


def env_store(env: ClusterEnv, rank: int, world_size: int, timeout_s: float) -> Store:
    """The store of a job discovered from the environment: under torchrun, a client of the store
    its agent serves (pscore.torch_store); otherwise rank 0 serves one at the master's address."""
    _check_rank(rank, world_size, "env")
    if env.agent_store_prefix is not None:
        from pscore.torch_store import agent_store

        return agent_store(env.master_addr, env.master_port, env.agent_store_prefix, timeout_s)
    return _tcp_store(env.master_addr, env.master_port, rank, world_size, timeout_s)


def _url_port(url: urllib.parse.SplitResult, init_method: str) -> int | None:
    try:
        return url.port
    except ValueError:
        raise ValueError(
            f"init_method {init_method!r}: the port is not a number in 0..65535"
        ) from None


def create_store(
    init_method: str,
    rank: int | None = None,
    world_size: int | None = None,
    timeout: Timeout = 1800.0,
) -> Store:
    """The store an ``init_method`` URL names; ranks may call this in any order.

    - ``tcp://host:port``: rank 0 serves a TCPStore on host:port, the others connect;
    - ``env://``: the same, with host, port (and rank / world_size when not given) from
      :func:`pscore.cluster.discover` (PSCORE_*, torchrun, TF_CONFIG, Slurm, Open MPI); under
      torchrun every rank is a client of the store torchrun's agent serves;
    - ``file:///abs/path``: a FileStore in that file (deleted once world_size ranks closed it);
    - ``redis://[:password@]host[:port][/db][?prefix=name]``: a RedisStore; keys live under
      ``prefix`` (default ``$PSCORE_JOB_ID`` or ``"pscore"``) - use a fresh prefix per job,
      since keys left by an earlier job with the same prefix are seen by this one.
    """
    if not isinstance(init_method, str):
        raise TypeError(f"init_method must be a str URL, not {type(init_method).__name__}")
    seconds = to_seconds(timeout)
    url = urllib.parse.urlsplit(init_method)
    scheme = url.scheme.lower()
    if scheme == "env":
        env = discover()
        rank = env.rank if rank is None else rank
        world_size = env.world_size if world_size is None else world_size
        return env_store(env, rank, world_size, seconds)
    if scheme == "tcp":
        port = _url_port(url, init_method)
        if not url.hostname or port is None:
            raise ValueError(f"init_method {init_method!r}: expected tcp://host:port")
        _check_rank(rank, world_size, scheme)
        return _tcp_store(url.hostname, port, rank, world_size, seconds)
    if scheme == "file":
        if url.netloc not in ("", "localhost") or not url.path.startswith("/"):
            raise ValueError(
                f"init_method {init_method!r}: expected file:///absolute/path (three slashes)"
            )
        return FileStore(urllib.parse.unquote(url.path), world_size, seconds)
    if scheme == "redis":
        return _redis_store(url, init_method, seconds)
    raise ValueError(
        f"init_method {init_method!r}: unknown scheme {url.scheme!r} "
        "(expected env://, tcp://host:port, file:///path or redis://host:port)"
    )


def _redis_store(url: urllib.parse.SplitResult, init_method: str, seconds: float) -> RedisStore:
    port = _url_port(url, init_method) or 6379
    db_text = url.path.strip("/") or "0"
    if not db_text.isdigit():
        raise ValueError(f"init_method {init_method!r}: the database {db_text!r} is not a number")
    query = urllib.parse.parse_qs(url.query)
    prefix = query.get("prefix", [_config.JOB_ID.get()])[-1]
    return RedisStore(
        url.hostname or "127.0.0.1",
        port,
        prefix=prefix,
        timeout=seconds,
        db=int(db_text),
        password=urllib.parse.unquote(url.password) if url.password else None,
    )
