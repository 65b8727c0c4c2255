"""What each rank tells its job's store about itself when it joins, for ``pscore status``: one
key per rank, written at init_process_group (no traffic per operation).

Keys, under the job id the parameter servers use (pscore.ps.environment.job_id):
``pscore/job/<job>/world_size`` and ``pscore/job/<job>/rank/<rank>``, a JSON object with host,
pid, backend, group, world_size, joined (Unix time), connected, and what the process added with
:func:`describe` (the Trainer: role and strategy).

Where: the job's ``PSCORE_STORE`` when set (the store the shards publish in, which pscore-run
serves for the whole run), else the rendezvous store. The record is written before the
rendezvous, so a rank stuck connecting shows. In the rendezvous store, whose host (rank 0) may
leave as soon as every rank has connected, that is the only write: the rendezvous's own
done/<rank> key says the rank connected. In PSCORE_STORE a second write sets connected.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import weakref

from .. import _config, errors

__all__ = ["describe", "mark_connected", "rank_key", "read_ranks", "register", "world_key"]

# How long init waits for PSCORE_STORE (pscore-run serves it a moment after the ranks start).
_JOB_STORE_PATIENCE_S = 10.0
_STORE_ERRORS = (errors.Error, ConnectionError, OSError, ValueError)
_described: dict = {}  # fields this process adds to its record (describe)
# Where this process's record lives: store (a callable returning it), key, record, separate.
# The rendezvous store is held weakly: rank 0 serves it, and must stop serving it once the group
# is destroyed.
_registered: dict = {}


def _job_id() -> str:
    from ..ps.environment import job_id  # the id `pscore status --job` and pserver share

    return job_id()


def world_key(job_id: str) -> str:
    return f"pscore/job/{job_id or 'default'}/world_size"


def rank_key(job_id: str, rank: int) -> str:
    return f"pscore/job/{job_id or 'default'}/rank/{rank}"


def _job_store(rendezvous_store, timeout: float):
    """(store, separate): PSCORE_STORE's store when set and reachable within a few seconds,
    else the rendezvous's."""
    url = _config.STORE.get()
    if url:
        from ..ps.discovery import open_store

        with contextlib.suppress(*_STORE_ERRORS):  # status is not worth failing a job for
            return open_store(url, min(timeout, _JOB_STORE_PATIENCE_S)), True
    return rendezvous_store, False


def _weakly(store):
    try:
        return weakref.ref(store)
    except TypeError:  # a store type that takes no weak references: not rank 0's own server
        return lambda: store


def _write() -> None:
    store = _registered["store"]()
    if store is not None:
        store.set(_registered["key"], json.dumps(_registered["record"]))


def register(store, rank: int, world_size: int, backend: str, group: str, timeout: float) -> None:
    """Records this rank, before the rendezvous on `store`."""
    job = _job_id()
    target, separate = _job_store(store, timeout)
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "backend": backend,
        "group": group,
        "world_size": world_size,
        "joined": time.time(),
        "connected": False,
        **_described,
    }
    held = (lambda: target) if separate else _weakly(target)
    _registered.update(store=held, key=rank_key(job, rank), record=record, separate=separate)
    target.set(world_key(job), str(world_size))
    _write()


def _rewrite(**fields) -> None:
    """Updates this rank's record, best effort: a store that is gone loses it, not the job."""
    _registered["record"].update(fields)
    with contextlib.suppress(*_STORE_ERRORS):
        _write()


def mark_connected() -> None:
    """After the rendezvous: records it in PSCORE_STORE (the rendezvous store has done/<rank>)."""
    if _registered.get("separate"):
        _rewrite(connected=True)


def describe(**fields) -> None:
    """Adds fields (e.g. role="chief", strategy="allreduce") to this rank's record: to the one
    init_process_group will write, or, when it already has, rewrites it."""
    _described.update(fields)
    if _registered:
        _rewrite(**fields)


def read_ranks(store, job_id: str) -> list[dict] | None:
    """Each rank's record with its rank and state, or None when no rank of this job registered.
    States: "missing" (not registered), "joining" (still connecting to the others), "running".
    """
    if not store.check([world_key(job_id)]):
        return None
    world_size = int(store.get(world_key(job_id)).decode())
    ranks = []
    for rank in range(world_size):
        key = rank_key(job_id, rank)
        if not store.check([key]):
            ranks.append({"rank": rank, "state": "missing"})
            continue
        record = json.loads(store.get(key).decode())
        done = f"pscore/{record.get('group', 'world')}/done/{rank}"
        connected = record.get("connected") or store.check([done])
        ranks.append({"rank": rank, **record, "state": "running" if connected else "joining"})
    return ranks
