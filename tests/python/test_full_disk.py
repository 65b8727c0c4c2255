"""A full disk while checkpointing (docs/ps.md, "A full disk"): a real small tmpfs is the
checkpoint directory of a parameter-server shard (PSClient.save, the --recover snapshots and
write-ahead log) and of the Trainer's checkpoints. Once it is full, a save fails with an error
naming the path and ENOSPC, the previous checkpoint still loads bit-identically, no partial file
is taken for a checkpoint, the server goes on serving, and the next save after space is freed
succeeds. Needs root (mount); skips otherwise."""

from __future__ import annotations

import errno
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from pscore import PSClient, PServer
from pscore.ps import SGD
from pscore.ps.checkpoint import read_checkpoint
from pscore.train import checkpoint

DISK_BYTES = 1 << 20
ROWS = 16 * 1024  # a 64 KB dense table: a checkpoint is a few such
NO_SPACE = r"[Nn]o space left on device"


@pytest.fixture
def disk(tmp_path):
    """A 1 MB tmpfs mounted at tmp_path/disk for the test's duration."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_BYTES}", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.strip()}")
    try:
        yield str(mount_point)
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def free_bytes(directory: str) -> int:
    st = os.statvfs(directory)
    return st.f_bavail * st.f_frsize


def fill(directory: str) -> str:
    """Writes a file into `directory` that takes every free block; returns its path."""
    path = os.path.join(directory, "filler")
    with open(path, "wb") as f:
        f.write(b"\0" * free_bytes(directory))
    assert free_bytes(directory) == 0
    return path


def names(directory: str) -> set[str]:
    return set(os.listdir(directory))


def test_ps_save_on_a_full_disk_fails_clearly_and_keeps_the_previous_checkpoint(disk):
    with PServer(log_connections=False) as server, PSClient([server.address]) as client:
        client.create_dense("w", (ROWS,), optimizer=SGD(lr=1.0))
        client.push("w", np.full(ROWS, -1.0, np.float32))
        first = os.path.join(disk, "ckpt-1")
        client.save(first)
        saved = read_checkpoint(first)["w"].copy()
        filler = fill(disk)
        before_failure = names(disk)

        client.push("w", np.full(ROWS, -2.0, np.float32))
        second = os.path.join(disk, "ckpt-2")
        with pytest.raises(RuntimeError, match=NO_SPACE) as failure:
            client.save(second)
        assert second in str(failure.value)
        assert names(disk) == before_failure | {"ckpt-2"}  # the directory, no file in it
        assert os.listdir(second) == []
        assert read_checkpoint(first)["w"].tobytes() == saved.tobytes()

        client.push("w", np.full(ROWS, -4.0, np.float32))  # still serving
        np.testing.assert_array_equal(client.pull("w"), np.full(ROWS, 7.0, np.float32))

        os.remove(filler)
        client.save(second)
        np.testing.assert_array_equal(read_checkpoint(second)["w"], client.pull("w"))


def test_ps_write_ahead_log_on_a_full_disk_refuses_updates_it_cannot_log(disk):
    recover = os.path.join(disk, "recover")
    opts = {"recover": recover, "snapshot_log_mb": 0, "log_connections": False}
    acknowledged = np.zeros(ROWS, np.float32)
    with PServer(**opts) as server, PSClient([server.address]) as client:
        client.create_dense("w", (ROWS,), optimizer=SGD(lr=1.0))
        for _ in range(3):
            client.push("w", np.full(ROWS, -1.0, np.float32))
            acknowledged += 1.0
        client.save(recover)  # a snapshot: the log restarts empty
        snapshot = os.path.join(recover, "shard-00000-of-00001.safetensors")
        with open(snapshot, "rb") as f:
            snapshot_bytes = f.read()
        client.push("w", np.full(ROWS, -1.0, np.float32))
        acknowledged += 1.0
        filler = fill(disk)
        with pytest.raises(RuntimeError, match=NO_SPACE):  # the next snapshot cannot fit
            client.save(recover)
        with open(snapshot, "rb") as f:
            assert f.read() == snapshot_bytes
        assert sorted(os.listdir(recover)) == [
            "shard-00000-of-00001.safetensors",
            "shard-00000-of-00001.wal",
        ]
        for _ in range(3):  # the log cannot take the record: the push fails, unapplied
            with pytest.raises(RuntimeError, match=NO_SPACE) as failure:
                client.push("w", np.full(ROWS, -100.0, np.float32))
            assert recover in str(failure.value)
        np.testing.assert_array_equal(client.pull("w"), acknowledged)
        os.remove(filler)
        client.push("w", np.full(ROWS, -1.0, np.float32))
        acknowledged += 1.0
    with PServer(**opts) as server, PSClient([server.address]) as client:
        assert server.replayed_records > 0
        np.testing.assert_array_equal(client.pull("w"), acknowledged)


def test_ps_sync_round_on_a_full_disk_is_not_applied(disk):
    """The push that closes a sync round gets the log's ENOSPC; the round is not applied and its
    other push times out naming the round (docs/ps.md: the round cannot be failed as a whole)."""
    recover = os.path.join(disk, "recover")
    opts = {"recover": recover, "snapshot_log_mb": 0, "log_connections": False}
    with PServer(num_workers=2, **opts) as server:
        clients = [PSClient([server.address], worker_id=w, timeout=5) for w in range(2)]
        clients[0].create_dense("w", (ROWS,), optimizer=SGD(lr=1.0), consistency="sync")
        clients[1].lookup_table("w")
        fill(disk)
        with ThreadPoolExecutor(2) as pool:
            pushes = [pool.submit(c.push, "w", np.ones(ROWS, np.float32)) for c in clients]
            errors = sorted((f.exception() for f in pushes), key=lambda e: type(e).__name__)
        assert [type(e).__name__ for e in errors] == ["Error", "TimeoutError"], errors
        assert re.search(NO_SPACE, str(errors[0])), errors[0]
        assert "sync round 0 of table 'w'" in str(errors[1]), errors[1]
        np.testing.assert_array_equal(clients[0].pull("w"), np.zeros(ROWS, np.float32))
        for c in clients:
            c.close()


def test_trainer_checkpoint_on_a_full_disk_keeps_latest(disk):
    saver = checkpoint.Saver.create(disk, None, None, keep=5, writer=True)
    tensors = {"model/w": torch.arange(ROWS, dtype=torch.float32)}
    first = saver.write(1, tensors, {"format": checkpoint.FORMAT}, lambda _: None)
    saved, _ = checkpoint.read(first)
    filler = fill(disk)
    before_failure = names(disk)

    with pytest.raises(OSError, match=NO_SPACE) as failure:
        saver.write(
            2, {"model/w": tensors["model/w"] * 2}, {"format": checkpoint.FORMAT}, lambda _: None
        )
    assert failure.value.errno == errno.ENOSPC
    assert disk in str(failure.value)
    assert names(disk) == before_failure  # no temporary directory, no new step
    assert checkpoint.latest(disk) == first
    again, _ = checkpoint.read(checkpoint.latest(disk))
    assert again["model/w"].numpy().tobytes() == saved["model/w"].numpy().tobytes()

    os.remove(filler)
    second = saver.write(
        2, {"model/w": tensors["model/w"] * 2}, {"format": checkpoint.FORMAT}, lambda _: None
    )
    assert checkpoint.latest(disk) == second
