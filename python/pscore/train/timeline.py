"""The Trainer's timeline: a per-rank recorder of its phases (compute, communication, waits, each
inside its step), written as a Chrome trace that Perfetto (ui.perfetto.dev) and chrome://tracing
load, and merged by the chief into one file for the whole job.

Recording is one list append per event: a span takes perf_counter_ns() when it opens and appends
(name, category, lane, start, end, args) when it closes. A Timeline that does not record (no
path) only adds the bytes of communication spans to `comm_bytes` (what TensorBoard's bytes/s
reads) and hands out a shared no-op span, so instrumented code costs next to nothing.

Lanes are the trace's threads: lane 1 is the training loop ("train"), where every step's events
nest (forward, backward, update > communication, waits, optimizer); an asynchronous operation
(an allreduce bucket, a parameter-server table's push) gets a lane of its own, with one event
from its start to the moment the training loop saw it finished.

The file is the Trace Event Format's JSON object form: "traceEvents" holds ph "X" complete events
(ts and dur in microseconds) and ph "M" metadata naming each process ("rank N (chief)") and lane.
A rank is process id rank + 1 (Perfetto treats pid 0 as the kernel's idle task). Ranks are placed
on one time axis by their system clocks (time.time_ns at the recorder's start), so ranks on
different machines line up as well as their clocks agree (NTP: typically within a millisecond)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

__all__ = [
    "COMMUNICATION",
    "COMPUTE",
    "STEP",
    "TRAIN_LANE",
    "UPDATE",
    "WAIT",
    "Timeline",
    "per_rank_path",
    "trace",
    "write",
]

# Event categories ("cat"). step: the training loop's top-level events (step, join step, setup,
# evaluate, checkpoint, finish); inside them compute (forward, backward, optimizer), update (the
# strategy's update, holding communication, waits and the optimizer), communication (an
# allreduce bucket, a table's push/pull, args.bytes: the data sent plus received) and wait
# (for an asynchronous operation, a sync round, the other workers).
STEP, COMPUTE, UPDATE, COMMUNICATION, WAIT = "step", "compute", "update", "communication", "wait"
TRAIN_LANE = 1  # the training loop's lane (thread id); tid 0 is avoided as pid 0 is

_now = time.perf_counter_ns


class _Span:
    """An open span: appends its event when it closes."""

    __slots__ = ("args", "cat", "events", "lane", "name", "start")

    def __init__(self, events: list, name: str, cat: str, lane: int, args: dict | None):
        self.events, self.name, self.cat, self.lane, self.args = events, name, cat, lane, args

    def __enter__(self) -> _Span:
        self.start = _now()
        return self

    def __exit__(self, *exc: object) -> None:
        self.events.append((self.name, self.cat, self.lane, self.start, _now(), self.args))


class _NoSpan:
    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


_NO_SPAN = _NoSpan()


class Timeline:
    """One rank's recorder. `record`: keep events (else only count communication bytes).

    span(name, cat, lane, nbytes, **args)   a context manager timing its block
    add(name, cat, start_ns, lane, nbytes)  an event from start_ns (a now() taken earlier) to now
    wait(work, name, wait_name, ...)        waits for an asynchronous communication, adding both
    lane(name)                              the lane id of a named lane, made on first use
    """

    now = staticmethod(_now)

    def __init__(self, rank: int, record: bool):
        self.rank = rank
        self._kept: list = []  # every event recorded so far
        self.events: list | None = self._kept if record else None  # None while not recording
        self.comm_bytes = 0  # bytes of every communication span so far (sent + received)
        self.lanes = {"train": TRAIN_LANE}
        self.wall_origin_ns, self.origin_ns = time.time_ns(), _now()

    @property
    def recording(self) -> bool:
        return self.events is not None

    @recording.setter
    def recording(self, on: bool) -> None:
        """Pauses (False) or resumes recording; the events recorded so far are kept."""
        self.events = self._kept if on else None

    def lane(self, name: str) -> int:
        return self.lanes.setdefault(name, len(self.lanes) + 1)

    def span(self, name: str, cat: str, lane: int = TRAIN_LANE, nbytes: int = 0, **args: Any):
        self.comm_bytes += nbytes
        if self.events is None:
            return _NO_SPAN
        if nbytes:
            args["bytes"] = nbytes
        return _Span(self.events, name, cat, lane, args or None)

    def add(self, name: str, cat: str, start_ns: int, lane: int, nbytes: int = 0) -> None:
        self.comm_bytes += nbytes
        if self.events is not None:
            args = {"bytes": nbytes} if nbytes else None
            self.events.append((name, cat, lane, start_ns, _now(), args))

    def wait(
        self, work: Any, name: str, wait_name: str, start_ns: int, lane: int, nbytes: int
    ) -> None:
        """Waits for `work`, the asynchronous communication `name` started at start_ns (a now()
        taken then), in a `wait_name` span; then adds `name` on its own `lane`, from its start
        to now."""
        if self.events is None:
            work.wait()
            self.comm_bytes += nbytes
            return
        with self.span(wait_name, WAIT):
            work.wait()
        self.add(name, COMMUNICATION, start_ns, lane, nbytes)

    def payload(self, label: str) -> dict:
        """This rank's events as JSON-ready data (what the chief merges): times in ns from
        this recorder's start, and the system clock at that start."""
        origin = self.origin_ns
        return {
            "rank": self.rank,
            "label": label,
            "wall_origin_ns": self.wall_origin_ns,
            "lanes": {str(tid): name for name, tid in self.lanes.items()},
            "events": [
                [name, cat, lane, start - origin, end - origin, args]
                for name, cat, lane, start, end, args in self._kept
            ],
        }


def trace(payloads: list[dict], other: dict | None = None) -> dict:
    """The Trace Event Format object for some ranks' payloads, on one time axis whose zero is
    the earliest rank's start; every lane's events in time order, parents before children."""
    zero = min(p["wall_origin_ns"] for p in payloads)
    events: list[dict] = []
    for p in sorted(payloads, key=lambda p: p["rank"]):
        pid, shift = p["rank"] + 1, p["wall_origin_ns"] - zero
        events.append(_meta("process_name", pid, None, {"name": p["label"]}))
        events.append(_meta("process_sort_index", pid, None, {"sort_index": p["rank"]}))
        used = {e[2] for e in p["events"]} | {TRAIN_LANE}
        for tid, lane_name in sorted(p["lanes"].items(), key=lambda kv: int(kv[0])):
            if int(tid) not in used:
                continue
            events.append(_meta("thread_name", pid, int(tid), {"name": lane_name}))
            events.append(_meta("thread_sort_index", pid, int(tid), {"sort_index": int(tid)}))
        ordered = sorted(p["events"], key=lambda e: (e[2], e[3], -e[4]))
        for name, cat, lane, start, end, args in ordered:
            event = {
                "name": name,
                "cat": cat,
                "ph": "X",
                "pid": pid,
                "tid": lane,
                "ts": (start + shift) / 1000,
                "dur": (end - start) / 1000,
            }
            if args:
                event["args"] = args
            events.append(event)
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": dict(other or {})}


def _meta(name: str, pid: int, tid: int | None, args: dict) -> dict:
    event = {"name": name, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        event["tid"] = tid
    return event


def per_rank_path(path: str, rank: int) -> str:
    """Where rank `rank` writes its own trace next to the job's: trace.json -> trace.rank1.json."""
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext or '.json'}"


def write(path: str, data: dict) -> None:
    """Writes a trace atomically (a reader never sees half a file)."""
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(data, f, separators=(",", ":"))
    os.replace(tmp, path)
