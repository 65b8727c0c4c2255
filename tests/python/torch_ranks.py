"""Runs a function on N spawned processes that join torch.distributed over a TCPStore served by
the test process on a kernel-picked loopback port (shared by the torch backend tests)."""

from __future__ import annotations

import datetime
import multiprocessing as mp
import os
import pickle

import torch.distributed as dist

# Ranks are spawned, not forked: the test process serves a torch TCPStore (a libuv thread), and
# a forked rank once hung early in CI, likely on state inherited from that thread; spawned ranks
# start clean.
_ctx = mp.get_context("spawn")
# Objects a rank must not free: torch 2.13 can deadlock when a DDP reducer holding a gloo group
# is freed (its destructor joins gloo's worker thread while holding the GIL, and the worker
# needs the GIL to free a tensor). Ranks leave with os._exit, so nothing here is ever freed.
KEEP_ALIVE = []


def init(backend, rank, world, port, timeout_s):
    import pscore.torch_backend  # noqa: F401 - registers "pscore" in the spawned rank

    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def _rank_main(target, rank, args, queue):
    """Runs one rank and sends back ("ok", reply) or ("error", repr); leaves with os._exit once
    the reply is flushed (see KEEP_ALIVE). The reply is pickled here, by value: the queue's
    pickler would share tensors through file descriptors that die with this process."""
    try:
        queue.put((rank, "ok", pickle.dumps(target(rank, *args))))
    except BaseException as e:  # noqa: BLE001 - reported to the test
        queue.put((rank, "error", repr(e)))
    queue.close()
    queue.join_thread()
    os._exit(0)


def run_ranks(target, world, *args, timeout_s):
    """Runs target(rank, world, *args, port) in spawned ranks; returns {rank: reply}. Ranks
    still running when the replies are in or the time is up are killed."""
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    queue = _ctx.Queue()
    procs = [
        _ctx.Process(target=_rank_main, args=(target, r, (world, *args, store.port), queue))
        for r in range(world)
    ]
    try:
        for p in procs:
            p.start()
        replies = [queue.get(timeout=timeout_s) for _ in procs]
        for p in procs:
            p.join(10)
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()
    errors = {r: v for r, status, v in replies if status != "ok"}
    assert not errors, errors
    return {r: pickle.loads(v) for r, _, v in replies}
