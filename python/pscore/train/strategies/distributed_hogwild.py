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
every machine then holds the same final weights.

Elastic (Trainer(elastic=True)): each machine is elastic hogwild (its tables made once and kept
in /dev/shm until its final weights, a replacement attaches to them and goes on from its
predecessor's position); the machines are told apart through the job's store
(machines.elastic_machine) and the leaders' group forms through it (leaders.py: the lowest
rank of a machine that is not gone leads). A leader leaves its generation when a round fails (a
leader died) or when another leader joined the next one (a replacement, or a worker taking over
a gone leader's machine), and joins the next with a fresh round count; the tables themselves
are the state, so nothing is handed over. At the end a leader waits until its machine-mates are
done or gone (running due rounds), then the final average and broadcast over the members left;
a failure there re-forms the group and retries. It then sets the machine's final key and
unlinks the tables; its mates wait for that key (taking over when the leader is gone)."""

from __future__ import annotations

import time
from typing import Any

from ... import collectives, errors
from ...hogwild import DistributedHogwild as TableAveraging
from ..elastic import STORE_WAIT_S
from ..timeline import COMMUNICATION, TRAIN_LANE, WAIT
from . import machines
from .base import Strategy
from .hogwild import Hogwild
from .leaders import Leaders

__all__ = ["DistributedHogwild"]

_POLL_S = 0.005  # the leader's pace between due-round checks while its mates finish
_ELASTIC_POLL_S = 0.05  # the same in an elastic job, where each check asks the store


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
        self.leaders: Leaders | None = None  # elastic: the leaders' keys in the job's store

    def check(self, run: Any) -> None:
        Strategy.check(self, run)  # any number of machines

    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        if self.elastic is not None:
            self.leaders = Leaders(self.elastic, self.machine, trainer.run.rank)
            if self.leaders.leads():
                self._lead()
        elif self.is_leader:
            self._start_averaging(self.leaders_group)

    def _start_averaging(self, group: Any) -> None:
        self.averaging = TableAveraging(
            self.shared, self.sync_every, group=group, include_state=self.include_state
        )

    # ---- elastic (Trainer(elastic=True); see the module doc and leaders.py) --------------
    def check_elastic(self, run: Any) -> None:
        """Elastic: the leaders' group forms through the job's store (leaders.py)."""

    def _elastic_machine(self, run: Any) -> machines.Machine:
        return machines.elastic_machine(run, self.elastic)

    def _lead(self) -> None:
        """Joins the leaders' next generation and averages over it (the default group)."""
        members = self.leaders.join()
        self._start_averaging(None)
        self.trainer.log(
            f"pscore.train: worker {self.trainer.run.rank} averages machine "
            f"{self.leaders.index}'s tables in leaders' generation {self.leaders.generation} "
            f"with {members}"
        )

    def _regroup(self, why: str) -> None:
        self.trainer.log(f"pscore.train: worker {self.trainer.run.rank}: {why}; re-forming")
        collectives.destroy_process_group()
        self.averaging = None
        self._lead()

    def _elastic_round(self) -> None:
        """A due round, after leaving the generation when a leader joined the next one or
        when the round failed (a leader died); a worker whose leader is gone takes over."""
        if self.averaging is None:
            if self.leaders.leads():
                self._lead()
            return
        if self.leaders.next_opened():
            self._regroup("a leader joined the leaders' next generation")
            return
        try:
            self._maybe_average()
        except errors.Error as e:
            self._regroup(f"an averaging round failed ({e})")

    def _finish_elastic(self) -> None:
        """This worker done; the leader's end (see the module doc) or the wait for it."""
        rank, leaders = self.trainer.run.rank, self.leaders
        self.elastic.worker_done(rank)
        deadline = time.monotonic() + STORE_WAIT_S
        with self.timeline.span("wait final tables", WAIT):
            while not leaders.final():
                self._elastic_round()  # a worker whose leader is gone takes over
                if self.averaging is not None and self._mates_done():
                    self._elastic_final()
                elif time.monotonic() >= deadline:
                    waited = leaders.leader() if self.averaging is None else self._mates()
                    raise errors.TimeoutError(
                        f"distributed-hogwild: worker {rank} waited {STORE_WAIT_S:g} s for "
                        f"worker(s) {waited} to end machine {leaders.index}'s training"
                    )
                else:
                    time.sleep(_ELASTIC_POLL_S)
        self._release()

    def _mates(self) -> list:
        return [r for r in self.machine.ranks if r != self.trainer.run.rank]

    def _mates_done(self) -> bool:
        return not self.elastic.unfinished(self._mates())

    def _elastic_final(self) -> None:
        """The final average and broadcast over the leaders left (re-formed and retried when a
        leader dies meanwhile); then the machine's tables are final and their names go."""
        try:
            self.averaging.finish()
            for t in self.shared.tables.values():
                collectives.broadcast(t.numpy(), src=0)
        except errors.Error as e:
            self._regroup(f"the final average failed ({e})")
            return
        self.leaders.set_final()
        self.averaging = None
        for t in self.shared.tables.values():
            t.unlink()  # every worker of the machine is done: no replacement will attach

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
        if self.elastic is not None:
            self._elastic_round()
        elif self.averaging is not None:
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
