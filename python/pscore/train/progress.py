"""The chief's progress bar (tqdm on stderr: step, loss, samples/s) and the Trainer's printed
lines, which go around the bar. On a terminal the bar redraws in place; on a pipe (pscore-run,
a log file) each redraw becomes one whole line, at most one a second, so prefixed output stays
one line per record."""

from __future__ import annotations

import sys
import time
from typing import Any

__all__ = ["Progress", "wanted"]

_PIPE_INTERVAL_S = 1.0  # the least time between two bar lines on a pipe


def _is_terminal(stream: Any) -> bool:
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except ValueError:  # a closed stream
        return False


def wanted(progress: bool | None, is_chief: bool) -> bool:
    """The bar is drawn on the chief only: always with progress=True, never with False, and
    with None when stderr is a terminal."""
    if progress is not None and not isinstance(progress, bool):
        raise TypeError(f"progress must be None (auto), True or False, not {progress!r}")
    if not is_chief:
        return False
    return _is_terminal(sys.stderr) if progress is None else progress


class _Lines:
    """A text stream for tqdm on a pipe: every carriage-return redraw becomes one line; blank
    redraws (tqdm clearing the bar) are dropped."""

    def __init__(self, stream: Any):
        self.stream, self.pending = stream, ""

    def write(self, text: str) -> None:
        *done, self.pending = (self.pending + text.replace("\r", "\n")).split("\n")
        lines = [line.rstrip() for line in done if line.strip()]
        if lines:
            self.stream.write("".join(f"{line}\n" for line in lines))

    def flush(self) -> None:
        self.stream.flush()


class Progress:
    """A bar over `total` global steps from `initial`, or nothing when not enabled."""

    def __init__(self, enabled: bool, total: int, initial: int, workers: int):
        self.bar: Any = None
        self.workers = workers
        self.started, self.samples = time.monotonic(), 0
        if enabled:
            from tqdm import tqdm

            terminal = _is_terminal(sys.stderr)
            self.bar = tqdm(
                total=total,
                initial=initial,
                unit="step",
                file=sys.stderr if terminal else _Lines(sys.stderr),
                mininterval=0.1 if terminal else _PIPE_INTERVAL_S,
                ncols=None if terminal else 100,
                dynamic_ncols=terminal,
            )

    def update(self, global_step: int, loss: float | None, samples: int) -> None:
        """After a step: `samples` this worker trained on in it; the rate shown is the job's,
        estimated as this worker's times the workers."""
        if self.bar is None:
            return
        self.samples += samples
        rate = self.samples * self.workers / max(time.monotonic() - self.started, 1e-9)
        postfix = {"samples/s": f"{rate:.0f}"}
        if loss is not None:
            postfix["loss"] = f"{loss:.4f}"
        self.bar.set_postfix(postfix, refresh=False)
        self.bar.update(global_step - self.bar.n)

    def write(self, line: str) -> None:
        """Prints a line on stdout without breaking the bar."""
        if self.bar is None:
            print(line, flush=True)
        else:
            self.bar.write(line, file=sys.stdout)
            sys.stdout.flush()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
