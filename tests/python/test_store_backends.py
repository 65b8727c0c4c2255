"""FileStore and RedisStore specifics, and create_store's init_method URLs."""

from __future__ import annotations

import os
import socket
import threading

import pytest

import pscore.errors
from pscore.store import FileStore, PrefixStore, RedisStore, TCPStore, create_store


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ----------------------------------------------------------------------------- FileStore


def test_file_store_instances_share_the_file(tmp_path):
    path = str(tmp_path / "f")
    a, b = FileStore(path, timeout=5), FileStore(path, timeout=5)
    a.set("k", b"v")
    assert b.get("k") == b"v"
    assert b.add("n", 2) == 2 and a.add("n", 3) == 5
    assert b.delete_key("k") and not a.check(["k"])
    a.close()
    b.close()


def test_file_store_is_deleted_when_world_size_instances_closed(tmp_path):
    path = str(tmp_path / "f")
    first, second = FileStore(path, world_size=2), FileStore(path, world_size=2)
    first.set("k", b"v")
    assert second.num_keys() == 1  # the join bookkeeping is not a user key
    first.close()
    assert os.path.exists(path)
    with pytest.raises(ValueError, match="is closed"):
        first.get("k")
    second.close()
    assert not os.path.exists(path)


def test_file_store_survives_a_torn_record(tmp_path):
    """A writer that died mid-append leaves a partial record; the next writer cuts it off."""
    path = str(tmp_path / "f")
    store = FileStore(path, timeout=5)
    store.set("a", b"1")
    with open(path, "ab") as f:
        f.write(b"S\x05\x00\x00")  # half a record header
    other = FileStore(path, timeout=5)
    assert other.get("a") == b"1"
    other.set("b", b"2")
    assert store.get("b") == b"2" and store.get("a") == b"1"
    assert FileStore(path).num_keys() == 2


def test_file_store_in_a_missing_directory_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"FileStore cannot open .*No such file or directory"):
        FileStore(str(tmp_path / "no" / "such" / "dir" / "f"))


def test_file_store_bad_world_size(tmp_path):
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        FileStore(str(tmp_path / "f"), world_size=0)


# ----------------------------------------------------------------------------- RedisStore


def test_redis_prefixes_are_isolated(redis_server):
    pytest.importorskip("redis")
    a = RedisStore(redis_server.host, redis_server.port, prefix="iso-a", timeout=5)
    b = RedisStore(redis_server.host, redis_server.port, prefix="iso-b", timeout=5)
    a.set("k", b"from a")
    b.set("k", b"from b")
    b.set("only_b", b"")
    assert a.get("k") == b"from a" and b.get("k") == b"from b"
    assert a.num_keys() == 1 and b.num_keys() == 2
    assert not a.check(["only_b"])


def test_redis_prefix_with_glob_characters_counts_only_its_keys(redis_server):
    pytest.importorskip("redis")
    star = RedisStore(redis_server.host, redis_server.port, prefix="g*", timeout=5)
    other = RedisStore(redis_server.host, redis_server.port, prefix="gx", timeout=5)
    other.set("k", b"1")
    star.set("k", b"1")
    assert star.num_keys() == 1


def test_redis_unreachable_server_times_out():
    pytest.importorskip("redis")
    port = free_port()
    with pytest.raises(pscore.errors.TimeoutError, match=rf"127.0.0.1:{port}.*cannot reach"):
        RedisStore("127.0.0.1", port, timeout=0.3)


# ----------------------------------------------------------------------------- create_store


def test_tcp_url_ranks_in_any_order():
    port = free_port()
    url = f"tcp://127.0.0.1:{port}"
    out = {}

    def rank(r):
        out[r] = create_store(url, r, 3, timeout=10)

    threads = [threading.Thread(target=rank, args=(r,)) for r in (2, 1)]
    for t in threads:
        t.start()  # ranks 1 and 2 come up before the master
    rank(0)
    for t in threads:
        t.join(15)
    assert isinstance(out[0], TCPStore) and out[0].is_master
    assert not out[1].is_master and out[2].port == port
    out[2].set("x", b"2")
    assert out[0].get("x") == b"2" and out[1].get("x") == b"2"


def test_env_url_uses_discovered_master(monkeypatch):
    port = free_port()
    for name, value in {
        "PSCORE_RANK": "0",
        "PSCORE_WORLD_SIZE": "1",
        "PSCORE_MASTER_ADDR": "127.0.0.1",
        "PSCORE_MASTER_PORT": str(port),
    }.items():
        monkeypatch.setenv(name, value)
    store = create_store("env://", timeout=5)
    assert isinstance(store, TCPStore) and store.is_master and store.port == port


def test_file_url(tmp_path):
    path = tmp_path / "rdzv"
    store = create_store(f"file://{path}", 0, 1, timeout=5)
    assert isinstance(store, FileStore) and store.path == str(path)
    store.set("k", b"v")
    assert FileStore(str(path)).get("k") == b"v"


def test_redis_url(redis_server):
    pytest.importorskip("redis")
    store = create_store(f"{redis_server.url}/0?prefix=urljob", 0, 1, timeout=5)
    assert isinstance(store, RedisStore) and store.prefix == "urljob"
    store.set("k", b"v")
    assert RedisStore(redis_server.host, redis_server.port, prefix="urljob").get("k") == b"v"


@pytest.mark.parametrize(
    ("url", "rank", "world", "message"),
    [
        ("tcp://127.0.0.1:0", 0, 2, "port 0 works only with world_size 1"),
        ("tcp://127.0.0.1", 0, 2, "expected tcp://host:port"),
        ("tcp://127.0.0.1:99999", 0, 2, "port is not a number"),
        ("tcp://127.0.0.1:1234", 2, 2, "rank 2 is not in 0..1"),
        ("tcp://127.0.0.1:1234", None, 2, "needs rank and world_size"),
        ("file://relative/path", 0, 1, "file:///absolute/path"),
        ("redis://127.0.0.1:6379/db1", 0, 1, "database 'db1' is not a number"),
        ("http://x:1", 0, 1, "unknown scheme 'http'"),
    ],
)
def test_bad_urls(url, rank, world, message):
    with pytest.raises(ValueError, match=message):
        create_store(url, rank, world, timeout=1)


def test_prefix_store_wraps_python_stores(tmp_path):
    inner = FileStore(str(tmp_path / "f"), timeout=5)
    a, b = PrefixStore("a", inner), PrefixStore("b", inner)
    a.set("k", b"1")
    b.set("k", b"2")
    assert inner.get("a/k") == b"1" and inner.get("b/k") == b"2"
    assert a.num_keys() == 2  # the inner store's count, as torch
    with pytest.raises(TypeError, match="wraps a pscore Store"):
        PrefixStore("x", object())
