"""The parameter server authenticates like the store and the transport (docs/security.md,
docs/wire.md): the same token sources and insecure switch, the same refusals, and dropped peers
logged at most once per address per quiet period."""

from __future__ import annotations

import contextlib
import re
import socket

import pytest
from test_ps_support import address_from_banner, pserver_process

import pscore
from pscore.ps import PSClient
from pscore.ps.server import PServer

TOKEN = "ps-file-secret"


def stop(proc) -> str:
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    return err


def test_pserver_reads_the_token_file(tmp_path, monkeypatch):
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    env = {"PSCORE_AUTH_TOKEN": "", "PSCORE_AUTH_TOKEN_FILE": str(token_file)}
    # A bind other hosts can reach is allowed: the file's token protects it.
    proc = pserver_process("--host", "0.0.0.0", env=env)
    try:
        port = address_from_banner(proc.banner).rsplit(":", 1)[1]
        monkeypatch.delenv("PSCORE_AUTH_TOKEN", raising=False)
        monkeypatch.setenv("PSCORE_AUTH_TOKEN_FILE", str(token_file))
        c = PSClient([f"127.0.0.1:{port}"])  # the client reads the same file
        c.create_dense("w", (2,))
        assert c.pull("w").tolist() == [0, 0]
        assert c.stats()[0]["auth_failures"] == 0
        c.close()
        with pytest.raises(pscore.Error, match="requires authentication: set PSCORE_AUTH_TOKEN"):
            PSClient([f"127.0.0.1:{port}"], auth_token="", connect_timeout=5.0)
    finally:
        stop(proc)


def test_in_process_server_reads_the_token_file_and_the_insecure_switch(tmp_path, monkeypatch):
    monkeypatch.delenv("PSCORE_AUTH_TOKEN", raising=False)
    monkeypatch.setenv("PSCORE_INSECURE", "0")
    with pytest.raises(ValueError, match=r"'0\.0\.0\.0' \(reachable from other hosts\)"):
        PServer(host="0.0.0.0", log_connections=False)
    monkeypatch.setenv("PSCORE_INSECURE", "1")
    with PServer(host="0.0.0.0", log_connections=False) as server:
        assert PSClient([f"127.0.0.1:{server.port}"], auth_token="").stats()[0]["shard"] == 0
    monkeypatch.setenv("PSCORE_INSECURE", "maybe")
    with pytest.raises(ValueError, match="PSCORE_INSECURE=maybe"):
        PServer(log_connections=False)
    monkeypatch.delenv("PSCORE_INSECURE")
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    monkeypatch.setenv("PSCORE_AUTH_TOKEN_FILE", str(token_file))
    with PServer(log_connections=False) as server:
        with pytest.raises(pscore.Error, match="this parameter server requires authentication"):
            PSClient([f"127.0.0.1:{server.port}"], auth_token="", connect_timeout=5.0)
        PSClient([f"127.0.0.1:{server.port}"], auth_token=TOKEN).stats()
        assert server.stats()["auth_failures"] == 1


def test_pserver_honours_pscore_insecure():
    proc = pserver_process(
        "--host", "0.0.0.0", env={"PSCORE_AUTH_TOKEN": "", "PSCORE_INSECURE": "1"}
    )
    try:
        port = address_from_banner(proc.banner).rsplit(":", 1)[1]
        PSClient([f"127.0.0.1:{port}"], auth_token="").stats()
    finally:
        stop(proc)


def test_a_flood_of_garbage_connections_logs_a_bounded_number_of_lines(capfd):
    flood = 300
    with PServer(log_connections=True) as server:
        for _ in range(flood):
            with socket.create_connection(("127.0.0.1", server.port)) as s:
                s.sendall(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
                s.settimeout(10)
                with contextlib.suppress(ConnectionResetError):
                    assert s.recv(1) == b""  # the server closes it
        PSClient([f"127.0.0.1:{server.port}"]).stats()  # still serving
        assert server.stats()["dropped_connections"] >= flood
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "dropped connection" in ln]
    assert len(lines) == 1, lines[:5]
    assert re.search(
        r"parameter server shard 0 on port \d+: dropped connection from 127\.0\.0\.1:\d+: "
        r".*bad frame magic.*not logged for 60 s",
        lines[0],
    ), lines[0]
