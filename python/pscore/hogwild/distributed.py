"""Distributed Hogwild (SINGA): each machine runs a Hogwild group on its own shared tables, and
one process per machine averages those tables with the other machines' every `sync_every`
local steps, over pscore's collectives.

Averaging never stops the local workers: the averaging process snapshots a table, averages the
snapshot with the other machines (all_reduce, op="avg") and adds (average - snapshot) back into
the live table with the lock-free axpy kernel, so updates made meanwhile are kept.

Every machine must run the same sequence of collectives. Each round therefore starts with a
one-number all_reduce of "has any machine finished?": once one has, no machine starts another
averaging round, and each does a single final average after its own workers are done.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .table import SharedTable

__all__ = ["DistributedHogwild", "average_tables"]


def _table_list(tables: Any) -> list:
    """A sequence of SharedTables, or a SharedParameters (its tables, in parameter order)."""
    inner = getattr(tables, "tables", None)
    return list(inner.values()) if isinstance(inner, dict) else list(tables)


def _default_all_reduce() -> Callable:
    import pscore

    fn = getattr(pscore, "all_reduce", None)
    if fn is None:
        raise RuntimeError("pscore.all_reduce is not available in this build; pass all_reduce=")
    return fn


def _reduce(all_reduce: Callable, arr: np.ndarray, group: Any) -> None:
    work = all_reduce(arr, op="avg") if group is None else all_reduce(arr, op="avg", group=group)
    if work is not None and hasattr(work, "wait"):
        work.wait()


def average_tables(
    tables: Sequence[SharedTable],
    all_reduce: Callable | None = None,
    *,
    group: Any = None,
    include_state: bool = False,
    locked: bool = False,
) -> None:
    """Averages each table with the same table on every other member of `group` (pscore's
    default group when None), keeping local updates made while the collective ran.
    include_state also averages the optimizer state (Adagrad sums, Adam moments); locked adds
    the correction under the row locks (use it when the local workers update with locked=True)."""
    reduce_fn = all_reduce or _default_all_reduce()
    for t in _table_list(tables):
        arrays = [t.numpy()]
        if include_state:
            arrays += [t.state(n) for n in _state_names(t)]
        for i, live in enumerate(arrays):
            snapshot = live.copy()
            averaged = snapshot.copy()
            _reduce(reduce_fn, averaged, group)
            np.subtract(averaged, snapshot, out=averaged)
            if i == 0:
                t.axpy(1.0, averaged, locked=locked)
            else:
                np.add(live, averaged, out=live)  # state arrays have no kernel entry


def _state_names(t: SharedTable) -> tuple:
    from .table import STATE_NAMES

    return STATE_NAMES[t.optimizer]


class DistributedHogwild:
    """Periodic cross-machine averaging of a Hogwild group's tables (a sequence of
    SharedTables, or a SharedParameters); one per machine, in the process that joined pscore's
    process group (train(sync=...) drives it).

    sync_every: local update calls (on `clock`, the first table by default, counted over all
    local workers) between averaging rounds. all_reduce: the collective (pscore.all_reduce when
    None; any callable all_reduce(array, op="avg"[, group=]) that averages in place works).
    locked: apply the averaging corrections under the row locks, for workers that update with
    locked=True (then no update is lost and the arithmetic can be checked exactly).
    """

    def __init__(
        self,
        tables: Sequence[SharedTable],
        sync_every: int,
        *,
        all_reduce: Callable | None = None,
        group: Any = None,
        clock: SharedTable | None = None,
        include_state: bool = False,
        locked: bool = False,
    ):
        tables = _table_list(tables)
        if not tables:
            raise ValueError("DistributedHogwild needs at least one SharedTable")
        if not isinstance(sync_every, int) or sync_every < 1:
            raise ValueError(f"sync_every must be an int >= 1, got {sync_every!r}")
        self.tables = tables
        self.sync_every = sync_every
        self.group = group
        self.include_state = include_state
        self.locked = locked
        self._all_reduce = all_reduce or _default_all_reduce()
        self._clock = clock or self.tables[0]
        self._next = self._clock.update_count + sync_every
        self._stopped = False
        self._finished = False
        self.rounds = 0  # averaging rounds done, the final one included

    def maybe_sync(self) -> bool:
        """Runs a round when the clock has passed the next multiple of sync_every; True if the
        tables were averaged."""
        if self._stopped or self._clock.update_count < self._next:
            return False
        self._next = self._clock.update_count + self.sync_every
        return self._round(done=False)

    def finish(self) -> None:
        """Call once the local workers are done: ends the rounds and does the final average."""
        if self._finished:
            return
        self._finished = True
        if not self._stopped:
            self._round(done=True)
        self._average()

    def _round(self, done: bool) -> bool:
        flag = np.array([1.0 if done else 0.0])
        _reduce(self._all_reduce, flag, self.group)
        if flag[0] > 0:
            self._stopped = True
            return False
        self._average()
        return True

    def _average(self) -> None:
        average_tables(
            self.tables,
            self._all_reduce,
            group=self.group,
            include_state=self.include_state,
            locked=self.locked,
        )
        self.rounds += 1
