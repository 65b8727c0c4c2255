"""Callbacks the Trainer runs (TF's SessionRunHook idea). Subclass Hook and override what you
need; a hook stops training with trainer.request_stop(reason)."""

from __future__ import annotations

from typing import Any

__all__ = ["Hook"]


class Hook:
    def begin(self, trainer: Any) -> None:
        """fit() starts (after setup and any resume)."""

    def after_step(self, trainer: Any, loss: float | None) -> None:
        """A step ended; trainer.global_step counts it. loss is None for a join step (this
        worker had no batch left in the epoch)."""

    def after_epoch(self, trainer: Any, epoch: int, metrics: dict) -> None:
        """An epoch ended; metrics: its mean training loss and, with eval_data, evaluate()'s."""

    def after_checkpoint(self, trainer: Any, path: str) -> None:
        """The chief wrote a checkpoint at `path`."""

    def end(self, trainer: Any, history: list) -> None:
        """fit() ends: the model holds the final weights."""
