"""Writing the job's timeline at the end of fit: every worker writes its own trace
(trace.rankN.json, on its own filesystem) and sends its events to the chief over the job's
collectives (a gather of JSON bytes: the ranks need not share a filesystem), and the chief
writes the merged trace of every rank at the path the user gave. A collective: every worker
calls write_job_trace at the same point. In an elastic job the events go through the job's
store instead, and the lead (the chief, or with it gone the lowest worker left) merges those
of every worker that got there; a gone worker's are missing."""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from .. import collectives
from .agreement import gather_int
from .timeline import Timeline, per_rank_path, trace, write

__all__ = ["gather_payloads", "write_job_trace"]


def _encode(payload: dict) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def gather_payloads(payload: dict) -> list[dict] | None:
    """Every worker's payload on the chief (by rank), None on the others."""
    if not collectives.is_initialized() or collectives.get_world_size() == 1:
        return [payload]
    data = np.frombuffer(_encode(payload), dtype=np.uint8)
    sizes = gather_int(data.size)
    mine = np.zeros(max(sizes), dtype=np.uint8)
    mine[: data.size] = data
    chief = collectives.get_rank() == 0
    every = [np.empty_like(mine) for _ in sizes] if chief else None
    collectives.gather(mine, every, dst=0)
    if every is None:
        return None
    return [json.loads(e[:size].tobytes()) for e, size in zip(every, sizes)]


def _payloads_through_store(payload: dict, rank: int, elastic: Any) -> list[dict] | None:
    """Elastic: the payloads of every worker not gone on the lead (by rank), None elsewhere."""
    elastic.post("timeline", rank, _encode(payload))
    if not elastic.leads(rank):
        return None
    every = elastic.collect("timeline", "send its timeline")
    return [json.loads(every[r]) for r in sorted(every)]


def write_job_trace(
    timeline: Timeline, path: str, label: str, other: dict | None = None, elastic: Any = None
) -> None:
    """This rank's trace at per_rank_path(path, rank); the merged trace at `path` on the chief
    (elastic: on the lead). The gather comes first: a worker that cannot write its file fails
    after it, never leaving the others waiting in it."""
    payload = timeline.payload(label)
    if elastic is None:
        payloads = gather_payloads(payload)
    else:
        payloads = _payloads_through_store(payload, timeline.rank, elastic)
    write(per_rank_path(path, timeline.rank), trace([payload], other))
    if payloads is not None:
        write(path, trace(payloads, other))
