"""Collecting the results the benchmark's rank processes put on a queue, while watching them and
any peer job they take turns with: a rank or peer that dies ends the wait with an error naming
it instead of a hang."""

from __future__ import annotations

import queue as queue_module
import time
from collections.abc import Callable

__all__ = ["gather_results"]


def gather_results(queue, procs: list, check: Callable[[], None], timeout_s: float) -> list:
    """One item per process in `procs`, in arrival order. `check` raises if the peer failed."""
    deadline = time.monotonic() + timeout_s
    items = []
    while len(items) < len(procs):
        try:
            items.append(queue.get(timeout=0.5))
            continue
        except queue_module.Empty:
            pass
        check()
        for rank, p in enumerate(procs):
            if p.exitcode not in (None, 0):
                raise RuntimeError(
                    f"benchmark rank {rank} exited with code {p.exitcode} (its error is above)"
                )
        if time.monotonic() > deadline:
            raise TimeoutError(f"the benchmark ranks sent no results within {timeout_s:g} s")
    return items
