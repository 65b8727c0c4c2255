"""Dead peers, silent peers, mismatched calls and garbage on the transport port: clear errors in
time, naming the peer and the operation; never a hang or silent corruption."""

import os
import re
import signal
import socket
import struct
import threading
import time

import numpy as np
import pytest
from dist_helpers import run_ranks

import pscore
from pscore import _C, _types
from pscore.buffer import view

TIMEOUT = 6.0


def killed_mid_allreduce(rank, world):
    x = np.ones(4_000_000, dtype=np.float32)
    pscore.all_reduce(x)  # everyone is connected and warm
    if rank == world - 1:
        # Die while blocked inside the allreduce the others have not joined yet.
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
        pscore.all_reduce(x)
        return "unreachable"
    time.sleep(0.8)
    start = time.monotonic()
    try:
        pscore.all_reduce(x)
    except (ConnectionError, TimeoutError) as e:
        return type(e).__name__, str(e), time.monotonic() - start
    return "no error"


@pytest.mark.parametrize("transport", ["shm", "tcp", "tcp-epoll"])
def test_rank_killed_mid_allreduce(transport):
    world = 3
    env = {"PSCORE_EPOLL_MIN_FDS": "1"} if transport == "tcp-epoll" else None
    results = run_ranks(
        killed_mid_allreduce,
        world,
        transport=transport.split("-")[0],
        timeout=TIMEOUT,
        env=env,
        expect_dead=[world - 1],
    )
    for rank in range(world - 1):
        kind, msg, elapsed = results[rank]
        assert kind in ("NetworkError", "TimeoutError"), (rank, kind, msg)
        assert elapsed < TIMEOUT + 1.0, (rank, msg)
        assert "allreduce #1" in msg, msg
        assert "rank 2" in msg, msg  # names the dead peer or the one that reported it


def stream_until_failure(rank, _world, victim):
    x = np.ones(1000, dtype=np.float32)
    pscore.all_reduce(x)  # everyone is connected
    if rank == victim:
        threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    try:
        while True:
            pscore.all_reduce(x)
    except (ConnectionError, TimeoutError) as e:
        return str(e)


def first_rank_blamed(message: str, me: int) -> int:
    return next(int(r) for r in re.findall(r"rank (\d+)", message) if int(r) != me)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("world", [3, 4, 5])
def test_every_rank_names_the_killed_one_first(transport, world):
    # Over TCP a rank that fails shuts its connections, so most ranks see a live peer hang up;
    # following the accounts the ranks post leads to the one that posted none.
    for victim in range(world):
        msgs = run_ranks(
            stream_until_failure,
            world,
            victim,
            transport=transport,
            timeout=TIMEOUT,
            expect_dead=[victim],
        )
        for rank, msg in msgs.items():
            assert first_rank_blamed(msg, rank) == victim, (victim, rank, msg)
            assert "died or hangs" in msg, (victim, rank, msg)


def silent_peer(rank, _world):
    if rank == 1:
        time.sleep(TIMEOUT + 1.5)
        return None
    x = np.ones(10, dtype=np.float32)
    start = time.monotonic()
    with pytest.raises(pscore.TimeoutError) as info:
        pscore.all_reduce(x)
    return str(info.value), time.monotonic() - start


def test_silent_peer_times_out():
    msg, elapsed = run_ranks(silent_peer, 2, timeout=TIMEOUT)[0]
    assert TIMEOUT - 0.5 < elapsed < TIMEOUT + 2.0
    assert msg.startswith(
        "rank 0 <- rank 1: allreduce #0 timed out after 6000 ms waiting for 40 bytes"
    ), msg


def mismatched(rank, _world, kind):
    n = 10 if rank == 0 else 12
    dtype = np.float32
    if kind == "dtype":
        n, dtype = 10, (np.float32 if rank == 0 else np.int32)
    with pytest.raises(ConnectionError) as info:
        pscore.all_reduce(np.ones(n, dtype=dtype))
    # The group is broken afterwards and says so at once.
    with pytest.raises(ConnectionError, match="broken"):
        pscore.all_reduce(np.ones(n, dtype=dtype))
    return str(info.value)


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_mismatched_sizes_reported(transport):
    msgs = run_ranks(mismatched, 2, "size", transport=transport, timeout=TIMEOUT)
    assert "size mismatch: the peer sent 48 bytes, this rank expects 40" in msgs[0]
    assert "size mismatch: the peer sent 40 bytes, this rank expects 48" in msgs[1]


def test_mismatched_dtypes_reported():
    msgs = run_ranks(mismatched, 2, "dtype", timeout=TIMEOUT)
    assert "dtype mismatch: the peer sent int32, this rank has float32" in msgs[0]


def mismatched_ops(rank, _world):
    x = np.ones(8, dtype=np.float32)
    if rank == 1:
        pscore.broadcast(x, src=1)  # the root only sends: it cannot notice
        with pytest.raises(ConnectionError, match=r"disagree|left the group|closed by rank 0"):
            pscore.barrier()  # but the next call learns rank 0 gave up
        return None
    with pytest.raises(ConnectionError) as info:
        pscore.all_reduce(x)
    return str(info.value)


def test_mismatched_operations_reported():
    msgs = run_ranks(mismatched_ops, 2, timeout=TIMEOUT)
    assert "ranks disagree on the operation: the peer sent broadcast #0" in msgs[0]


def _garbage(port, payload):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(payload)
        time.sleep(0.05)


def test_garbage_on_transport_port_is_dropped():
    t0 = _C.TcpTransport(0, 2, job_id="job")
    t1 = _C.TcpTransport(1, 2, job_id="job")
    header = struct.Struct("<IBBHIQQ")
    _garbage(t0.port, b"GET / HTTP/1.1\r\n\r\n")
    _garbage(t0.port, header.pack(0x50534352, 1, 1, 0, 0, 0, 1 << 40))  # oversized length
    _garbage(
        t0.port,
        header.pack(0x50534352, 1, 1, 0, 0, 0, 12 + 5) + struct.pack("<iii", 1, 2, 0) + b"other",
    )
    _garbage(t0.port, b"\x00" * 3)  # truncated
    errors = []

    def connect(t):
        try:
            t.connect(["127.0.0.1"] * 2, [t0.port, t1.port], 10_000)
        except Exception as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=connect, args=(t,)) for t in (t0, t1)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    g0 = _C.ProcessGroup(t0, timeout_ms=5000)
    g1 = _C.ProcessGroup(t1, timeout_ms=5000)
    a, b = np.ones(5, np.float32), np.full(5, 2, np.float32)
    th = threading.Thread(target=lambda: g1.allreduce(view(b), _types.ReduceOp.SUM, False))
    th.start()
    g0.allreduce(view(a), _types.ReduceOp.SUM, False)
    th.join()
    assert (a == 3).all() and (b == 3).all()


def test_busy_port_is_a_clear_error():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    with pytest.raises(ConnectionError, match=f"cannot listen on 127.0.0.1:{port}"):
        _C.TcpTransport(0, 2, port=port)
    holder.close()


def test_connect_times_out_naming_the_missing_rank():
    t1 = _C.TcpTransport(1, 2)
    unused = socket.socket()
    unused.bind(("127.0.0.1", 0))
    port = unused.getsockname()[1]
    unused.close()
    with pytest.raises(pscore.TimeoutError, match=re.escape("connect to rank 0 at 127.0.0.1")):
        t1.connect(["127.0.0.1", "127.0.0.1"], [port, t1.port], 300)


def test_bad_arguments_are_value_errors():
    t = _C.TcpTransport(0, 1)
    t.connect(["127.0.0.1"], [t.port], 1000)
    g = _C.ProcessGroup(t)
    with pytest.raises(ValueError, match="broadcast root rank 3 is out of range for a group of 1"):
        g.broadcast(view(np.zeros(0, np.float32)), 3, False)
    bad_dtype = view(np.zeros(1, np.float32))._replace(dtype_code=99)
    with pytest.raises(ValueError, match="unknown dtype code 99"):
        g.allreduce(bad_dtype, _types.ReduceOp.SUM, False)
