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
        """Elastic: a group of several workers re-forms through the store (regroup)."""

    def setup(self, trainer: Any) -> None:
        run = trainer.run
        size = run.world_size // run.worker_groups
        first = run.rank // size * size
        self.leader, self.is_leader = first, run.rank == first
        self.leader_src = first  # the leader's rank in the collectives' numbering
        self.group = None  # a worker alone in its group talks to the servers directly
        self.regroups = self.elastic is not None and size > 1
        if self.regroups:  # no job-wide group: the worker group forms through the store
            self.group_ranks, self.group_name = range(first, first + size), f"wgroup{first}/"
            self.generation = self.elastic.last_generation(self.group_name)
        elif size > 1:  # every rank creates every group, in the same order (new_group's rule)
            groups = [
                collectives.new_group(list(range(g, g + size)))
                for g in range(0, run.world_size, size)
            ]
            self.group = groups[run.rank // size]
        self.lockstep = size > 1
        super().setup(trainer)
        if self.regroups:
            self._form_group(fresh=True)
        params = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
        self.create_dense_tables(params)
        if not self.is_leader:
            self.client.worker_done()

    # ---- elastic groups (Trainer(elastic=True), several workers per group) -----------------
    def regroup(self) -> None:
        """After a failed step: the worker group re-forms without the dead member (or with
        its replacement); the lowest member left leads (pushes), all take its position."""
        collectives.destroy_process_group()
        self.zero_grad()
        self._form_group(fresh=False)
        if self.tables:
            self.pull_into_model()  # the leader broadcasts after each push; a new one too

    def _form_group(self, fresh: bool) -> None:
        t, job, rank = self.trainer, self.elastic, self.trainer.run.rank
        generation = self.generation + 1
        source, members = job.form_group(generation, rank, fresh, self.group_ranks, self.group_name)
        self.generation, self.leader = generation, members[0]
        self.is_leader, self.leader_src = rank == members[0], 0  # the group is the job's group
        position = f"{t.global_step} {t.epoch} {t.batch_in_epoch}".encode()
        state = job.hand_state(generation, source, rank, position, self.group_name)
        if not fresh or rank != source:  # a fresh worker's own position comes from fit()
            t.global_step, t.epoch, t.batch_in_epoch = map(int, state.split())

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
            collectives.broadcast(params, src=self.leader_src, group=self.group)
        at = 0
        for p in self.tables.values():
            p.data.copy_(params[at : at + p.numel()].view_as(p))
            at += p.numel()

    def update(self) -> None:
        self.check_running()
        if not self.lockstep:  # alone in its group
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
