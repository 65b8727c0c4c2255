"""TensorBoard scalars from the Trainer (Trainer(tensorboard=logdir), or this hook in `hooks`),
written with torch.utils.tensorboard's SummaryWriter, which needs the `tensorboard` package.

Every `every_steps` steps, at the global step, over the steps since the last write:
  train/loss               this worker's mean loss (join steps, with no batch, left out)
  train/samples_per_s      the job's rate, estimated as this worker's times the workers
  train/step_time_s        wall seconds per step (the hooks' and checkpoints' time included)
  train/comm_bytes_per_s   this worker's communication: bytes of the timeline's communication
                           events (allreduce buckets, push/pull), counted with the timeline off
and at each epoch's end epoch/loss and evaluate()'s metrics as eval/<name> (a window restarts
there, so the evaluation between epochs is not counted as step time). The chief writes into
logdir; with all_workers every worker writes into logdir/rank<N>."""

from __future__ import annotations

import importlib.util
import math
import os
import time
from typing import Any

from .checks import check_int
from .hooks import Hook

__all__ = ["TensorBoardHook"]


def _require_tensorboard() -> None:
    if importlib.util.find_spec("tensorboard") is None:
        raise ImportError(
            "TensorBoard logging (Trainer(tensorboard=...) / TensorBoardHook) writes event files "
            "with torch.utils.tensorboard, which needs the tensorboard package: "
            "pip install tensorboard"
        )


class TensorBoardHook(Hook):
    local_stop = False

    def __init__(self, logdir: str | os.PathLike, every_steps: int = 10, all_workers: bool = False):
        _require_tensorboard()
        self.logdir = os.fspath(logdir)
        self.every_steps = check_int("every_steps", every_steps, 1)
        self.all_workers = all_workers
        self.writer: Any = None
        self._window = (0.0, 0, 0, 0)  # (time, global step, samples, comm bytes) at its start
        self._loss_sum, self._losses = 0.0, 0

    def begin(self, trainer: Any) -> None:
        if not (trainer.run.is_chief or self.all_workers):
            return
        if self.writer is None:
            from torch.utils.tensorboard import SummaryWriter

            where = self.logdir
            if self.all_workers:
                where = os.path.join(where, f"rank{trainer.run.rank}")
            self.writer = SummaryWriter(where)
        self._start_window(trainer)

    def _start_window(self, trainer: Any) -> None:
        now = time.perf_counter()
        self._window = (now, trainer.global_step, trainer.samples, trainer.timeline.comm_bytes)
        self._loss_sum, self._losses = 0.0, 0

    def after_step(self, trainer: Any, loss: float | None) -> None:
        if self.writer is None:
            return
        if loss is not None:
            self._loss_sum, self._losses = self._loss_sum + loss, self._losses + 1
        step = trainer.global_step
        if step % self.every_steps:
            return
        started, first_step, samples, comm_bytes = self._window
        seconds = max(time.perf_counter() - started, 1e-9)
        world = trainer.run.world_size
        scalars = {
            "train/samples_per_s": (trainer.samples - samples) * world / seconds,
            "train/step_time_s": seconds / max(step - first_step, 1),
            "train/comm_bytes_per_s": (trainer.timeline.comm_bytes - comm_bytes) / seconds,
        }
        if self._losses:
            scalars["train/loss"] = self._loss_sum / self._losses
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, value, step)
        self._start_window(trainer)

    def after_epoch(self, trainer: Any, epoch: int, metrics: dict) -> None:  # noqa: ARG002
        if self.writer is None:
            return
        step = trainer.global_step
        if not math.isnan(metrics.get("loss", math.nan)):
            self.writer.add_scalar("epoch/loss", metrics["loss"], step)
        for name, value in metrics.items():
            if name.startswith("eval_") or name == "accuracy":
                self.writer.add_scalar(f"eval/{name.removeprefix('eval_')}", value, step)
        self.writer.flush()
        self._start_window(trainer)

    def end(self, trainer: Any, history: list) -> None:  # noqa: ARG002
        if self.writer is not None:
            self.writer.close()
            self.writer = None
