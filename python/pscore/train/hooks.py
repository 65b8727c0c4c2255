"""Callbacks the Trainer runs (TF's SessionRunHook idea). Subclass Hook and override what you
need; a hook stops training with trainer.request_stop(reason).

Stopping in lockstep strategies (allreduce, ps-sync, hybrid) must be agreed: a worker that left
the loop alone would leave the others waiting in a collective. A hook whose stop decision may
differ between workers (it looks at this worker's loss) keeps `local_stop = True`; the Trainer
then combines every worker's stop request at each step boundary (one max all-reduce of two
integers) and all stop at the same step. A hook that decides the same on every worker (a
function of the global step) sets `local_stop = False` and costs nothing."""

from __future__ import annotations

import math
import time
from typing import Any

from .checks import check_int

__all__ = ["EvaluationHook", "Hook", "LoggingHook", "NanLossHook", "StopAtStepHook"]


class Hook:
    """Base of the Trainer's callbacks: each method does nothing until overridden."""

    local_stop = True  # its request_stop may come on some workers only (see the module doc)

    def begin(self, trainer: Any) -> None:
        """fit() starts (after setup and any resume)."""

    def after_step(self, trainer: Any, loss: float | None) -> None:
        """A step ended; trainer.global_step counts it. loss is None for a join step (this
        worker had no batch left in the epoch)."""

    def after_epoch(self, trainer: Any, epoch: int, metrics: dict) -> None:
        """An epoch ended; metrics: its mean training loss and, with eval_data, evaluate()'s."""

    def after_checkpoint(self, trainer: Any, path: str) -> None:
        """The chief wrote a checkpoint at `path` (called on the chief only)."""

    def end(self, trainer: Any, history: list) -> None:
        """fit() ends: the model holds the final weights."""


class LoggingHook(Hook):
    """Every `every_steps` steps prints `step S  loss L  samples/s R` (R: the job's rate since
    the last line, estimated as this worker's times the workers); on the chief only unless
    all_workers, then each line starts with `worker r:`."""

    local_stop = False

    def __init__(self, every_steps: int = 100, all_workers: bool = False):
        self.every_steps = check_int("every_steps", every_steps, 1)
        self.all_workers = all_workers
        self._since: tuple[float, int] = (0.0, 0)

    def begin(self, trainer: Any) -> None:
        self._since = (time.monotonic(), trainer.samples)

    def after_step(self, trainer: Any, loss: float | None) -> None:
        if trainer.global_step % self.every_steps or not (self.all_workers or trainer.run.is_chief):
            return
        now, samples = time.monotonic(), trainer.samples
        rate = (samples - self._since[1]) * trainer.run.world_size / max(now - self._since[0], 1e-9)
        self._since = (now, samples)
        text = f"step {trainer.global_step}  loss {'-' if loss is None else f'{loss:.4f}'}"
        who = f"worker {trainer.run.rank}: " if self.all_workers else ""
        trainer.log(f"{who}{text}  samples/s {rate:.0f}")


class StopAtStepHook(Hook):
    """Stops when the global step reaches `last_step`, or `num_steps` steps after fit() began
    (one of the two). Every worker of a lockstep strategy stops at the same step."""

    local_stop = False

    def __init__(self, last_step: int | None = None, *, num_steps: int | None = None):
        if (last_step is None) == (num_steps is None):
            raise ValueError("StopAtStepHook takes one of last_step and num_steps")
        self.last_step = None if last_step is None else check_int("last_step", last_step, 1)
        self.num_steps = None if num_steps is None else check_int("num_steps", num_steps, 1)

    def begin(self, trainer: Any) -> None:
        if self.num_steps is not None:
            self.last_step = trainer.global_step + self.num_steps
        self._check(trainer)

    def after_step(self, trainer: Any, loss: float | None) -> None:  # noqa: ARG002
        self._check(trainer)

    def _check(self, trainer: Any) -> None:
        if trainer.global_step >= self.last_step:
            trainer.request_stop(f"reached the last step {self.last_step}")


class EvaluationHook(Hook):
    """Every `every_steps` steps runs trainer.evaluate(data) on every worker (the strategy may
    sync weights collectively) and appends {"global_step", "epoch", **metrics} to `results`."""

    local_stop = False

    def __init__(self, data: Any, every_steps: int, batch_size: int = 1024):
        from .data import as_dataset

        as_dataset(data)  # a clear error now rather than at the first evaluation
        self.data, self.batch_size = data, check_int("batch_size", batch_size, 1)
        self.every_steps = check_int("every_steps", every_steps, 1)
        self.results: list[dict] = []

    def after_step(self, trainer: Any, loss: float | None) -> None:  # noqa: ARG002
        if trainer.global_step % self.every_steps == 0:
            metrics = trainer.evaluate(self.data, batch_size=self.batch_size)
            step = {"global_step": trainer.global_step, "epoch": trainer.epoch}
            self.results.append({**step, **metrics})


class NanLossHook(Hook):
    """Stops training when this worker's loss is NaN or infinite, with no final checkpoint (the
    weights are likely ruined); every worker of a lockstep strategy stops at that step. With
    fail=True, fit() then raises FloatingPointError on the worker(s) that saw it."""

    def __init__(self, fail: bool = False):
        self.fail = fail
        self.bad: str | None = None

    def after_step(self, trainer: Any, loss: float | None) -> None:
        if loss is not None and not math.isfinite(loss):
            self.bad = f"loss is {loss} at step {trainer.global_step} on worker {trainer.run.rank}"
            trainer.request_stop(self.bad, checkpoint=False)

    def end(self, trainer: Any, history: list) -> None:  # noqa: ARG002
        if self.fail and self.bad is not None:
            raise FloatingPointError(self.bad)
