"""The default snapshot policy of a recoverable shard: under sustained dense pushes and no
--checkpoint-every, the write-ahead log stays under the policy's bound (snapshots truncate it,
requests wait at twice the bound), and a shard SIGKILLed at any point of it recovers every
acknowledged push."""

from __future__ import annotations

import contextlib
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_ps_support import pserver_process

from pscore.ps import SGD, PSClient
from pscore.ps.server import PServer
from pscore.store import TCPStore

MB = 1 << 20
LOG_MB = 2  # the size trigger the tests run with (the default, 64 MB, takes longer to reach)


def wal_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.glob("*.wal") if p.exists())


def dir_bytes(directory: Path) -> int:
    total = 0
    for p in directory.iterdir():
        with contextlib.suppress(FileNotFoundError):  # a temp file renamed meanwhile
            total += p.stat().st_size
    return total


def test_log_stays_bounded_and_sigkill_loses_no_acknowledged_push(tmp_path):
    """Two workers push a 2 MB dense table (1 MB per shard and push) over two shards serving
    --recover without --checkpoint-every; each shard's log passes 100 MB of records in all, yet
    never exceeds twice the policy's bound plus the records in flight, and shard 1 is SIGKILLed
    three times and restarted: every acknowledged push is in the tables once."""
    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=30)
    url = f"tcp://127.0.0.1:{store.port}"
    dirs = [tmp_path / "s0", tmp_path / "s1"]

    def serve(shard):
        return pserver_process(
            *("--shard", str(shard), "--num-shards", "2", "--num-workers", "2"),
            *("--store", url, "--job-id", "walbound", "--recover", str(dirs[shard])),
            *("--snapshot-log-mb", str(LOG_MB)),
        )

    procs = [serve(0), serve(1)]
    clients = [
        PSClient(store=store, job_id="walbound", worker_id=w, retry_timeout=60) for w in (0, 1)
    ]
    n = 512 * 1024  # 2 MB of float32: split evenly, 1 MB per shard
    # The policy's bound per shard: the log at twice max(LOG_MB, 2 x the snapshot), where the
    # snapshot (values only, SGD keeps no state) is about 1 MB; plus what the requests admitted
    # before the stall append (at most one per handler thread and the event loop, 1 MB each).
    bound = 2 * max(LOG_MB, 2 * 1.1) * MB + 3 * MB
    largest = [0, 0]
    acked = [0, 0]
    stop = threading.Event()
    failure = []
    try:
        clients[0].create_dense("w", (n,), optimizer=SGD(lr=1.0))
        ones = np.ones(n, np.float32)

        def train(w):
            try:
                while not stop.is_set():
                    clients[w].push("w", ones)
                    acked[w] += 1
                    for shard in (0, 1):  # measured after every acknowledged push
                        largest[shard] = max(largest[shard], wal_bytes(dirs[shard]))
            except Exception as e:  # noqa: BLE001 - reported below
                failure.append(e)

        threads = [threading.Thread(target=train, args=(w,)) for w in (0, 1)]
        for t in threads:
            t.start()
        for _ in range(3):
            target = sum(acked) + 30
            while sum(acked) < target:
                assert not failure, failure
                time.sleep(0.005)
            procs[1].kill()
            procs[1].wait()
            procs[1] = serve(1)
        while sum(acked) < 120:  # 120 MB of records per shard in all
            assert not failure, failure
            time.sleep(0.005)
        stop.set()
        for t in threads:
            t.join(60)
        assert not failure, failure
        total = float(sum(acked))
        np.testing.assert_array_equal(clients[0].pull("w"), np.full(n, -total, np.float32))
        for shard in (0, 1):
            assert largest[shard] <= bound, (shard, largest[shard] / MB, bound / MB)
            assert dir_bytes(dirs[shard]) <= bound + 4 * MB
        stats = clients[0].stats()
        assert stats[0]["snapshots_written"] >= 10, stats[0]  # shard 0 ran throughout
    finally:
        stop.set()
        for p in procs:
            p.kill()
            p.wait()


def test_size_trigger_off_lets_the_log_grow(tmp_path):
    """snapshot_log_mb=0 turns the size trigger off: the log keeps every record."""
    server = PServer(recover=str(tmp_path), snapshot_log_mb=0, log_connections=False)
    try:
        c = PSClient([server.address])
        c.create_dense("p", (MB // 4,), optimizer=SGD(lr=1.0))
        for _ in range(12):
            c.push("p", np.ones(MB // 4, np.float32))
        assert wal_bytes(tmp_path) >= 12 * MB
        assert server.snapshots_written == 0
    finally:
        server.stop(0)


@pytest.mark.parametrize("bad", [{"snapshot_log_mb": -1}, {"snapshot_log_ratio": float("nan")}])
def test_snapshot_options_are_checked(tmp_path, bad):
    with pytest.raises(ValueError, match=f"{next(iter(bad))} must be a number >= 0"):
        PServer(recover=str(tmp_path), **bad)


def test_failed_snapshot_is_reported_and_retried_without_holding_requests(tmp_path, capfd):
    """A snapshot that cannot be written (its temp file's name is taken by a directory) is
    reported on stderr; pushes go on although the log passes twice the bound, and once the disk
    is writable again the next attempt succeeds and truncates the log."""
    blocker = tmp_path / f"shard-00000-of-00001.safetensors.tmp.{os.getpid()}"
    blocker.mkdir()
    server = PServer(recover=str(tmp_path), snapshot_log_mb=0.25, log_connections=False)
    try:
        c = PSClient([server.address], timeout=30)
        c.create_dense("p", (MB // 4,), optimizer=SGD(lr=1.0))
        pushes = 8
        for _ in range(pushes):  # 8 MB of log, 32 x the bound
            c.push("p", np.ones(MB // 4, np.float32))
        assert wal_bytes(tmp_path) >= 8 * MB
        assert server.snapshots_written == 0
        assert "automatic snapshot into" in capfd.readouterr().err
        blocker.rmdir()
        c.push("p", np.ones(MB // 4, np.float32))  # asks for a snapshot again
        pushes += 1
        deadline = time.monotonic() + 60
        while server.snapshots_written == 0 and time.monotonic() < deadline:
            time.sleep(0.05)  # the retry comes a second after the last failure
        assert server.snapshots_written == 1
        assert wal_bytes(tmp_path) <= MB + 1024  # at most that push, if it came after the cut
    finally:
        server.stop(0)
    again = PServer(recover=str(tmp_path), log_connections=False)  # the snapshot plus the log
    try:
        got = PSClient([again.address]).pull("p")
        np.testing.assert_array_equal(got, np.full(MB // 4, -float(pushes), np.float32))
    finally:
        again.stop(0)
