"""Shared fixtures: a real redis-server for the RedisStore tests, and reaping of the processes a
test leaves behind (a hung rank must fail its test, not keep CI waiting on its output pipe)."""

from __future__ import annotations

import contextlib
import dataclasses
import multiprocessing
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

# Many tests fork their ranks (dist_helpers uses the fork context). A child forked after the
# pytest process ran a multi-threaded torch op hangs in its first parallel region (libgomp's
# pool is not fork-safe), so the test process keeps torch single-threaded, as pscore-run and
# torchrun do for their ranks. Set before any test module imports torch.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass(frozen=True)
class RedisServer:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"redis://{self.host}:{self.port}"


def _redis_ready(port: int, proc: subprocess.Popen, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                s.sendall(b"PING\r\n")
                if s.recv(64).startswith(b"+PONG"):
                    return True
        except OSError:
            pass
        time.sleep(0.02)
    return False


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory) -> RedisServer:
    """A real redis-server on a free loopback port, no persistence; skips if not installed."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install redis-server)")
    workdir = tmp_path_factory.mktemp("redis")
    for _attempt in range(3):  # the free port may be taken between probe and bind
        port = free_port()
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(workdir), "--daemonize", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if _redis_ready(port, proc, 10.0):
            break
        proc.kill()
        proc.wait()
    else:
        pytest.fail("redis-server did not start on a free port in 3 attempts")
    try:
        yield RedisServer("127.0.0.1", port)
    finally:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(autouse=True)
def reap_forked_ranks():
    """Kills the multiprocessing children a test leaves running, so that one hung rank cannot
    outlive its test."""
    yield
    for child in multiprocessing.active_children():
        child.kill()
        child.join(5)


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def pytest_sessionfinish():
    """Last resort: no process started by the tests survives the session."""
    for pid in _descendants(os.getpid()):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
