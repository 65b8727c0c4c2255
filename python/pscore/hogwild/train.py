"""train(): starts N worker processes on shared tables, as PyTorch's mnist_hogwild example does by
hand, waits for them and turns a worker's failure (exception, crash, signal) into an error here."""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import pickle
import time
import traceback
from collections.abc import Callable, Sequence
from multiprocessing.connection import wait
from typing import Any

from ..errors import TimeoutError as PscoreTimeoutError
from .table import close_all

__all__ = ["WorkerError", "train"]


class WorkerError(RuntimeError):
    """A Hogwild worker failed. `rank`, `exitcode` (None if it raised and exited cleanly, else
    its exit status; negative: killed by that signal) and `remote_traceback` say how; the
    worker's own exception, when it could be pickled, is the ``__cause__``."""

    def __init__(self, message: str, rank: int, exitcode: int | None, remote_traceback: str):
        super().__init__(message)
        self.rank = rank
        self.exitcode = exitcode
        self.remote_traceback = remote_traceback


def _worker_main(fn: Callable, rank: int, args: tuple, kwargs: dict, conn) -> None:
    try:
        result = fn(rank, *args, **kwargs)
        conn.send(("ok", pickle.dumps(result)))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
        tb = traceback.format_exc()
        try:
            payload = pickle.dumps(e)
        except Exception:  # noqa: BLE001 - unpicklable exceptions travel as text only
            payload = None
        conn.send(("error", f"{type(e).__name__}: {e}", tb, payload))
        raise SystemExit(1) from None
    finally:
        close_all()
        conn.close()


def _failure(rank: int, n: int, proc, message: tuple | None) -> WorkerError:
    if message and message[0] == "error":
        _, summary, tb, payload = message
        err = WorkerError(
            f"hogwild worker {rank} of {n} failed: {summary}\n"
            f"--- worker {rank} traceback ---\n{tb}",
            rank,
            proc.exitcode,
            tb,
        )
        if payload is not None:
            with contextlib.suppress(Exception):  # a cause we cannot rebuild is left out
                err.__cause__ = pickle.loads(payload)
        return err
    how = (
        f"was killed by signal {-proc.exitcode}"
        if proc.exitcode and proc.exitcode < 0
        else f"exited with status {proc.exitcode} without reporting a result"
    )
    return WorkerError(
        f"hogwild worker {rank} of {n} (pid {proc.pid}) {how}", rank, proc.exitcode, ""
    )


def _stop(procs: Sequence) -> None:
    for p in procs:
        if p.is_alive():
            p.terminate()
    for p in procs:
        p.join(5.0)
        if p.is_alive():
            p.kill()
            p.join()


def train(
    fn: Callable,
    num_procs: int,
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    timeout: float | None = None,
    start_method: str = "spawn",
    sync: Any = None,
    poll_interval: float = 0.05,
) -> list:
    """Runs fn(rank, *args, **kwargs) in num_procs processes and returns their results by rank.

    Pass SharedTables in args: they travel by name and each worker attaches to the same
    segment. fn must be importable by the workers (a module-level function) with the default
    "spawn" start method. If any worker raises or dies, the others are stopped and WorkerError
    is raised here; past `timeout` seconds all are stopped and pscore.TimeoutError is raised.
    sync: a DistributedHogwild whose averaging rounds run in this process while the workers
    train, and whose final round runs once they have all finished.
    """
    if not isinstance(num_procs, int) or num_procs < 1:
        raise ValueError(f"num_procs must be an int >= 1, got {num_procs!r}")
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {type(fn).__name__}")
    kwargs = kwargs or {}
    ctx = mp.get_context(start_method)
    procs, conns = [], []
    try:
        for rank in range(num_procs):
            reader, writer = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=_worker_main,
                args=(fn, rank, args, kwargs, writer),
                name=f"hogwild-{rank}",
                daemon=True,
            )
            p.start()
            writer.close()
            procs.append(p)
            conns.append(reader)
        results = _wait_all(procs, conns, timeout, sync, poll_interval)
    except BaseException:
        _stop(procs)
        raise
    if sync is not None:
        sync.finish()
    return results


def _read(conn):
    """The worker's report, or None when it died without sending one."""
    try:
        return conn.recv() if conn.poll() else None
    except (EOFError, OSError):
        return None


def _wait_all(procs, conns, timeout, sync, poll_interval) -> list:
    n = len(procs)
    deadline = None if timeout is None else time.monotonic() + timeout
    results: list = [None] * n
    messages: dict = {}
    pending = set(range(n))
    while pending:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise PscoreTimeoutError(
                f"hogwild train: workers {sorted(pending)} of {n} still running after {timeout} s"
            )
        step = (
            left if sync is None else (poll_interval if left is None else min(poll_interval, left))
        )
        waitables = [procs[r].sentinel for r in pending]
        waitables += [conns[r] for r in pending if r not in messages]
        ready = wait(waitables, step)
        for r in sorted(pending):
            if conns[r] in ready and r not in messages:
                messages[r] = _read(conns[r])
            if procs[r].sentinel not in ready:
                continue
            procs[r].join()
            msg = messages.get(r) or _read(conns[r])
            if msg is None or msg[0] != "ok" or procs[r].exitcode != 0:
                raise _failure(r, n, procs[r], msg)
            results[r] = pickle.loads(msg[1])
            pending.discard(r)
        if sync is not None and pending:
            sync.maybe_sync()
    return results
