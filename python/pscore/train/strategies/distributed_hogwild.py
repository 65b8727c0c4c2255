"""distributed-hogwild: SINGA's Distributed Hogwild (and Caffe's). Each machine is a Hogwild
group (the hogwild strategy: its workers train one model in shared memory, lock-free), and the
machines' tables are averaged every `sync_every` steps by pscore.hogwild.DistributedHogwild over
a process group of one worker per machine, its leader (local rank 0).

Who does what: the leader trains like the others and, after each of its own steps, checks the
machine's clock (the first table's update count, advanced by every local worker's step); once
it has grown by sync_every since the last round, the leader runs a round: snapshot, average
with the other leaders, add (average - snapshot) back with the lock-free kernel. The other
workers never wait for it: they keep updating the tables meanwhile, and their updates are kept.

"Same step": a round is due after sync_every steps of the machine (summed over its workers),
counted on each machine's own clock; machines at different speeds do not meet at the same
global step but at the same round number: the k-th round of every leader is one collective, so
a leader whose machine is ahead waits in it (its machine-mates keep training) for the others.

finish(): the leader keeps running due rounds until all its machine-mates are done, then the
final average (DistributedHogwild.finish: rounds stop once any machine has finished, and every
machine averages once more), and a broadcast of the first machine's tables makes them
bit-identical (the correction a + (avg - a) may round differently from avg). Every worker on
every machine then holds the same final weights."""

from __future__ import annotations

import time
from typing import Any

from ... import collectives
from ...hogwild import DistributedHogwild as TableAveraging
from ..timeline import COMMUNICATION, TRAIN_LANE, WAIT
from .base import Strategy
from .hogwild import Hogwild

__all__ = ["DistributedHogwild"]

_POLL_S = 0.005  # the leader's pace between due-round checks while its mates finish


class DistributedHogwild(Hogwild):
    name = "distributed-hogwild"

    def __init__(self, sync_every: int = 50, include_state: bool = False, **options: Any):
        super().__init__(**options)
        if isinstance(sync_every, bool) or not isinstance(sync_every, int) or sync_every < 1:
            raise ValueError(
                f"strategy {self.name!r}: sync_every must be an int >= 1 (steps of a machine "
                f"between averaging rounds), got {sync_every!r}"
            )
        if not isinstance(include_state, bool):
            raise TypeError(
                f"strategy {self.name!r}: include_state must be True or False, got "
                f"{include_state!r}"
            )
        self.sync_every, self.include_state = sync_every, include_state
        self.leaders_group: Any = None
        self.averaging: TableAveraging | None = None  # the leader's

    def check(self, run: Any) -> None:
        Strategy.check(self, run)  # any number of machines

    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        if self.is_leader:
            self.averaging = TableAveraging(
                self.shared,
                self.sync_every,
                group=self.leaders_group,
                include_state=self.include_state,
            )

    def check_elastic(self, run: Any) -> None:
        Strategy.check_elastic(self, run)  # its machines' leaders reduce every few steps

    def _join_machine(self) -> None:
        """Every worker makes every group, in the same order: one per machine, then the
        leaders'; and every machine starts from the chief's weights."""
        me = self.trainer.run.rank
        for ranks in self.machine.machines:
            group = collectives.new_group(ranks)
            if me in ranks:
                self.machine_group = group
        group = collectives.new_group(self.machine.leaders)
        self.leaders_group = group if me in self.machine.leaders else None
        for p in self.trainer.model.parameters():
            collectives.broadcast(p.data, src=0)

    def update(self) -> None:
        super().update()
        if self.averaging is not None:
            self._maybe_average()

    def _maybe_average(self) -> None:
        """A round when one is due (shown on the timeline when it ran)."""
        started = self.timeline.now()
        if self.averaging.maybe_sync():
            nbytes = sum(t.nbytes for t in self.shared.tables.values())
            self.timeline.add("average tables", COMMUNICATION, started, TRAIN_LANE, nbytes)

    def _end_training(self) -> None:
        if self.averaging is None:
            with self.timeline.span("wait workers done", WAIT):
                collectives.barrier(self.machine_group)  # this worker is done
                collectives.barrier(self.machine_group)  # the leader has the final tables
            return
        mates_done = collectives.barrier(self.machine_group, async_op=True)
        while not mates_done.is_completed():
            self._maybe_average()
            time.sleep(_POLL_S)
        mates_done.wait()
        self.averaging.finish()
        for t in self.shared.tables.values():
            collectives.broadcast(t.numpy(), src=self.machine.leaders[0], group=self.leaders_group)
        self.averaging = None
        collectives.barrier(self.machine_group)
