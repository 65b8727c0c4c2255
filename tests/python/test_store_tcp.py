"""TCPStore specifics: ports, connecting before the master is up, many clients, and a server
that survives garbage on its port."""

from __future__ import annotations

import gc
import re
import socket
import struct
import threading
import time

import pytest

import pscore.errors
from pscore.store import TCPStore

HEADER = struct.Struct("<IBBHIQQ")  # magic, version, type, flags, tag, seq, length
MAGIC, VERSION = 0x50534352, 1
OP_SET, OP_GET = 1, 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def master():
    return TCPStore("127.0.0.1", 0, is_master=True, timeout=5.0)


def test_port_zero_picks_a_free_port(master):
    assert 0 < master.port < 65536 and master.is_master
    client = TCPStore("127.0.0.1", master.port, timeout=5.0)
    assert not client.is_master and client.port == master.port
    client.set("k", b"v")
    assert master.get("k") == b"v"


def test_busy_port_is_a_clear_error(master):
    with pytest.raises(pscore.errors.NetworkError) as info:
        TCPStore("127.0.0.1", master.port, is_master=True)
    message = str(info.value)
    assert f"127.0.0.1:{master.port}" in message and "Address already in use" in message
    assert "pick a free one" in message
    assert isinstance(info.value, ConnectionError)


def test_hostnames_resolve():
    m = TCPStore("localhost", 0, is_master=True, timeout=5.0)
    c = TCPStore("localhost", m.port, timeout=5.0)
    c.set("via", "name")
    assert m.get("via") == b"name"


def test_unresolvable_host_is_a_network_error():
    with pytest.raises(
        pscore.errors.NetworkError, match=re.escape("cannot resolve host 'no-such-host.invalid'")
    ):
        TCPStore("no-such-host.invalid", 29500, timeout=1.0)


def test_bad_constructor_arguments():
    with pytest.raises(ValueError, match="client needs the master's port"):
        TCPStore("127.0.0.1", 0)
    with pytest.raises(ValueError, match=re.escape("0..65535")):
        TCPStore("127.0.0.1", 70000, is_master=True)
    with pytest.raises(ValueError, match="host must be a non-empty str"):
        TCPStore("", 1234)
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        TCPStore("127.0.0.1", 0, world_size=0, is_master=True)


def test_client_started_before_the_master_retries_until_it_is_up():
    port = free_port()
    result = {}

    def client():
        try:
            store = TCPStore("127.0.0.1", port, timeout=10.0)
            result["value"] = store.get("hello")
        except Exception as e:  # noqa: BLE001 - asserted below
            result["error"] = e

    t = threading.Thread(target=client)
    t.start()
    time.sleep(0.3)  # the client is now retrying refused connections
    m = TCPStore("127.0.0.1", port, is_master=True, timeout=10.0)
    m.set("hello", b"world")
    t.join(15)
    assert result == {"value": b"world"}


def test_client_without_a_master_times_out():
    port = free_port()
    with pytest.raises(pscore.errors.TimeoutError, match=rf"127.0.0.1:{port}.*cannot reach"):
        TCPStore("127.0.0.1", port, timeout=0.3)


def test_wait_for_workers():
    port = free_port()
    out = {}

    def run_master():
        out["master"] = TCPStore(
            "127.0.0.1", port, world_size=3, is_master=True, timeout=10.0, wait_for_workers=True
        )

    t = threading.Thread(target=run_master)
    t.start()
    workers = [TCPStore("127.0.0.1", port, world_size=3, timeout=10.0) for _ in range(2)]
    t.join(15)
    assert out["master"].world_size == 3
    assert out["master"].num_keys() == 0  # the join bookkeeping is not a user key
    workers[0].set("x", b"1")
    assert out["master"].get("x") == b"1"


def test_wait_for_workers_times_out_saying_how_many_joined():
    with pytest.raises(TimeoutError, match="only 1 of 3 workers joined within 300 ms"):
        TCPStore("127.0.0.1", 0, world_size=3, is_master=True, timeout=0.3, wait_for_workers=True)


def test_many_clients_parked_on_one_key_wake_together(master):
    clients = [TCPStore("127.0.0.1", master.port, timeout=10.0) for _ in range(24)]
    got = []

    def waiter(c):
        got.append(c.get("go"))

    threads = [threading.Thread(target=waiter, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    time.sleep(0.1)
    master.set("go", b"now")
    for t in threads:
        t.join(15)
    assert got == [b"now"] * 24


def _closed_by_server(raw: socket.socket) -> bool:
    raw.settimeout(5.0)
    try:
        while raw.recv(4096):
            pass
        return True
    except ConnectionResetError:
        return True  # closed with our unread bytes pending: the kernel answers with a reset
    except socket.timeout:
        return False


def _check_still_serves(master):
    """A parked get of one client is answered after another client's set."""
    waiter = TCPStore("127.0.0.1", master.port, timeout=5.0)
    out = []
    t = threading.Thread(target=lambda: out.append(waiter.get("after")))
    t.start()
    TCPStore("127.0.0.1", master.port, timeout=5.0).set("after", b"ok")
    t.join(10)
    assert out == [b"ok"]


@pytest.mark.parametrize(
    "junk",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(range(256)),
        HEADER.pack(MAGIC, VERSION, OP_SET, 0, 0, 1, 1 << 40),  # oversized length
        HEADER.pack(MAGIC, 9, OP_SET, 0, 0, 1, 0),  # wrong version
        HEADER.pack(MAGIC, VERSION, 99, 0, 0, 1, 0),  # unknown op
        HEADER.pack(MAGIC, VERSION, OP_SET, 0, 0, 1, 8) + struct.pack("<II", 1000, 0),  # bad key
        # a parked get followed by a pipelined request
        HEADER.pack(MAGIC, VERSION, OP_GET, 0, 0, 1, 13)
        + struct.pack("<I", 1) + b"z" + struct.pack("<q", 5000)
        + HEADER.pack(MAGIC, VERSION, OP_SET, 0, 0, 2, 0),
    ],
    ids=["garbage", "oversized", "version", "unknown_op", "bad_payload", "pipelined"],
)  # fmt: skip
def test_protocol_violations_drop_only_that_connection(master, junk):
    good = TCPStore("127.0.0.1", master.port, timeout=5.0)
    good.set("before", b"1")
    with socket.create_connection(("127.0.0.1", master.port)) as raw:
        raw.sendall(junk)
        assert _closed_by_server(raw)
    assert master.dropped_connections == 1
    assert good.get("before") == b"1"  # the pooled connection of another client still works
    _check_still_serves(master)


@pytest.mark.parametrize("cut", [10, 28 + 5])
def test_truncated_frames_then_hangup(master, cut):
    frame = HEADER.pack(MAGIC, VERSION, OP_SET, 0, 0, 1, 10) + struct.pack("<I", 1) + b"k"
    frame += struct.pack("<I", 1) + b"v"
    with socket.create_connection(("127.0.0.1", master.port)) as raw:
        raw.sendall(frame[:cut])
    _check_still_serves(master)
    assert not master.check(["k"])


def test_a_valid_raw_frame_is_answered(master):
    """The wire format documented in store_protocol.h, spoken by hand."""
    payload = struct.pack("<I", 3) + b"raw" + struct.pack("<I", 2) + b"ok"
    with socket.create_connection(("127.0.0.1", master.port)) as raw:
        raw.sendall(HEADER.pack(MAGIC, VERSION, OP_SET, 0, 0, 42, len(payload)) + payload)
        reply = raw.recv(HEADER.size)
    magic, version, status, _, _, seq, length = HEADER.unpack(reply)
    assert (magic, version, status, seq, length) == (MAGIC, VERSION, 0, 42, 0)
    assert master.get("raw") == b"ok"


def test_master_gone_is_a_connection_error():
    m = TCPStore("127.0.0.1", 0, is_master=True, timeout=5.0)
    c = TCPStore("127.0.0.1", m.port, timeout=0.5)
    c.set("a", b"1")
    del m
    gc.collect()
    with pytest.raises(pscore.errors.NetworkError, match="connection lost"):
        c.get("a")
    with pytest.raises(pscore.errors.TimeoutError, match="cannot reach"):
        c.get("a")  # reconnecting fails until the timeout
