"""The store contract: every store (TCP, Hash, File, Prefix over TCP, Redis) against the same
tests, including multi-process rendezvous over loopback."""

from __future__ import annotations

import datetime
import json
import os
import subprocess
import sys
import threading
import time
import uuid

import pytest

import pscore.errors
from pscore.store import FileStore, HashStore, PrefixStore, RedisStore, TCPStore

KINDS = ["tcp", "hash", "file", "prefix_tcp", "redis"]
PYTHON_PATH = os.path.dirname(os.path.dirname(os.path.abspath(pscore.errors.__file__)))


def make_store(kind: str, request, tmp_path, timeout: float = 5.0):
    """(store, spec): spec tells a child process how to open the same store (None: in-process
    only)."""
    if kind == "tcp":
        s = TCPStore("127.0.0.1", 0, is_master=True, timeout=timeout)
        return s, {"kind": "tcp", "port": s.port}
    if kind == "prefix_tcp":
        inner = TCPStore("127.0.0.1", 0, is_master=True, timeout=timeout)
        return PrefixStore("job7", inner), {"kind": "prefix_tcp", "port": inner.port}
    if kind == "hash":
        return HashStore(timeout=timeout), None
    if kind == "file":
        path = str(tmp_path / "store.log")
        s = FileStore(path, timeout=timeout)
        request.addfinalizer(s.close)
        return s, {"kind": "file", "path": path}
    if kind == "redis":
        pytest.importorskip("redis")
        server = request.getfixturevalue("redis_server")
        prefix = "t-" + uuid.uuid4().hex[:8]
        s = RedisStore(server.host, server.port, prefix=prefix, timeout=timeout)
        request.addfinalizer(s.close)
        return s, {"kind": "redis", "port": server.port, "prefix": prefix}
    raise AssertionError(kind)


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.fixture
def store(kind, request, tmp_path):
    return make_store(kind, request, tmp_path)[0]


def test_set_get_roundtrip(store):
    store.set("a", b"\x00binary\xff")
    store.set("s", "text é")
    store.set("empty", b"")
    store.set("big", b"x" * (1 << 20))
    assert store.get("a") == b"\x00binary\xff"
    assert store.get("s") == "text é".encode()
    assert store.get("empty") == b""
    assert store.get("big") == b"x" * (1 << 20)
    store.set("a", bytearray(b"new"))
    assert store.get("a") == b"new"


def test_get_blocks_until_another_thread_sets(store):
    def later():
        time.sleep(0.1)
        store.set("late", b"v")

    t = threading.Thread(target=later)
    t.start()
    assert store.get("late") == b"v"
    t.join()


def test_get_times_out_naming_the_key(store):
    store.set_timeout(0.2)
    with pytest.raises(
        pscore.errors.TimeoutError, match=r"get\('(job7/)?never_set'\).*200 ms"
    ) as info:
        store.get("never_set")
    assert isinstance(info.value, TimeoutError)  # the builtin, as users catch it


def test_add(store):
    assert store.add("n", 5) == 5
    assert store.add("n", 2) == 7
    assert store.add("n", -10) == -3
    assert store.add("n", 0) == -3
    assert store.get("n") == b"-3"
    store.set("m", "40")
    assert store.add("m", 2) == 42


def test_add_on_a_non_integer_is_a_value_error(store):
    store.set("word", b"hello")
    with pytest.raises(
        ValueError, match=r"add: key '(job7/)?word' holds b?'hello', which is not an int"
    ):
        store.add("word", 1)
    assert store.get("word") == b"hello"


def test_compare_set(store):
    # missing key, empty expected: set
    assert store.compare_set("k", b"", b"first") == b"first"
    assert store.get("k") == b"first"
    # wrong expected: unchanged, returns the current value
    assert store.compare_set("k", b"other", b"second") == b"first"
    assert store.get("k") == b"first"
    # right expected: swapped
    assert store.compare_set("k", "first", "second") == b"second"
    assert store.get("k") == b"second"
    # missing key, non-empty expected: nothing set, returns expected
    assert store.compare_set("absent", b"exp", b"des") == b"exp"
    assert not store.check(["absent"])


def test_wait_returns_when_keys_exist_and_names_missing_keys(store):
    store.set("a", b"1")
    store.set("b", b"2")
    store.wait(["a", "b"])
    store.wait(["a"], datetime.timedelta(seconds=1))
    store.wait([], 0)
    with pytest.raises(TimeoutError, match=r"wait timed out after 150 ms") as info:
        store.wait(["a", "missing1", "b", "missing2"], 0.15)
    missing = str(info.value).split("missing:")[1].replace("job7/", "")
    assert missing.strip() == "'missing1', 'missing2'"
    assert isinstance(info.value, pscore.errors.TimeoutError)


def test_wait_blocks_until_keys_are_set(store):
    def later():
        time.sleep(0.05)
        store.set("w1", b"x")
        time.sleep(0.05)
        store.add("w2", 1)

    t = threading.Thread(target=later)
    t.start()
    store.wait(["w1", "w2"], 5.0)
    t.join()
    assert store.check(["w1", "w2"])


def test_wait_with_zero_timeout_checks_once(store):
    store.set("here", b"")
    store.wait(["here"], 0)
    with pytest.raises(TimeoutError, match=r"'(job7/)?gone'"):
        store.wait(["gone"], 0)


def test_check(store):
    assert store.check([])
    assert not store.check(["c"])
    store.set("c", b"1")
    assert store.check(["c"])
    assert not store.check(["c", "d"])


def test_delete_key(store):
    store.set("d", b"1")
    assert store.delete_key("d") is True
    assert store.delete_key("d") is False
    assert not store.check(["d"])


def test_num_keys(store):
    assert store.num_keys() == 0
    store.set("x", b"1")
    store.add("y", 1)
    store.compare_set("z", b"", b"1")
    assert store.num_keys() == 3
    store.delete_key("y")
    assert store.num_keys() == 2


def test_timeout_property(store):
    assert store.timeout == datetime.timedelta(seconds=5)
    store.timeout = datetime.timedelta(milliseconds=250)
    assert store.timeout_s == pytest.approx(0.25)
    store.set_timeout(1.5)
    assert store.timeout == datetime.timedelta(seconds=1.5)
    with pytest.raises(ValueError, match="timeout must be > 0"):
        store.set_timeout(0)
    with pytest.raises(TypeError, match="timeout must be seconds"):
        store.set_timeout("10")


def test_infinite_timeout(store):
    store.set_timeout(float("inf"))
    assert store.timeout_s == float("inf") and store.timeout == datetime.timedelta.max
    timer = threading.Timer(0.05, store.set, args=("forever", b"1"))
    timer.start()
    assert store.get("forever") == b"1"
    timer.join()


def test_bad_arguments(store):
    with pytest.raises(TypeError, match="keys must be str, not int"):
        store.set(1, b"x")
    with pytest.raises(TypeError, match="value must be bytes or str, not int"):
        store.set("k", 5)
    with pytest.raises(TypeError, match="wrap it in a list"):
        store.wait("k")
    with pytest.raises(TypeError, match="amount must be an int, not float"):
        store.add("k", 1.5)
    with pytest.raises(ValueError, match="signed 64-bit"):
        store.add("k", 2**63)
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        store.wait(["k"], -1)


def test_threads_share_one_store(store):
    """Eight threads hammer add() and rendezvous with wait()."""
    errors = []

    def worker(i):
        try:
            for _ in range(25):
                store.add("counter", 1)
            store.set(f"done/{i}", b"1")
            store.wait([f"done/{j}" for j in range(8)], 10.0)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.get("counter") == b"200"


CHILD = r"""
import json, sys
spec, rank, world = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
from pscore.store import FileStore, PrefixStore, RedisStore, TCPStore
kind = spec["kind"]
if kind == "tcp":
    s = TCPStore("127.0.0.1", spec["port"], timeout=20)
elif kind == "prefix_tcp":
    s = PrefixStore("job7", TCPStore("127.0.0.1", spec["port"], timeout=20))
elif kind == "file":
    s = FileStore(spec["path"], timeout=20)
else:
    s = RedisStore("127.0.0.1", spec["port"], prefix=spec["prefix"], timeout=20)
s.add("arrivals", 1)
s.set(f"rank/{rank}", f"hello from {rank}")
leader = s.compare_set("leader", "", str(rank)).decode()
s.wait([f"rank/{r}" for r in range(world)])
values = [s.get(f"rank/{r}").decode() for r in range(world)]
assert values == [f"hello from {r}" for r in range(world)], values
s.add("finished", 1)
print(json.dumps({"rank": rank, "leader": leader}))
"""


def test_processes_rendezvous(kind, request, tmp_path):
    """Three real processes meet through the store (threads for the in-process HashStore)."""
    store, spec = make_store(kind, request, tmp_path, timeout=20.0)
    world = 3
    if spec is None:
        results = {}

        def rank_thread(r):
            store.add("arrivals", 1)
            store.set(f"rank/{r}", f"hello from {r}")
            results[r] = store.compare_set("leader", "", str(r)).decode()
            store.wait([f"rank/{i}" for i in range(world)])
            store.add("finished", 1)

        threads = [threading.Thread(target=rank_thread, args=(r,)) for r in range(world)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        leaders = set(results.values())
    else:
        env = dict(
            os.environ, PYTHONPATH=PYTHON_PATH + os.pathsep + os.environ.get("PYTHONPATH", "")
        )
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", CHILD, json.dumps(spec), str(r), str(world)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for r in range(world)
        ]
        outputs = [p.communicate(timeout=60) for p in procs]
        for p, (_out, err) in zip(procs, outputs):
            assert p.returncode == 0, err
        leaders = {json.loads(out)["leader"] for out, _ in outputs}
    assert len(leaders) == 1 and leaders.pop() in {"0", "1", "2"}
    assert store.get("arrivals") == b"3"
    store.wait(["finished"])
    assert store.get("finished") == b"3"
