"""``create_store(init_method, ...)``: the store an init_method URL (``tcp://``, ``env://``,
``file://``, ``redis://``) names, and ``env_store`` for a job discovered from the environment."""

from __future__ import annotations

import urllib.parse

from .. import _config
from ..cluster.discovery import ClusterEnv, discover
from .base import Store, Timeout, to_seconds
from .file_store import FileStore
from .native import TCPStore
from .redis_store import RedisStore

__all__ = ["create_store", "env_store"]


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
    its agent serves (pscore.store.torch_store); otherwise rank 0 serves one at the master's
    address."""
    _check_rank(rank, world_size, "env")
    if env.agent_store_prefix is not None:
        from .torch_store import agent_store

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
      [pscore.cluster.discover][] (PSCORE_*, torchrun, TF_CONFIG, Slurm, Open MPI); under
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
