"""Runs a function on N real processes that form a pscore group over loopback."""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback

from pscore.store import TCPStore

_ctx = mp.get_context("fork")


def _entry(fn, rank, world, port, transport, timeout, env, queue, args):
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
