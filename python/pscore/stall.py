"""Stall reports (docs/observability.md): a low-rate watchdog thread asks every registered source
(process groups, PS clients, served PS shards, rendezvous waits) what it has in flight and, once
an operation has waited past its threshold, logs through the ``pscore`` logger, once per
operation, what it waits for. SIGUSR1 prints every source's in-flight operations to stderr.

The signal is caught in C (``_C.install_signal_pipe``: the handler writes a byte to a pipe) and
answered by a thread blocked reading that pipe, so the dump comes even while the main thread is
blocked in C++ with the GIL released, where a Python signal handler would not run. pscore takes
SIGUSR1 only while it has its default disposition (a handler installed before is left alone,
and one installed later replaces pscore's) and not at all with PSCORE_SIGUSR1_DUMP=0.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import itertools
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator
from typing import Protocol

from . import _C, _config

__all__ = [
    "LOG",
    "InFlight",
    "Source",
    "dump",
    "format_bytes",
    "format_ranks",
    "install_signal_dump",
    "register",
    "threshold",
    "unregister",
    "waiting",
]

LOG = logging.getLogger("pscore")

# The watchdog wakes every fifth of the smallest threshold of its sources, within these bounds
# (a group's progress is published to its store at the same pace).
_MIN_PERIOD_S = 0.1
_MAX_PERIOD_S = 2.0
# At exit, how long to wait for a watchdog that is inside a store call (a store whose host left).
_EXIT_JOIN_S = 0.5


@dataclasses.dataclass
class InFlight:
    """One operation in flight. `key` names it for its whole wait (reported once); `line` is
    what the SIGUSR1 dump prints; `report` builds the stall message (it may ask a store or the
    operation itself; None when the wait ended meanwhile)."""

    key: Hashable
    waited_s: float
    threshold_s: float  # 0: never reported
    line: str
    report: Callable[[], str | None]


class Source(Protocol):
    threshold_s: float  # its operations' threshold; the watchdog wakes five times as often

    def in_flight(self) -> list[InFlight]:
        """What is in flight now; cheap, no I/O (the dump calls it too)."""

    def publish(self) -> None:
        """Called by the watchdog on every wake-up (a group publishes its progress)."""


def threshold(timeout_s: float | None) -> float:
    """Seconds after which a wait is reported: PSCORE_STALL_WARNING, else half the operation's
    timeout; 0 means never."""
    configured = _config.STALL_WARNING.get()
    if configured is not None:
        return configured
    return 0.5 * timeout_s if timeout_s else 0.0


def format_bytes(n: int) -> str:
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n} B"


def format_ranks(noun: str, ranks: list[int]) -> str:
    """'rank 2' or 'ranks 2, 3'."""
    return f"{noun}{'s' if len(ranks) != 1 else ''} {', '.join(map(str, ranks))}"


class _Watchdog:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forgets every source and thread (a forked child has none of the parent's threads)."""
        self.sources: weakref.WeakSet = weakref.WeakSet()
        self.wake = threading.Condition()
        self.reported: set[Hashable] = set()
        self.thread: threading.Thread | None = None
        self.stopping = False

    def add(self, source: Source) -> None:
        with self.wake:
            self.sources.add(source)
            if self.thread is None and not self.stopping:
                self.thread = threading.Thread(target=self.run, name="pscore-stall", daemon=True)
                self.thread.start()
            self.wake.notify()

    def snapshot(self) -> list[Source]:
        with self.wake:
            return list(self.sources)

    def run(self) -> None:
        while True:
            with self.wake:
                while not self.sources and not self.stopping:
                    self.wake.wait()
                if self.stopping:
                    return
            period = self.check()
            with self.wake:
                if not self.stopping:
                    self.wake.wait(period)

    def check(self) -> float:
        """Publishes, reports what passed its threshold; returns how long to sleep."""
        shortest = _MAX_PERIOD_S * 5
        seen = set()
        for source in self.snapshot():
            if source.threshold_s > 0:
                shortest = min(shortest, source.threshold_s)
            try:
                source.publish()
                # with reports off (threshold 0) only the dump asks what is in flight
                items = source.in_flight() if source.threshold_s > 0 else []
            except Exception as e:  # noqa: BLE001 - a broken source must not stop the others
                LOG.debug("pscore: stall watchdog: %s failed: %s", source, e)
                continue
            for item in items:
                seen.add(item.key)
                self.maybe_report(item)
        self.reported &= seen
        return min(_MAX_PERIOD_S, max(_MIN_PERIOD_S, shortest / 5))

    def maybe_report(self, item: InFlight) -> None:
        if item.threshold_s <= 0 or item.waited_s < item.threshold_s or item.key in self.reported:
            return
        try:
            message = item.report()
        except Exception as e:  # noqa: BLE001 - say what is known rather than nothing
            message = f"pscore: {item.line} (who it waits for is unknown: {e})"
        if message is None:
            return
        self.reported.add(item.key)
        LOG.warning(message)

    def stop(self) -> None:
        with self.wake:
            self.stopping = True
            self.wake.notify()
            thread = self.thread
        if thread is not None:
            thread.join(timeout=_EXIT_JOIN_S)


_watchdog = _Watchdog()
atexit.register(_watchdog.stop)  # before the interpreter stops daemon threads


def unregister(source: Source) -> None:
    with _watchdog.wake:
        _watchdog.sources.discard(source)


def register(source: Source) -> None:
    """Watches `source` until it is garbage collected (the registry holds it weakly) and takes
    SIGUSR1 for the dump (install_signal_dump)."""
    install_signal_dump()
    _watchdog.add(source)


class _Wait:
    """A blocking wait as a source of its own (waiting())."""

    def __init__(self, what: str, threshold_s: float, report: Callable[[float], str | None]):
        self.what = what
        self.threshold_s = threshold_s
        self.started = time.monotonic()
        self.key = ("wait", next(_wait_ids))
        self._report = report

    def publish(self) -> None:
        pass

    def in_flight(self) -> list[InFlight]:
        waited = time.monotonic() - self.started
        return [
            InFlight(
                self.key,
                waited,
                self.threshold_s,
                f"{self.what}, waiting {waited:.1f} s",
                lambda: self._report(waited),
            )
        ]


_wait_ids = itertools.count()


@contextlib.contextmanager
def waiting(what: str, timeout_s: float, report: Callable[[float], str | None]) -> Iterator[None]:
    """Watches the blocking wait in the with-block: past threshold(timeout_s), logs report(waited
    seconds) once; the dump lists `what`."""
    wait = _Wait(what, threshold(timeout_s), report)
    register(wait)
    try:
        yield
    finally:
        unregister(wait)


def dump() -> str:
    """Every source's in-flight operations, one per line (what SIGUSR1 prints)."""
    lines = []
    for source in _watchdog.snapshot():
        try:
            lines += [item.line for item in source.in_flight()]
        except Exception as e:  # noqa: BLE001 - the dump lists what it can
            lines.append(f"{source}: {e}")
    head = f"pscore: pid {os.getpid()}: {len(lines)} operation(s) in flight"
    return "\n".join([head + (":" if lines else "")] + [f"  {line}" for line in lines]) + "\n"


_signal_lock = threading.Lock()
_signal: dict[str, int | None] = {"fd": None}  # the pipe's read end once decided; -1: not taken


def install_signal_dump() -> bool:
    """Has SIGUSR1 print dump() to stderr (see the module doc for when pscore takes the signal);
    True when installed. Idempotent."""
    with _signal_lock:
        if _signal["fd"] is None:
            fd = -1
            if _config.SIGUSR1_DUMP.get():
                fd = _C.install_signal_pipe(signal.SIGUSR1)
            _signal["fd"] = fd
            if fd >= 0:
                threading.Thread(
                    target=_answer_signals, args=(fd,), name="pscore-sigusr1", daemon=True
                ).start()
        return _signal["fd"] >= 0


def _answer_signals(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 64):
                return
        except InterruptedError:
            continue
        except OSError:
            return
        sys.stderr.write(dump())
        sys.stderr.flush()


def _after_fork_in_child() -> None:
    """A forked child has no watchdog or signal thread, and shares the parent's pipe: SIGUSR1
    gets its default disposition back until the child registers a source, which takes it with a
    pipe of its own."""
    _watchdog.reset()
    if _signal["fd"] is not None and _signal["fd"] >= 0:
        with contextlib.suppress(ValueError):  # forked from a thread other than the main one
            signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    _signal["fd"] = None


os.register_at_fork(after_in_child=_after_fork_in_child)
