"""Failures: hostile or broken connections are dropped while others are served, a shard that
does not answer fails the request naming it, retried pushes apply once, and a shard killed
mid-training and restarted with --recover loses no acknowledged update."""

from __future__ import annotations

import hmac
import os
import re
import socket
import struct
import threading
import time

import numpy as np
import pytest
from test_ps_support import addresses, pserver_process, start_cluster, stop_cluster

import pscore
from pscore.ps import SGD, PSClient
from pscore.store import TCPStore

HEADER = struct.Struct("<IBBHIQQ")  # magic, version, type, flags, tag, seq, length
MAGIC = 0x50534352
HELLO, CHALLENGE, AUTH, WELCOME, PUSH, REPLY = 1, 2, 3, 4, 20, 100


def frame(kind: int, body: bytes = b"", tag: int = 0, seq: int = 0, length=None) -> bytes:
    return HEADER.pack(MAGIC, 1, kind, 0, tag, seq, len(body) if length is None else length) + body


def recv_exact(sock, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def recv_frame(sock):
    h = HEADER.unpack(recv_exact(sock, HEADER.size))
    return h, recv_exact(sock, h[6])


def handshake(sock, worker: int = 0, token: str = "") -> None:
    """The client side of the handshake (docs/wire.md), with Python's hmac: proves `token`
    (without first checking the server's proof, as a hostile client would), then checks the
    server's proof."""
    nonce = os.urandom(32) if token else b""
    job = b"pscore"  # the default job id (PSCORE_JOB_ID unset)
    hello = struct.pack("<IiB", 2, worker, 1 if token else 0) + nonce
    hello += struct.pack("<I", len(job)) + job
    sock.sendall(frame(HELLO, hello))
    h, body = recv_frame(sock)
    if token:
        assert h[2] == CHALLENGE and len(body) == 64
        server_nonce, server_proof = body[:32], body[32:]
        binding = (job, f"pscore ps worker {worker}".encode())  # job id, context
        sock.sendall(frame(AUTH, proof(token, "client", server_nonce, nonce, binding)))
        h, body = recv_frame(sock)
        assert h[2] == WELCOME
        assert server_proof == proof(token, "server", server_nonce, nonce, binding)
    assert h[2] == WELCOME


def proof(token: str, side: str, server_nonce: bytes, client_nonce: bytes, binding) -> bytes:
    """HMAC(token, label | server nonce | client nonce | job id | context), fields
    length-prefixed (common/auth.h)."""
    fields = (f"pscore-auth-v1 {side}".encode(), server_nonce, client_nonce, *binding)
    msg = b"".join(struct.pack("<I", len(f)) + f for f in fields)
    return hmac.new(token.encode(), msg, "sha256").digest()


def closed_by_server(sock) -> bool:
    sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_duplicate_push_is_applied_once():
    servers = start_cluster(1)
    try:
        c = PSClient(addresses(servers))
        info = c.create_dense("dup", (8,), optimizer=SGD(lr=1.0))
        with socket.create_connection(("127.0.0.1", servers[0].port)) as s:
            handshake(s)
            body = struct.pack("<iIqqfI", 0, 0, 2**62, 0, 1.0, 0) + np.ones(8, np.float32).tobytes()
            for expect_status in (0, 1):  # applied, then recognised as a duplicate
                s.sendall(frame(PUSH, body, tag=info.id, seq=7))
                h, reply = recv_frame(s)
                assert h[2] == REPLY and h[5] == 7 and reply[0] == expect_status
        np.testing.assert_array_equal(c.pull("dup"), np.full(8, -1.0, np.float32))
    finally:
        stop_cluster(servers)


def test_bad_frames_drop_only_that_connection(capfd):
    servers = start_cluster(
        1, auth_token="s3cret", log_connections=True, log_quiet=0, max_frame_bytes=1 << 20
    )
    port = servers[0].port
    try:

        def connect():
            return socket.create_connection(("127.0.0.1", port))

        with connect() as s:  # garbage
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
            assert closed_by_server(s)
        with connect() as s:  # oversized length during the handshake
            s.sendall(frame(HELLO, length=5000))
            assert closed_by_server(s)
        with connect() as s:  # a request before the handshake
            s.sendall(frame(PUSH, b"\0" * 40))
            assert closed_by_server(s)
        with connect() as s:  # wrong token
            with pytest.raises(AssertionError):  # an error frame instead of a welcome
                handshake(s, token="guess")
            assert closed_by_server(s)
        with connect() as s:  # oversized length after authenticating
            handshake(s, token="s3cret")
            s.sendall(frame(PUSH, length=1 << 40))
            assert closed_by_server(s)
        with connect() as s:  # truncated frame: the peer goes away mid-frame
            handshake(s, token="s3cret")
            s.sendall(frame(PUSH, length=100) + b"\0" * 10)
        with pytest.raises(
            pscore.Error, match=r"could not prove it knows this process's token.*PSCORE_AUTH"
        ):
            PSClient(addresses(servers), auth_token="wrong", connect_timeout=1.0)
        good = PSClient(addresses(servers), auth_token="s3cret")
        good.create_dense("still_serving", (3,))
        assert good.pull("still_serving").tolist() == [0, 0, 0]
        stats = servers[0].stats()
        assert stats["dropped_connections"] >= 7 and stats["auth_failures"] == 2
        err = capfd.readouterr().err
        for reason in (
            "bad frame magic",
            "exceeds the cap of 4096",
            "expected a hello",
            "wrong token: the client's proof does not match this parameter server's token",
            "closed the connection after the server's proof",
            "exceeds the cap of 1048576",
            "truncated frame",
        ):
            assert re.search(
                r"shard 0 on port \d+: dropped connection from 127\.0\.0\.1:\d+: .*" + reason, err
            ), reason
    finally:
        stop_cluster(servers)


def test_unanswered_request_times_out_naming_the_shard():
    servers = start_cluster(2, num_workers=2)
    try:
        c = PSClient(addresses(servers), timeout=0.3)
        info = c.create_dense("stuck", (4,), consistency="sync")  # worker 1 never pushes
        shard = info.parts[0][0]
        with pytest.raises(
            pscore.TimeoutError,
            match=rf"push 'stuck' on shard {shard} \(127\.0\.0\.1:\d+\) "
            r"timed out after 300 ms",
        ):
            c.push("stuck", np.ones(4, np.float32))
        assert c.pull("stuck").tolist() == [0, 0, 0, 0]  # reconnected; nothing was applied
    finally:
        stop_cluster(servers)


def test_unreachable_shard_fails_after_the_retry_timeout():
    servers = start_cluster(2)
    c = PSClient(addresses(servers), retry_timeout=0.5)
    c.create_dense("gone", (100_000,))  # spans both shards
    servers[1].stop(0)
    with pytest.raises(pscore.NetworkError, match="shard 1"):
        c.push("gone", np.ones(100_000, np.float32))
    servers[0].stop(0)


def test_killed_shard_recovers_without_losing_acknowledged_updates(tmp_path):
    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=30)
    url = f"tcp://127.0.0.1:{store.port}"

    def serve(shard):
        return pserver_process(
            "--shard",
            str(shard),
            "--num-shards",
            "2",
            "--store",
            url,
            "--recover",
            str(tmp_path / f"s{shard}"),
            "--job-id",
            "recov",
        )

    procs = [serve(0), serve(1)]
    try:
        c = PSClient(store=store, job_id="recov", retry_timeout=30)
        c.create_dense("w", (200_000,), optimizer=SGD(lr=1.0))  # both shards hold a part
        c.create_sparse("e", 4, optimizer=SGD(lr=1.0))
        ids = np.arange(64) * 1_000_003
        acked = [0]
        stop = threading.Event()
        failure = []

        def train():
            try:
                while not stop.is_set():
                    c.push("w", np.ones(200_000, np.float32))
                    c.push_sparse("e", ids, np.ones((64, 4), np.float32))
                    acked[0] += 1
            except Exception as e:  # noqa: BLE001 - reported below
                failure.append(e)

        t = threading.Thread(target=train)
        t.start()
        while acked[0] < 20:
            time.sleep(0.005)
        procs[1].kill()  # mid-training, likely mid-request
        procs[1].wait()
        at_kill = acked[0]
        procs[1] = serve(1)  # a new port, published in the store again
        assert re.search(r"recovered \((\d+) log records\)", procs[1].banner)
        while acked[0] < at_kill + 20:
            assert not failure, failure
            time.sleep(0.005)
        stop.set()
        t.join(60)
        assert not failure, failure
        n = acked[0]
        np.testing.assert_array_equal(c.pull("w"), np.full(200_000, -float(n), np.float32))
        np.testing.assert_array_equal(c.pull_sparse("e", ids), np.full((64, 4), -float(n)))
    finally:
        for p in procs:
            p.kill()
            p.wait()


def test_shards_killed_while_snapshotting_lose_no_acknowledged_push(tmp_path):
    """Two workers push while both shards snapshot every 20 ms; one shard is SIGKILLed three
    times, at whatever point of a snapshot or log trim it is, and restarted with --recover:
    every acknowledged push is in the final tables, and none twice."""
    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=30)
    url = f"tcp://127.0.0.1:{store.port}"

    def serve(shard):
        return pserver_process(
            *("--shard", str(shard), "--num-shards", "2", "--num-workers", "2"),
            *("--store", url, "--job-id", "snapkill"),
            *("--recover", str(tmp_path / f"s{shard}"), "--checkpoint-every", "0.02"),
        )

    procs = [serve(0), serve(1)]
    clients = [
        PSClient(store=store, job_id="snapkill", worker_id=w, retry_timeout=30) for w in (0, 1)
    ]
    try:
        clients[0].create_dense("w", (1_000_000,), optimizer=SGD(lr=1.0))
        clients[0].create_sparse("e", 8, optimizer=SGD(lr=1.0))
        ids = np.arange(32) * 7_919
        acked = [0, 0]
        stop = threading.Event()
        failure = []

        def train(w):
            try:
                while not stop.is_set():
                    clients[w].push("w", np.ones(1_000_000, np.float32))
                    clients[w].push_sparse("e", ids, np.ones((32, 8), np.float32))
                    acked[w] += 1
            except Exception as e:  # noqa: BLE001 - reported below
                failure.append(e)

        threads = [threading.Thread(target=train, args=(w,)) for w in (0, 1)]
        for t in threads:
            t.start()
        for _ in range(3):
            target = sum(acked) + 15
            while sum(acked) < target:
                assert not failure, failure
                time.sleep(0.005)
            procs[1].kill()
            procs[1].wait()
            procs[1] = serve(1)
        target = sum(acked) + 15
        while sum(acked) < target:
            assert not failure, failure
            time.sleep(0.005)
        stop.set()
        for t in threads:
            t.join(60)
        assert not failure, failure
        n = float(sum(acked))
        np.testing.assert_array_equal(clients[0].pull("w"), np.full(1_000_000, -n, np.float32))
        np.testing.assert_array_equal(clients[1].pull_sparse("e", ids), np.full((32, 8), -n))
    finally:
        for p in procs:
            p.kill()
            p.wait()
