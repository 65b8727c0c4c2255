"""Stall reports and the SIGUSR1 dump (pscore.stall, docs/observability.md), on real processes
over loopback. A late rank, worker or registration is held back until the test has seen the
others report it, so nothing depends on timing; sleeps only give a second report the chance
to appear (it must not)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

import pscore
from pscore.store import TCPStore

HANG_GUARD_S = 60.0
PYTHONPATH = os.path.dirname(os.path.dirname(pscore.__file__))

# A rank of a 3-rank group: one all_reduce, then a second that rank `late` enters only once the
# test sets the store key "go".
RANK = """
import sys, numpy as np, pscore
from pscore.store import TCPStore
rank, world, port, late = (int(a) for a in sys.argv[1:5])
store = TCPStore("127.0.0.1", port, is_master=False, timeout=60)
pscore.init_process_group(store=store, rank=rank, world_size=world, timeout=60)
x = np.ones(1024, dtype=np.float32)
pscore.all_reduce(x)
print("ready", flush=True)
if rank == late:
    store.wait(["go"], 60)
pscore.all_reduce(x)
print("sum", x[0], flush=True)
"""

SERVER = """
import sys, pscore
server = pscore.PServer(num_workers=2)
print(server.port, flush=True)
sys.stdin.read()
server.stop(0)
"""

# Shard argv[1] of 2, registered in the store at argv[2].
SHARD = """
import sys, pscore
from pscore.store import TCPStore
shard, port = int(sys.argv[1]), int(sys.argv[2])
store = TCPStore("127.0.0.1", port, is_master=False, timeout=60)
server = pscore.PServer(shard, 2, num_workers=1, store=store)
print("serving", flush=True)
sys.stdin.read()
server.stop(0)
"""

CONNECT = """
import sys, pscore
client = pscore.PSClient(store=f"tcp://127.0.0.1:{sys.argv[1]}", worker_id=0)
print("connected", client.num_shards, flush=True)
"""

# A worker of a sync table: worker 1 pushes only after a line on its stdin.
WORKER = """
import sys, numpy as np, pscore
worker, port = int(sys.argv[1]), int(sys.argv[2])
client = pscore.PSClient([f"127.0.0.1:{port}"], worker_id=worker, timeout=60)
client.create_dense("w", (4,), consistency="sync")
print("ready", flush=True)
if worker == 1:
    sys.stdin.readline()
client.push("w", np.ones(4, dtype=np.float32))
print("pushed", flush=True)
"""


class Proc:
    """A Python child whose stdout and stderr are collected by threads as they come."""

    def __init__(self, code: str, *args, env: dict | None = None):
        environ = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
        self.p = subprocess.Popen(
            [sys.executable, "-c", code, *map(str, args)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=environ,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._read, args=(s, into), daemon=True)
            for s, into in ((self.p.stdout, self.out), (self.p.stderr, self.err))
        ]
        for r in self._readers:
            r.start()

    @staticmethod
    def _read(stream, into: list[str]) -> None:
        for line in stream:
            into.append(line)

    def stderr(self) -> str:
        return "".join(self.err)

    def wait_for(self, pattern: str, stream: str = "err") -> str:
        """The first line of stdout/stderr matching `pattern`; fails after the hang guard."""
        lines = self.err if stream == "err" else self.out
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            for line in list(lines):
                if re.search(pattern, line):
                    return line
            if self.p.poll() is not None and not any(r.is_alive() for r in self._readers):
                break
            time.sleep(0.05)
        raise AssertionError(f"no line matching {pattern!r}; stderr:\n{self.stderr()}")

    def finish(self) -> None:
        try:
            self.p.stdin.close()
            assert self.p.wait(HANG_GUARD_S) == 0, self.stderr()
        finally:
            self.p.kill()
            for r in self._readers:
                r.join(5)


def start_ranks(world: int, late: int, env: dict) -> tuple[TCPStore, list[Proc]]:
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=HANG_GUARD_S)
    return master, [Proc(RANK, r, world, master.port, late, env=env) for r in range(world)]


def test_late_rank_is_named_once_by_the_others():
    master, ranks = start_ranks(3, late=2, env={"PSCORE_STALL_WARNING": "1"})
    try:
        report = r"allreduce #1 \(4 KB, float32\) has waited [\d.]+ s; rank 2 has not arrived"
        for r in (0, 1):
            ranks[r].wait_for(rf"^pscore: rank {r} {report} \(last at #0\)$")
        time.sleep(1.0)  # five watchdog periods: room for a second report, which must not come
        master.set("go", "1")
        for p in ranks:
            p.wait_for(r"^sum 9\.0$", stream="out")
            p.finish()
    finally:
        for p in ranks:
            p.p.kill()
    for r in (0, 1):
        assert len(re.findall(r"allreduce #1", ranks[r].stderr())) == 1, ranks[r].stderr()
    assert "pscore:" not in ranks[2].stderr()


def test_rendezvous_names_the_rank_that_has_not_registered():
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=HANG_GUARD_S)
    env = {"PSCORE_STALL_WARNING": "1"}
    first = Proc(RANK, 0, 2, master.port, -1, env=env)
    second = None
    try:
        first.wait_for(
            r"^pscore: rank 0: rendezvous has waited [\d.]+ s for host/<rank>; "
            r"rank 1 has not registered yet$"
        )
        second = Proc(RANK, 1, 2, master.port, -1, env=env)
        for p in (first, second):
            p.wait_for(r"^sum 4\.0$", stream="out")
            p.finish()
    finally:
        for p in (first, second):
            if p:
                p.p.kill()
    assert first.stderr().count("rendezvous has waited") == 1


def test_sync_round_names_the_worker_that_withholds_its_push():
    env = {"PSCORE_STALL_WARNING": "1"}
    server = Proc(SERVER, env=env)
    workers = []
    try:
        port = int(server.wait_for(r"^\d+$", stream="out"))
        workers = [Proc(WORKER, w, port, env=env) for w in (0, 1)]
        server.wait_for(
            r"^pscore: ps shard 0: sync round 0 of table 'w' has waited [\d.]+ s; "
            r"worker 1 has not pushed \(pushed: worker 0; finished: none\)$"
        )
        workers[0].wait_for(
            r"^pscore: worker 0 push 'w' \(sync round 0\) has waited [\d.]+ s on shard 0$"
        )
        workers[1].wait_for("ready", stream="out")
        workers[1].p.stdin.write("go\n")
        workers[1].p.stdin.flush()
        for w in workers:
            w.wait_for("pushed", stream="out")
            w.finish()
        server.finish()
    finally:
        for p in [server, *workers]:
            p.p.kill()
    assert server.stderr().count("sync round 0") == 1, server.stderr()


def test_client_names_the_shard_it_cannot_reach_yet():
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=HANG_GUARD_S)
    env = {"PSCORE_STALL_WARNING": "1"}
    procs = [Proc(SHARD, 0, master.port, env=env)]
    try:
        procs[0].wait_for("^serving$", stream="out")
        procs.append(Proc(CONNECT, master.port, env=env))
        procs[1].wait_for(
            r"^pscore: worker 0 has waited [\d.]+ s to connect; shard 1 not reached yet; "
            r"not registered in the store: 1$"
        )
        procs.append(Proc(SHARD, 1, master.port, env=env))
        procs[1].wait_for("^connected 2$", stream="out")
        for p in procs:
            p.finish()
    finally:
        for p in procs:
            p.p.kill()
    assert procs[1].stderr().count("to connect") == 1


def test_sigusr1_lists_the_collective_a_blocked_rank_is_in():
    master, ranks = start_ranks(2, late=1, env={})  # the default threshold: no report
    try:
        ranks[0].wait_for("ready", stream="out")
        deadline = time.monotonic() + HANG_GUARD_S
        line = r"^  rank 0 allreduce #1 \(4 KB, float32\): running [\d.]+ s, waiting on rank 1$"
        while not re.search(line, ranks[0].stderr(), re.M):  # until it is inside the collective
            assert time.monotonic() < deadline, ranks[0].stderr()
            ranks[0].p.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
        master.set("go", "1")
        for p in ranks:
            p.wait_for(r"^sum 4\.0$", stream="out")
            p.finish()
    finally:
        for p in ranks:
            p.p.kill()
    assert re.search(r"^pscore: pid \d+: 1 operation\(s\) in flight:$", ranks[0].stderr(), re.M)


def test_sigusr1_is_left_to_a_handler_installed_before_and_can_be_turned_off():
    code = """
import signal, sys
if sys.argv[1] == "handler":
    signal.signal(signal.SIGUSR1, lambda *a: print("user handler", flush=True))
from pscore import stall
print(stall.install_signal_dump(), flush=True)
sys.stdin.read()
"""
    user = Proc(code, "handler")
    assert user.wait_for("^(True|False)$", stream="out").strip() == "False"
    user.p.send_signal(signal.SIGUSR1)
    user.wait_for("^user handler$", stream="out")
    user.finish()
    assert "in flight" not in user.stderr()

    off = Proc(code, "off", env={"PSCORE_SIGUSR1_DUMP": "0"})
    assert off.wait_for("^(True|False)$", stream="out").strip() == "False"
    off.finish()

    taken = Proc(code, "default")
    assert taken.wait_for("^(True|False)$", stream="out").strip() == "True"
    taken.p.send_signal(signal.SIGUSR1)
    taken.wait_for(r"^pscore: pid \d+: 0 operation\(s\) in flight$")
    taken.finish()  # exit status 0: the signal did not kill it


def test_threshold_is_half_the_timeout_unless_set(monkeypatch):
    from pscore import stall

    monkeypatch.delenv("PSCORE_STALL_WARNING", raising=False)
    assert stall.threshold(60.0) == 30.0
    monkeypatch.setenv("PSCORE_STALL_WARNING", "2.5")
    assert stall.threshold(60.0) == 2.5
    monkeypatch.setenv("PSCORE_STALL_WARNING", "0")
    assert stall.threshold(60.0) == 0.0  # off
    monkeypatch.setenv("PSCORE_STALL_WARNING", "-1")
    with pytest.raises(ValueError, match="PSCORE_STALL_WARNING='-1'"):
        stall.threshold(60.0)


def test_watchdog_publishes_but_does_not_inspect_a_source_with_reports_off():
    from pscore import stall

    class Source:
        def __init__(self, threshold_s: float):
            self.threshold_s = threshold_s
            self.published = self.asked = 0

        def publish(self) -> None:
            self.published += 1

        def in_flight(self) -> list:
            self.asked += 1
            return []

    watchdog = stall._Watchdog()  # not started: check() runs here
    off, on = Source(0.0), Source(5.0)
    watchdog.sources.update((off, on))
    assert watchdog.check() == 1.0  # a fifth of the only threshold
    assert (off.published, off.asked) == (1, 0)
    assert (on.published, on.asked) == (1, 1)
