"""One Trainer's part in an elastic job (Trainer(elastic=True), elastic.py): around its steps,
the check that it was not marked gone and the record of its position (a replacement goes on from
there), the rejoin of a replacement at that position, and the re-forming of a broken group."""

from __future__ import annotations

from typing import Any

from .. import _config

__all__ = ["ElasticWorker"]


class ElasticWorker:
    def __init__(self, job: Any, trainer: Any):
        """`job`: the job's elastic.ElasticJob."""
        self.job, self.trainer, self.rank = job, trainer, trainer.run.rank
        # A store round trip per step, only where a replacement reads it: a strategy that
        # regroups (allreduce) hands the position with its state (AllReduce._pack).
        self.records_position = not trainer.strategy.regroups
        # Only the liveness rule marks a worker that still runs (pscore-run --elastic marks the
        # dead): without it, no store round trip before each step.
        self.checks_gone = self.records_position and _config.ELASTIC_GONE_AFTER.get() is not None

    def before_step(self) -> None:
        """A worker that was stopped and marked gone takes no step."""
        if self.checks_gone:
            self.job.check_not_gone(self.rank)

    def after_step(self) -> None:
        t = self.trainer
        if self.records_position:
            self.job.record_position(self.rank, t.epoch, t.batch_in_epoch, t.global_step)

    def rejoin_where_left(self) -> None:
        """A replacement worker goes on from the position its predecessor reached."""
        t = self.trainer
        found = self.job.position(self.rank) if self.records_position else None
        if found is not None and found[:2] > (t.epoch, t.batch_in_epoch):
            t.epoch, t.batch_in_epoch, t.global_step = found
            t.log(
                f"pscore.train: worker {self.rank} rejoins the job at epoch {t.epoch}, "
                f"batch {t.batch_in_epoch}"
            )

    def regroup(self, failure: Exception) -> None:
        """Re-raises `failure` unless the strategy re-forms its group (then it does)."""
        t = self.trainer
        if not t.strategy.regroups:
            raise failure
        t.log(f"pscore.train: worker {self.rank}: the group broke ({failure}); re-forming it")
        t.strategy.regroup()
        t.log(
            f"pscore.train: worker {self.rank} goes on in group generation "
            f"{t.strategy.generation} from global step {t.global_step}"
        )
