"""Several processes on one table: train() with exact integer updates, a worker's exception or
crash surfacing in the parent, a killed process leaving the others working, and no segment left
in /dev/shm afterwards."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time
import uuid

import numpy as np
import pytest

from pscore.errors import TimeoutError as PscoreTimeoutError
from pscore.hogwild import SharedTable, WorkerError, train


def _name(tag: str) -> str:
    return f"pp-{tag}-{uuid.uuid4().hex[:10]}"


# ---- worker functions (module level: spawned workers import them) ----------------------------
def _count_worker(rank, table, steps, locked):
    ids = np.array([0, 1 + rank, 0], dtype=np.int64)  # row 0 shared by all, 1+rank private
    g = -np.ones((3, table.shape[1]), np.float32)
    for _ in range(steps):
        table.sgd(ids, g, lr=1.0, locked=locked)
    return rank * 10, os.getpid()


def _failing_worker(rank, _table):
    if rank == 1:
        raise KeyError(f"worker {rank} found no key")
    time.sleep(30)  # the parent must stop this one once rank 1 has failed


def _exiting_worker(rank, _table, how):
    if rank == 0:
        if how == "exit":
            os._exit(3)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(30)


def _sleeping_worker(_rank):
    time.sleep(30)


def _hammer(name, started):
    t = SharedTable.attach(name)
    g = -np.ones((1, t.shape[1]), np.float32)
    t.sgd([0], g, lr=1.0)
    started.set()
    while True:
        t.sgd([0], g, lr=1.0)


# ---- tests ----------------------------------------------------------------------------------
@pytest.mark.parametrize("start_method", ["spawn", "fork"])
def test_train_runs_workers_on_one_table_with_exact_locked_updates(start_method):
    """Spawned workers attach by name; forked ones inherit the handle and register as
    themselves on their first locked update."""
    procs, steps = 3, 200
    with SharedTable.create(_name("train"), (1 + procs, 8)) as t:
        results = train(
            _count_worker,
            num_procs=procs,
            args=(t, steps, True),
            timeout=120,
            start_method=start_method,
        )
        assert [r[0] for r in results] == [0, 10, 20]
        assert len({r[1] for r in results}) == procs and os.getpid() not in {r[1] for r in results}
        w = t.numpy()
        assert (w[0] == 2 * steps * procs).all()  # colliding row, locked: nothing lost
        for r in range(procs):
            assert (w[1 + r] == steps).all()  # private rows
        assert t.update_count == steps * procs
        assert t.live_attachments() == 1  # the workers closed their handles
    assert not os.path.exists(SharedTable.shm_path(t.name))


def test_lock_free_processes_on_private_rows_are_exact():
    procs, steps = 2, 300
    with SharedTable.create(_name("free"), (1 + procs, 16)) as t:
        train(_count_worker, num_procs=procs, args=(t, steps, False), timeout=120)
        w = t.numpy()
        for r in range(procs):
            assert (w[1 + r] == steps).all()
        # The shared row raced without locks: whole updates only, some may be lost.
        assert (w[0] == np.round(w[0])).all() and (w[0] >= 1).all()
        assert (w[0] <= 2 * steps * procs).all()


def test_a_worker_exception_is_raised_in_the_parent_and_the_others_stopped():
    with SharedTable.create(_name("fail"), (2, 2)) as t:
        start = time.monotonic()
        with pytest.raises(WorkerError, match="hogwild worker 1 of 2 failed: KeyError") as info:
            train(_failing_worker, num_procs=2, args=(t,), timeout=120)
        assert time.monotonic() - start < 25  # rank 0 (sleeping 30 s) was stopped
        assert info.value.rank == 1
        assert "found no key" in info.value.remote_traceback
        assert isinstance(info.value.__cause__, KeyError)
        assert t.live_attachments() == 1


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_a_crashed_worker_is_reported(how):
    with SharedTable.create(_name("crash"), (2, 2)) as t:
        with pytest.raises(WorkerError) as info:
            train(_exiting_worker, num_procs=2, args=(t, how), timeout=120)
        assert info.value.rank == 0
        if how == "exit":
            assert info.value.exitcode == 3
            assert "exited with status 3 without reporting a result" in str(info.value)
        else:
            assert info.value.exitcode == -signal.SIGKILL
            assert "was killed by signal 9" in str(info.value)
        t.sgd([1], np.ones((1, 2), np.float32))  # the table still works
        assert t.live_attachments() == 1  # dead workers' handles were reaped
    assert not os.path.exists(SharedTable.shm_path(t.name))


def test_train_timeout_and_argument_errors():
    with pytest.raises(PscoreTimeoutError, match=r"workers \[0\] of 1 still running after 1.0 s"):
        train(_sleeping_worker, num_procs=1, timeout=1.0)
    with pytest.raises(ValueError, match="num_procs must be an int >= 1"):
        train(_sleeping_worker, num_procs=0)
    with pytest.raises(TypeError, match="fn must be callable"):
        train("not a function", num_procs=1)


def test_a_killed_process_leaves_the_others_working():
    ctx = mp.get_context("spawn")
    with SharedTable.create(_name("kill"), (2, 4)) as t:
        started = ctx.Event()
        p = ctx.Process(target=_hammer, args=(t.name, started), daemon=True)
        p.start()
        assert started.wait(60)
        assert t.live_attachments() == 2
        os.kill(p.pid, signal.SIGKILL)
        p.join(10)
        t.sgd([1], -np.ones((1, 4), np.float32), lr=1.0, locked=True)
        assert (t.numpy()[1] == 1).all()
        assert t.numpy()[0, 0] >= 1  # the hammer's updates landed before it died
        assert t.live_attachments() == 1
        other = SharedTable.attach(t.name)  # attaching still works too
        other.close()
    assert not os.path.exists(SharedTable.shm_path(t.name))
