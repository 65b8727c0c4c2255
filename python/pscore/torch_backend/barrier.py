"""monitored_barrier for the pscore torch backend: a barrier through the group's store in which
rank 0 names the ranks that did not arrive in time (gloo's semantics), where a plain barrier
could only say that it timed out.

Every other rank posts an arrival key and waits for rank 0's release key; rank 0 waits for the
arrivals with one deadline for all of them, then releases the others or raises naming the
missing ranks (the first one, or every one with wait_all_ranks).

torch.distributed.monitored_barrier itself refuses every backend but gloo by name, before it
asks the group; `install` wraps it so that on a pscore group it asks the group, and on any other
group it is torch's own function."""

from __future__ import annotations

import datetime
import functools
import time

import torch.distributed as dist
from torch.distributed import distributed_c10d

__all__ = ["install", "monitored_barrier"]


def install(group_type) -> None:
    """Routes torch.distributed.monitored_barrier on groups of `group_type` to the group."""
    torchs = distributed_c10d.monitored_barrier
    if getattr(torchs, "_pscore_group_type", None) is group_type:
        return

    @functools.wraps(torchs)
    def monitored_barrier(group=None, timeout=None, wait_all_ranks=False):
        pg = distributed_c10d._get_default_group() if group is None else group
        if not isinstance(pg, group_type):
            return torchs(group, timeout, wait_all_ranks)
        if isinstance(timeout, (int, float)):
            timeout = datetime.timedelta(seconds=timeout)
        return pg.monitored_barrier(timeout, wait_all_ranks)

    monitored_barrier._pscore_group_type = group_type
    distributed_c10d.monitored_barrier = monitored_barrier
    dist.monitored_barrier = monitored_barrier


def monitored_barrier(group, number: int, timeout_s: float, wait_all_ranks: bool) -> None:
    store, prefix = group.store, f"monitored_barrier/{number}"
    if group.rank != 0:
        store.set(f"{prefix}/arrived/{group.rank}", b"1")
        _wait_for(store, f"{prefix}/released", timeout_s, "rank 0's release")
        return
    missing = _missing_ranks(store, prefix, group.size, timeout_s, wait_all_ranks)
    if missing:
        ranks = ", ".join(map(str, missing))
        raise RuntimeError(
            f"pscore backend: rank{'s' if len(missing) > 1 else ''} {ranks} did not reach "
            f"monitored_barrier #{number} within {round(timeout_s * 1000)} ms"
        )
    for r in range(1, group.size):
        store.delete_key(f"{prefix}/arrived/{r}")
    store.set(f"{prefix}/released", b"1")
    if number > 1:  # every rank has passed the previous barrier: its release key is unused
        store.delete_key(f"monitored_barrier/{number - 1}/released")


def _missing_ranks(store, prefix: str, world: int, timeout_s: float, all_of_them: bool):
    deadline = time.monotonic() + timeout_s
    missing = []
    for r in range(1, world):
        key = f"{prefix}/arrived/{r}"
        left = deadline - time.monotonic()
        arrived = store.check([key]) if left <= 0 else _arrives(store, key, left)
        if not arrived:
            missing.append(r)
            if not all_of_them:
                break
    return missing


def _arrives(store, key: str, timeout_s: float) -> bool:
    try:
        store.wait([key], timeout_s)
    except Exception:  # noqa: BLE001 - a timeout; an unreachable store fails check() below
        return store.check([key])
    return True


def _wait_for(store, key: str, timeout_s: float, what: str) -> None:
    if not _arrives(store, key, timeout_s):
        raise RuntimeError(
            f"pscore backend: monitored_barrier timed out after {round(timeout_s * 1000)} ms "
            f"waiting for {what} (rank 0 reports which ranks did not arrive)"
        )
