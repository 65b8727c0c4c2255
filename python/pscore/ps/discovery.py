"""Where parameter servers are: the store keys a shard publishes its address under, so workers
find servers with no host lists, and find a restarted shard's new address."""

from __future__ import annotations

import time
import urllib.parse

from .. import errors
from ..cluster.spec import advertised_host
from ..store.base import Store
from ..store.create import create_store
from ..store.native import TCPStore

__all__ = [
    "connect_shard",
    "num_shards_key",
    "open_store",
    "parse_address",
    "publish",
    "read_address",
    "read_num_shards",
    "shard_key",
]

_STORE_PATIENCE_S = 2.0  # how long a store may take to answer before on_wait is told


def open_store(store: Store | str, timeout: float, on_wait=None) -> Store:
    """`store` itself, or the store a URL names: ``tcp://host:port`` connects to a TCPStore
    that someone else serves (``pscore-store``, or the job's master), retrying while it is not up
    yet, for up to `timeout` seconds (``on_wait(message)`` is called once when that takes longer
    than a moment); ``file://`` and ``redis://`` as in create_store."""
    if isinstance(store, Store):
        return store
    if not isinstance(store, str):
        raise TypeError(f"store must be a pscore Store or a URL string, not {type(store).__name__}")
    url = urllib.parse.urlsplit(store)
    if url.scheme != "tcp":
        return create_store(store, timeout=timeout)
    if not url.hostname or not url.port:
        raise ValueError(f"store URL {store!r}: expected tcp://host:port")
    deadline = time.monotonic() + timeout
    first_try = min(timeout, _STORE_PATIENCE_S) if on_wait is not None else timeout
    try:
        try:
            return TCPStore(url.hostname, url.port, is_master=False, timeout=first_try)
        except errors.TimeoutError:
            left = deadline - time.monotonic()
            if first_try >= timeout or left <= 0:
                raise
            on_wait(f"waiting up to {timeout:g} s for the store at {store}")
            return TCPStore(url.hostname, url.port, is_master=False, timeout=left)
    except errors.TimeoutError as e:
        raise errors.TimeoutError(
            f"no store answered at {store} within {timeout:g} s (is pscore-store, or the job's "
            "store, serving there?)"
        ) from e
    except errors.NetworkError as e:
        raise errors.NetworkError(f"store at {store}: {e}") from e


def shard_key(job_id: str, shard: int) -> str:
    return f"pscore/ps/{job_id or 'default'}/shard/{shard}"


def num_shards_key(job_id: str) -> str:
    return f"pscore/ps/{job_id or 'default'}/num_shards"


def publish(
    store, job_id: str, shard: int, num_shards: int, host: str, port: int, incarnation: int
) -> None:
    store.set(num_shards_key(job_id), str(num_shards))
    store.set(shard_key(job_id, shard), f"{advertised_host(host)}:{port}:{incarnation}")


def read_num_shards(store, job_id: str, timeout: float) -> int:
    key = num_shards_key(job_id)
    try:
        store.wait([key], timeout)
    except errors.TimeoutError as e:
        raise errors.TimeoutError(
            f"no parameter-server shard registered within {timeout:g} s under job id "
            f"{job_id!r} (is a pserver serving with this --store and --job-id?): {e}"
        ) from e
    return int(store.get(key).decode())


def read_address(store, job_id: str, shard: int, timeout: float) -> tuple[str, int, int]:
    """(host, port, incarnation) of a shard, waiting up to timeout seconds for it to register."""
    key = shard_key(job_id, shard)
    store.wait([key], timeout)
    host, port, incarnation = store.get(key).decode().rsplit(":", 2)
    return host, int(port), int(incarnation)


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"server address {text!r} is not host:port")
    return host.strip("[]"), int(port)


def connect_shard(client, shard: int, *, store, job_id: str, servers, deadline: float) -> None:
    """(Re)connects `client` to `shard` until `deadline` (time.monotonic()), re-reading the
    store each try so that a restarted shard's new port is picked up."""
    delay = 0.02
    last: Exception | None = None
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise errors.NetworkError(
                f"cannot reach parameter-server shard {shard}: {last or 'timed out'}"
            )
        try:
            if store is not None:
                host, port, _ = read_address(store, job_id, shard, max(0.05, min(left, 5.0)))
            else:
                host, port = parse_address(servers[shard])
            # Short tries: a restarted shard may come back on another port (see the store).
            client.connect(shard, host, port, int(max(0.05, min(left, 1.0)) * 1000))
            return
        except (
            errors.NetworkError,
            errors.TimeoutError,
            errors.StoreError,
            ConnectionError,
            TimeoutError,
        ) as e:
            last = e
        time.sleep(min(delay, max(0.0, deadline - time.monotonic())))
        delay = min(delay * 2, 0.5)
