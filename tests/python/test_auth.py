"""Authentication and the bind policy (docs/security.md), with real processes over loopback: a
TCPStore master in its own process with a token, clients with the right, a wrong or no token,
hand-made handshakes (the documented wire format, right and wrong HMAC), and a 2-rank
collective world whose TCP transport authenticates."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import socket
import struct
import subprocess
import sys

import pytest

import pscore.errors
from pscore import _C
from pscore.store import TCPStore

TOKEN = "correct horse battery staple"
ENV_KEYS = ("PSCORE_AUTH_TOKEN", "PSCORE_AUTH_TOKEN_FILE", "PSCORE_INSECURE", "PSCORE_JOB_ID")

HEADER = struct.Struct("<IBBHIQQ")  # magic, version, type, flags, tag, seq, length
MAGIC, VERSION = 0x50534352, 1
OP_SET, OP_GET, OP_HELLO, OP_AUTH = 1, 2, 9, 10
STATUS_OK, STATUS_AUTH_FAILED = 0, 4

MASTER = r"""
import sys, time
from pscore.store import TCPStore
m = TCPStore("127.0.0.1", 0, is_master=True, timeout=10)
print(m.port, flush=True)
want = int(sys.stdin.readline())          # the test says how many failures it caused
deadline = time.monotonic() + 5
while m.auth_failures < want and time.monotonic() < deadline:
    time.sleep(0.01)                      # a hang-up is judged on the server's own thread
print(m.auth_failures, flush=True)
"""

RANK = r"""
import json, sys
import numpy as np
import pscore
from pscore.store import TCPStore
rank, port, store_token = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
store = TCPStore("127.0.0.1", port, timeout=10, auth_token=store_token)
try:
    pscore.init_process_group(store=store, rank=rank, world_size=2, timeout=3)
    x = np.full(4, rank + 1.0)
    pscore.all_reduce(x)
    out = {"sum": float(x[0]), "backend": pscore.get_backend()}
except Exception as e:
    out = {"error": type(e).__name__, "msg": str(e)}
print(json.dumps(out), flush=True)
"""


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for k in ENV_KEYS:
        monkeypatch.delenv(k, raising=False)


def child_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ENV_KEYS}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    env.update(extra)
    return env


class MasterProcess:
    """A TCPStore master in its own process; finish() returns (auth_failures, stderr)."""

    def __init__(self, **env):
        self.proc = subprocess.Popen(
            [sys.executable, "-c", MASTER],
            env=child_env(**env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        line = self.proc.stdout.readline()
        assert line.strip().isdigit(), self.proc.stderr.read()
        self.port = int(line)

    def finish(self, expected_failures: int = 0) -> tuple[int, str]:
        out, err = self.proc.communicate(f"{expected_failures}\n", timeout=20)
        assert self.proc.returncode == 0, err
        return int(out.split()[-1]), err


@pytest.fixture
def master():
    m = MasterProcess(PSCORE_AUTH_TOKEN=TOKEN)
    yield m
    if m.proc.poll() is None:
        m.proc.kill()
        m.proc.wait()


def auth_error(port: int) -> str:
    return rf"authentication with store at 127\.0\.0\.1:{port} failed \(wrong PSCORE_AUTH_TOKEN\?\)"


# --- the store ------------------------------------------------------------------------------


def test_same_token_serves(master, monkeypatch, tmp_path):
    a = TCPStore("127.0.0.1", master.port, timeout=5, auth_token=TOKEN)
    monkeypatch.setenv("PSCORE_AUTH_TOKEN", TOKEN)
    b = TCPStore("127.0.0.1", master.port, timeout=5)  # the token from the environment
    monkeypatch.delenv("PSCORE_AUTH_TOKEN")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    monkeypatch.setenv("PSCORE_AUTH_TOKEN_FILE", str(token_file))
    c = TCPStore("127.0.0.1", master.port, timeout=5)  # ... or from a token file
    a.set("k", b"v")
    assert b.get("k") == b"v" and c.add("n", 2) == 2
    assert a.authenticated and b.authenticated and c.authenticated
    assert master.finish()[0] == 0


def test_wrong_token_is_a_clear_network_error(master):
    with pytest.raises(pscore.errors.NetworkError, match=auth_error(master.port)) as info:
        TCPStore("127.0.0.1", master.port, timeout=5, auth_token="not the token")
    assert isinstance(info.value, ConnectionError)
    assert "the store could not prove it knows this process's token" in str(info.value)
    failures, err = master.finish(expected_failures=1)
    assert failures == 1
    assert "dropped connection from 127.0.0.1:" in err and "differs" in err


def test_token_on_one_side_only_is_a_clear_error(master):
    with pytest.raises(pscore.errors.NetworkError, match=auth_error(master.port)) as info:
        TCPStore("127.0.0.1", master.port, timeout=5, auth_token="")
    assert "this store requires authentication: set PSCORE_AUTH_TOKEN" in str(info.value)
    plain = MasterProcess()  # no token on the master, one on the client
    with pytest.raises(pscore.errors.NetworkError, match=auth_error(plain.port)) as info:
        TCPStore("127.0.0.1", plain.port, timeout=5, auth_token=TOKEN)
    assert "this store has no auth token, but the client has one" in str(info.value)
    assert plain.finish(expected_failures=1)[0] == 1
    assert master.finish(expected_failures=1)[0] == 1


def field(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data


def frame(op: int, seq: int, payload: bytes) -> bytes:
    return HEADER.pack(MAGIC, VERSION, op, 0, 0, seq, len(payload)) + payload


def read_frame(sock: socket.socket) -> tuple[int, int, bytes]:
    head = b""
    while len(head) < HEADER.size:
        chunk = sock.recv(HEADER.size - len(head))
        if not chunk:
            raise ConnectionError("closed")
        head += chunk
    magic, _, status, _, _, seq, length = HEADER.unpack(head)
    assert magic == MAGIC
    body = b""
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            raise ConnectionError("closed mid-frame")
        body += chunk
    return status, seq, body


def proof(token: str, label: str, server_nonce: bytes, client_nonce: bytes, job: str) -> bytes:
    msg = b"".join(
        field(x)
        for x in (label.encode(), server_nonce, client_nonce, job.encode(), b"pscore tcpstore")
    )
    return hmac.new(token.encode(), msg, hashlib.sha256).digest()


def hand_made_handshake(port: int, token: str) -> tuple[socket.socket, int, bytes]:
    """Speaks docs/security.md's store handshake by hand; returns the socket and the reply to
    the proof."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    client_nonce = os.urandom(32)
    hello = struct.pack("<IB", 1, 1) + field(client_nonce) + field(b"pscore")
    sock.sendall(frame(OP_HELLO, 1, hello))
    status, seq, body = read_frame(sock)
    assert (status, seq, body[0]) == (STATUS_OK, 1, 1)
    server_nonce, server_proof = body[5:37], body[41:73]
    expected = proof(TOKEN, "pscore-auth-v1 server", server_nonce, client_nonce, "pscore")
    assert hmac.compare_digest(server_proof, expected)  # the store proves it has TOKEN
    mine = proof(token, "pscore-auth-v1 client", server_nonce, client_nonce, "pscore")
    sock.sendall(frame(OP_AUTH, 2, field(mine)))
    status, _, body = read_frame(sock)
    return sock, status, body


def test_garbage_and_wrong_hmac_clients_while_a_good_client_keeps_working(master):
    good = TCPStore("127.0.0.1", master.port, timeout=5, auth_token=TOKEN)
    good.set("before", b"1")
    sock, status, body = hand_made_handshake(master.port, "a guess")
    assert status == STATUS_AUTH_FAILED
    assert b"the client's proof does not match this store's token" in body
    with pytest.raises(ConnectionError):
        read_frame(sock)  # and the store hangs up
    sock.close()
    with socket.create_connection(("127.0.0.1", master.port), timeout=5) as raw:
        raw.sendall(frame(OP_SET, 1, field(b"k") + field(b"v")))  # no handshake at all
        status, seq, body = read_frame(raw)
        assert (status, seq) == (STATUS_AUTH_FAILED, 1)
        assert b"requires authentication" in body
    with socket.create_connection(("127.0.0.1", master.port), timeout=5) as raw:
        raw.sendall(b"GET / HTTP/1.1\r\n\r\n" + bytes(range(256)))  # not even a frame
        with pytest.raises((ConnectionError, OSError)):
            read_frame(raw)
    # The right HMAC, computed by Python's hmac module, is served.
    sock, status, _ = hand_made_handshake(master.port, TOKEN)
    assert status == STATUS_OK
    sock.sendall(frame(OP_GET, 3, field(b"before") + struct.pack("<q", 1000)))
    assert read_frame(sock) == (STATUS_OK, 3, b"1")
    sock.close()
    assert good.get("before") == b"1" and not good.check(["k"])
    failures, err = master.finish(expected_failures=2)
    assert failures == 2
    # Logged once per peer address, however many times it fails.
    assert err.count("dropped connection from 127.0.0.1:") == 1, err


# --- the bind policy ------------------------------------------------------------------------


def test_non_loopback_bind_needs_a_token_or_insecure(monkeypatch):
    refusal = r"refusing to listen on '0\.0\.0\.0' \(reachable from other hosts\) without an auth"
    with pytest.raises(ValueError, match=refusal):
        TCPStore("127.0.0.1", 0, is_master=True, bind_host="0.0.0.0")
    with pytest.raises(ValueError, match="refusing to listen on every interface"):
        TCPStore("192.0.2.1", 0, is_master=True)  # a non-loopback host binds every interface
    open_store = TCPStore("127.0.0.1", 0, is_master=True, bind_host="0.0.0.0", insecure=True)
    TCPStore("127.0.0.1", open_store.port, timeout=5).set("k", b"v")
    assert open_store.get("k") == b"v"
    assert TCPStore("192.0.2.1", 0, is_master=True, auth_token=TOKEN).authenticated
    monkeypatch.setenv("PSCORE_INSECURE", "1")
    assert TCPStore("192.0.2.1", 0, is_master=True).port > 0
    monkeypatch.setenv("PSCORE_INSECURE", "perhaps")
    with pytest.raises(ValueError, match="PSCORE_INSECURE=perhaps: expected 1/true/yes/on"):
        TCPStore("127.0.0.1", 0, is_master=True)
    monkeypatch.delenv("PSCORE_INSECURE")
    # The loopback default needs nothing.
    assert not TCPStore("127.0.0.1", 0, is_master=True).authenticated
    # The collective transport follows the same rule.
    with pytest.raises(ValueError, match=r"rank 0 \(tcp transport\): refusing to listen"):
        _C.TcpTransport(0, 2, host="0.0.0.0")
    assert _C.TcpTransport(0, 2, host="0.0.0.0", insecure=True).port > 0
    assert _C.TcpTransport(0, 2, host="0.0.0.0", auth_token=TOKEN).port > 0


def test_bad_token_settings_are_value_errors(monkeypatch, tmp_path):
    with pytest.raises(TypeError, match="auth_token must be a str or None"):
        TCPStore("127.0.0.1", 0, is_master=True, auth_token=b"bytes")
    monkeypatch.setenv("PSCORE_AUTH_TOKEN_FILE", str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="cannot read the token file"):
        TCPStore("127.0.0.1", 0, is_master=True)
    (tmp_path / "other").write_text("other")
    monkeypatch.setenv("PSCORE_AUTH_TOKEN_FILE", str(tmp_path / "other"))
    monkeypatch.setenv("PSCORE_AUTH_TOKEN", TOKEN)
    with pytest.raises(ValueError, match="hold different tokens; set only one"):
        TCPStore("127.0.0.1", 0, is_master=True)


# --- the collective transport ---------------------------------------------------------------


def run_world(rank_tokens: list[str]) -> list[tuple[dict, str]]:
    """Two rank processes rendezvous through an authenticated store (token TOKEN); rank r's
    PSCORE_AUTH_TOKEN is rank_tokens[r]. Returns each rank's JSON result and stderr."""
    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=20, auth_token=TOKEN)
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", RANK, str(r), str(store.port), TOKEN],
            env=child_env(PSCORE_AUTH_TOKEN=tok, PSCORE_TRANSPORT="tcp"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r, tok in enumerate(rank_tokens)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=60)
        results.append((json.loads(out.strip().splitlines()[-1]) if out.strip() else {}, err))
    return results


def test_world_of_two_with_a_token():
    results = run_world([TOKEN, TOKEN])
    for out, err in results:
        assert out == {"sum": 3.0, "backend": "pscore/tcp"}, err


def test_rank_with_the_wrong_token_fails_naming_the_rank():
    (out0, err0), (out1, err1) = run_world([TOKEN, "not the token"])
    assert out1.get("error") == "NetworkError", (out1, err1)
    assert (
        out1["msg"].startswith("authentication with rank 0 at 127.0.0.1:")
        and "failed (wrong PSCORE_AUTH_TOKEN?): rank 0 could not prove" in out1["msg"]
    )
    # Rank 0 keeps waiting for a real rank 1 until its timeout, then says what it saw.
    assert out0.get("error") == "TimeoutError", (out0, err0)
    assert "refused or failed authentication" in out0["msg"]
    assert "pscore: rank 0 (tcp transport" in err0 and "dropped connection" in err0
