"""ps-async and ssp: worker groups, synchronous inside a group and asynchronous across groups
through the parameter servers (SINGA Downpour, TF between-graph async training; ssp: Petuum's
stale synchronous parallel).

The N workers form G groups of N / G consecutive ranks (pscore-run --worker-groups G, or a
ClusterSpec's nworker_groups). Each step a group averages its gradients by all_reduce over a
pscore.new_group of its members; its leader (the group's first rank) pushes the mean to the
servers and pulls the new values in one round trip (tables with consistency "async", or "ssp"
with a staleness bound), then broadcasts them to the group. With G == N every worker is its own
group and talks to the servers directly.

Lockstep inside a group only: a group of several workers runs the most steps any worker has
(a worker out of batches joins its group's all_reduce with no gradient); groups never wait for
each other, and a worker alone in its group takes just its own steps. Members that are not
leaders never push, so they send worker_done at setup: ssp bounds do not wait for them."""

from __future__ import annotations

from typing import Any

from ... import collectives
from ..timeline import COMMUNICATION
from .ps_base import PSStrategy

__all__ = ["SSP", "PSAsync"]


class PSAsync(PSStrategy):
    name = "ps-async"
    consistency = "async"

    def check(self, run: Any) -> None:
        super().check(run)
        groups = run.worker_groups
        if groups < 1 or run.world_size % groups:
            raise ValueError(
                f"strategy {self.name!r}: {groups} worker groups do not divide {run.world_size} "
                "workers evenly (give a number of groups that divides the workers)"
            )

    def check_elastic(self, run: Any) -> None:
        """Elastic only with every worker its own group: a group's all_reduce would break."""
        if run.world_size > 1 and run.worker_groups != run.world_size:
            raise ValueError(
                f"strategy {self.name!r} with elastic=True needs every worker in its own group "
                f"(a group's all_reduce breaks with a member): give {run.world_size} worker "
                f"groups (pscore-run --worker-groups {run.world_size}), not {run.worker_groups}"
            )

    def setup(self, trainer: Any) -> None:
        run = trainer.run
        size = run.world_size // run.worker_groups
        first = run.rank // size * size
        self.leader, self.is_leader = first, run.rank == first
        self.group = None  # a worker alone in its group talks to the servers directly
        if size > 1:  # every rank creates every group, in the same order (new_group's rule)
            groups = [
                collectives.new_group(list(range(g, g + size)))
                for g in range(0, run.world_size, size)
            ]
            self.group = groups[run.rank // size]
        self.lockstep = size > 1
        super().setup(trainer)
        params = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
        self.create_dense_tables(params)
        if not self.is_leader:
            self.client.worker_done()

    def _push_pull(self, grads: dict) -> None:
        self.push_pull(grads)
        self.increment_global_step()

    def _group_step(self, contributing: bool) -> None:
        """The group's mean gradient to the servers (by the leader), their values to all."""
        import torch

        grads = self.gradients()
        flat = torch.cat([g.reshape(-1) for g in grads.values()] + [torch.ones(1)])
        if not contributing:
            flat.zero_()
        with self.timeline.span("allreduce group gradients", COMMUNICATION, nbytes=flat.nbytes):
            collectives.all_reduce(flat, op="sum", group=self.group)
        count = flat[-1].item()
        if count == 0:  # every member is out of batches
            return
        if self.is_leader:
            flat /= count
            at, mean = 0, {}
            for t, g in grads.items():
                mean[t] = flat[at : at + g.numel()]
                at += g.numel()
            self._push_pull(mean)
        params = torch.cat([p.data.reshape(-1) for p in self.tables.values()])
        with self.timeline.span("broadcast group weights", COMMUNICATION, nbytes=params.nbytes):
            collectives.broadcast(params, src=self.leader, group=self.group)
        at = 0
        for p in self.tables.values():
            p.data.copy_(params[at : at + p.numel()].view_as(p))
            at += p.numel()

    def update(self) -> None:
        self.check_running()
        if self.group is None:
            self._push_pull(self.gradients())
        else:
            self._group_step(True)
        self.zero_grad()

    def join_step(self) -> None:
        self._group_step(False)
        self.zero_grad()


class SSP(PSAsync):
    """ps-async with a staleness bound: a worker (group leader) more than `staleness` steps
    ahead of the slowest active one waits in its push until that one catches up."""

    name = "ssp"
    consistency = "ssp"

    def __init__(self, staleness: int = 3, **options: Any):
        super().__init__(**options)
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
            raise ValueError(f"strategy 'ssp': staleness must be an int >= 0, got {staleness!r}")
        self.staleness = staleness

    def table_settings(self) -> dict:
        return {**super().table_settings(), "staleness": self.staleness}
