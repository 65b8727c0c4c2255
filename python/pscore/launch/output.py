"""The ranks' output under ``pscore-run``: each rank's stdout and stderr are read through pipes a
line at a time and copied to the launcher's own streams with a ``[rankN]: `` prefix (``[psN]: ``
for parameter-server tasks; so the
lines of several ranks never interleave mid-line), to per-rank log files (``--log-dir``), and
the last lines of each stderr are kept for the failure summary."""

from __future__ import annotations

import collections
import os
import sys
import threading
import time

__all__ = ["Console", "RankOutput", "parse_std_streams", "streams_for"]

STDOUT, STDERR = 1, 2  # torchrun's Std bits: 1 = stdout, 2 = stderr, 3 = both
TAIL_LINES = 12
_MAX_LINE_BYTES = 1 << 16  # a longer line is copied in pieces of this size, each prefixed


def parse_std_streams(text: str, option: str) -> dict | int:
    """torchrun's ``--tee`` / ``--redirects`` value: ``0..3`` for every local rank, or
    ``local_rank:value,...``. Returns the int, or a dict local rank -> int (missing: 0)."""

    def bits(value: str) -> int:
        if value.strip() not in ("0", "1", "2", "3"):
            raise ValueError(
                f"{option} {text!r}: expected 0 (none), 1 (stdout), 2 (stderr) or 3 (both), "
                "or local_rank:value pairs such as 0:3,1:2"
            )
        return int(value)

    if ":" not in text:
        return bits(text)
    per_rank = {}
    for pair in text.split(","):
        rank, sep, value = pair.partition(":")
        if not sep or not rank.strip().isdigit():
            raise ValueError(f"{option} {text!r}: {pair!r} is not local_rank:value")
        per_rank[int(rank)] = bits(value)
    return per_rank


def streams_for(spec: dict | int, local_rank: int) -> int:
    return spec.get(local_rank, 0) if isinstance(spec, dict) else spec


class Console:
    """The launcher's stdout and stderr, shared by every rank's copier and the launcher's own
    messages: one lock, so each write is one whole line."""

    def __init__(self):
        self.lock = threading.Lock()
        self.streams = {STDOUT: sys.stdout, STDERR: sys.stderr}

    def write(self, which: int, data: bytes) -> None:
        stream = self.streams[which]
        with self.lock:
            raw = getattr(stream, "buffer", None)
            if raw is None:  # a text-only replacement of sys.stdout / sys.stderr
                stream.write(data.decode(errors="replace"))
                stream.flush()
                return
            stream.flush()
            raw.write(data)
            raw.flush()

    def message(self, text: str) -> None:
        """A line (or lines) of the launcher's own, on stderr."""
        self.write(STDERR, (text.rstrip("\n") + "\n").encode(errors="replace"))


class _Copier(threading.Thread):
    """Copies one pipe until EOF: prefixed lines to the console, plain lines to a log file."""

    def __init__(self, pipe, prefix: bytes, console: Console | None, which: int, log, tail):
        super().__init__(daemon=True, name=f"pscore-run output {prefix.decode()}")
        self.pipe, self.prefix, self.console, self.which = pipe, prefix, console, which
        self.log, self.tail = log, tail

    def run(self) -> None:
        try:
            for read in iter(lambda: self.pipe.readline(_MAX_LINE_BYTES), b""):
                line = read if read.endswith(b"\n") else read + b"\n"
                if self.console is not None:
                    try:
                        self.console.write(self.which, self.prefix + line)
                    except OSError:  # the launcher's stream is gone (a closed pipe): keep
                        self.console = None  # draining so the rank never blocks on output
                if self.log is not None:
                    self.log.write(line)
                    self.log.flush()
                if self.tail is not None:
                    self.tail.append(line.decode(errors="replace").rstrip("\n"))
        finally:
            self.pipe.close()
            if self.log is not None:
                self.log.close()


class RankOutput:
    """One rank's two pipes and where they go. ``to_console`` and ``to_files`` are Std bits;
    ``kind`` names it in prefixes and log directories: "rank" (``[rank3]: ``, rank_3/) or "ps"
    (``[ps0]: ``, ps_0/)."""

    def __init__(
        self,
        rank: int,
        proc,
        console: Console,
        to_console: int,
        to_files: int,
        log_dir,
        kind: str = "rank",
    ):
        self.tail: collections.deque = collections.deque(maxlen=TAIL_LINES)  # of stderr
        self.log_paths: list[str] = []
        self.copiers = []
        prefix = f"[{kind}{rank}]: ".encode()
        for which, pipe in ((STDOUT, proc.stdout), (STDERR, proc.stderr)):
            log = None
            if to_files & which:
                os.makedirs(os.path.join(log_dir, f"{kind}_{rank}"), exist_ok=True)
                name = "stdout.log" if which == STDOUT else "stderr.log"
                path = os.path.join(log_dir, f"{kind}_{rank}", name)
                log = open(path, "wb")  # noqa: SIM115 - closed by the copier at EOF
                self.log_paths.append(path)
            out = console if to_console & which else None
            tail = self.tail if which == STDERR else None
            self.copiers.append(_Copier(pipe, prefix, out, which, log, tail))

    def start(self) -> None:
        for c in self.copiers:
            c.start()

    def join(self, deadline: float) -> None:
        """Waits for both pipes to reach EOF, at most until ``deadline`` (time.monotonic()): a
        process the rank started may hold them open after the rank is gone."""
        for c in self.copiers:
            c.join(max(0.0, deadline - time.monotonic()))
