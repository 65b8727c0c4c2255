"""ps-sync: synchronous training through parameter servers (SINGA Sandblaster, TF
SyncReplicasOptimizer, Paddle's pserver). Each dense parameter is a server-side table with
consistency "sync": every step a worker pushes its gradient and, in the same round trip, pulls
the values after the round; a shard applies the server-side optimizer to the mean of the round's
gradients once every worker's arrived (the first N - k with backup_workers=k).

Not lockstep across workers: each takes the steps of its own shard, rounds pair the workers'
i-th pushes, and a worker out of batches sends worker_done at the end of fit, after which the
rounds close without it (uneven shards finish without a hang)."""

from __future__ import annotations

from typing import Any

from .ps_base import PSStrategy

__all__ = ["PSSync"]


class PSSync(PSStrategy):
    name = "ps-sync"
    consistency = "sync"
    lockstep = False

    def __init__(self, backup_workers: int = 0, **options: Any):
        super().__init__(**options)
        if isinstance(backup_workers, bool) or not isinstance(backup_workers, int):
            raise TypeError(f"backup_workers must be an int, not {backup_workers!r}")
        if backup_workers < 0:
            raise ValueError(f"backup_workers must be >= 0, got {backup_workers}")
        self.backup_workers = backup_workers

    def check(self, run: Any) -> None:
        super().check(run)
        if run.world_size and self.backup_workers >= run.world_size:
            raise ValueError(
                f"strategy 'ps-sync': backup_workers={self.backup_workers} leaves no worker to "
                f"close a round of {run.world_size} workers (give 0 .. {run.world_size - 1})"
            )

    def check_elastic(self, run: Any) -> None:
        """Elastic: a dead worker's replacement pushes into the open round where it left."""

    def table_settings(self) -> dict:
        return {**super().table_settings(), "backup_workers": self.backup_workers}

    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        params = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
        self.create_dense_tables(params)

    def update(self) -> None:
        self.check_running()
        self.push_pull(self.gradients())
        self.zero_grad()
        if self.trainer.run.is_chief:
            self.increment_global_step()
