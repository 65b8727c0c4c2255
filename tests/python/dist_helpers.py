"""Runs a function on N real processes that form a pscore group over loopback, or a script on
N fresh interpreters that meet at one store."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pscore
from pscore.store import TCPStore

__all__ = ["run_rank_scripts", "run_ranks"]

_ctx = mp.get_context("fork")
_PYTHONPATH = os.pathsep.join(
    [os.path.dirname(os.path.dirname(pscore.__file__)), str(Path(__file__).resolve().parent)]
)


def _entry(fn, rank, world, port, transport, timeout, env, queue, args):
    # The parent's objects came along with the fork (earlier tests' native groups among them,
    # whose threads did not): a gc pass in this rank must not run their destructors.
    gc.freeze()
    os.environ.update(env)
    if transport:
        os.environ["PSCORE_TRANSPORT"] = transport
    try:
        import pscore

        store = TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
        pscore.init_process_group(store=store, rank=rank, world_size=world, timeout=timeout)
        result = fn(rank, world, *args)
        queue.put((rank, "ok", result))
    except BaseException:  # noqa: BLE001 - reported to the parent
        queue.put((rank, "error", traceback.format_exc()))


def run_ranks(
    fn,
    world: int,
    *args,
    transport: str | None = None,
    timeout: float = 30.0,
    env: dict | None = None,
    join_timeout: float = 180.0,
    expect_dead=(),
):
    """Runs fn(rank, world, *args) on `world` processes; returns results by rank. Raises with
    the failing ranks' tracebacks when one fails (ranks in expect_dead may die silently)."""
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=timeout)
    queue = _ctx.Queue()
    procs = [
        _ctx.Process(
            target=_entry,
            args=(fn, r, world, master.port, transport, timeout, env or {}, queue, args),
        )
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results, errors = {}, {}
    try:
        expected = world - len(expect_dead)
        while len(results) + len(errors) < expected:
            rank, status, value = queue.get(timeout=join_timeout)
            (results if status == "ok" else errors)[rank] = value
    finally:
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise AssertionError(
            "\n".join(f"rank {r} failed:\n{tb}" for r, tb in sorted(errors.items()))
        )
    return results


def run_rank_scripts(code: str, world: int, timeout: float, **env) -> list[str]:
    """Runs `python -c code RANK PORT` for each rank on fresh interpreters that can import
    pscore and these helpers (`env` added to the environment), with a TCPStore server at PORT;
    returns each rank's output (stdout and stderr), asserting that every rank exited 0."""
    server = TCPStore("127.0.0.1", 0, is_master=True, timeout=timeout)
    environ = {**os.environ, "PYTHONPATH": _PYTHONPATH, **env}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code, str(rank), str(server.port)],
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(world)
    ]
    try:
        outs = [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    for p, out in zip(procs, outs):
        assert p.returncode == 0, out
    return outs
