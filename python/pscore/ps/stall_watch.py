"""The stall inspector's view of the parameter server (pscore.stall): a client's requests that
wait on a shard, and a served shard's sync rounds and staleness bounds that wait for workers."""

from __future__ import annotations

import json
import time
import weakref

from .. import stall

__all__ = ["ClientWatch", "ServerWatch"]


def _workers(ws: list[int]) -> str:
    return stall.format_ranks("worker", ws) if ws else "none"


class ClientWatch:
    """Held by its PSClient, which it refers to weakly; names a request's shards that have not
    answered, its type and table, and the table's round for sync and ssp tables."""

    def __init__(self, client, timeout_s: float):
        self._client = weakref.ref(client)
        self.threshold_s = stall.threshold(timeout_s)
        stall.register(self)

    def publish(self) -> None:
        pass

    def in_flight(self) -> list[stall.InFlight]:
        client = self._client()
        if client is None:
            return []
        with client._inflight_lock:
            works = list(client._inflight)
        now = time.monotonic()
        return [
            stall.InFlight(
                key=(id(self), id(w), w.started),
                waited_s=now - w.started,
                threshold_s=self.threshold_s,
                line=f"worker {client.worker_id} {w.what}: waiting {now - w.started:.1f} s",
                report=lambda w=w: self._report(client, w),
            )
            for w in works
            if not w.is_completed()
        ]

    def _report(self, client, work) -> str | None:
        shards = work._handle.pending_shards()
        if not shards:
            return None
        info = client._tables.get(work._table) if work._table else None
        step = ""
        if info is not None and info.consistency in ("sync", "ssp"):
            noun = "round" if info.consistency == "sync" else "clock"
            step = f" ({info.consistency} {noun} {client._cpp.table_step(work._table)})"
        return (
            f"pscore: worker {client.worker_id} {work.what}{step} has waited "
            f"{time.monotonic() - work.started:.1f} s on {stall.format_ranks('shard', shards)}"
        )


class ServerWatch:
    """Held by its PServer; names the workers a table's open sync round waits for, or the
    slowest workers an ssp table's parked pushes wait on."""

    def __init__(self, native, shard: int, timeout_s: float):
        self._native = native
        self._shard = shard
        self.threshold_s = stall.threshold(timeout_s)
        stall.register(self)

    def publish(self) -> None:
        pass

    def in_flight(self) -> list[stall.InFlight]:
        if not self._native.running:
            return []
        out = []
        for t in json.loads(self._native.tables_status_json()):
            if t["waited_ms"] <= 0:
                continue
            head, rest, key = self._describe(t)
            waited = t["waited_ms"] / 1e3
            what = f"ps shard {self._shard}: {head} has waited {waited:.1f} s; {rest}"
            out.append(
                stall.InFlight(
                    key=(id(self), t["table"], *key),
                    waited_s=waited,
                    threshold_s=self.threshold_s,
                    line=what,
                    report=lambda what=what: f"pscore: {what}",
                )
            )
        return out

    @staticmethod
    def _describe(t: dict) -> tuple[str, str, tuple]:
        """What waits, what it waits for, and what identifies the wait."""
        name = t["table"]
        if t["consistency"] == "sync":
            late = t["waiting_for"]
            verb = "has" if len(late) == 1 else "have"
            return (
                f"sync round {t['round']} of table {name!r}",
                f"{_workers(late)} {verb} not pushed (pushed: {_workers(t['pushed'])}; "
                f"finished: {_workers(t['done'])})",
                ("sync", t["round"]),
            )
        active = [w for w, c in enumerate(t["clocks"]) if w not in t["done"]]
        slowest = min((t["clocks"][w] for w in active), default=0)
        behind = [w for w in active if t["clocks"][w] == slowest]
        return (
            f"ssp table {name!r}",
            f"it holds the pushes of {_workers(t['parked'])} for the slowest "
            f"{_workers(behind)} (clock {slowest}; clocks {t['clocks']})",
            ("ssp", slowest),
        )
