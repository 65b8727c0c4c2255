"""distributed-hogwild's machine leaders in an elastic job (Trainer(elastic=True)): who leads
each machine, and the leaders' averaging group, formed through the job's store.

Who leads: the machine's lowest rank that is not gone (pscore-run --elastic marks a worker
gone when it died with no restart left). The first rank leads while it lives and while a
replacement of it may come (a replacement of the leader leads again); once it is gone the next
rank takes over, which notices after each of its steps and while it waits at the end. A machine
whose workers are all gone has no leader: its tables are no longer averaged.

The group: generation g forms under the elastic keys' leaders/group<g>/. A leader joining it
sets `open` (the members of generation g - 1 see it and leave theirs) and joined/<rank>; it
forms once every machine's leader (as the gone keys say at that moment) has joined, or the
machine has no leader, or has ended (final/<machine index>: its tables hold the job's final
weights and its leader left). The first to claim fixes the members (elastic.start_group, as
allreduce's generations do); leaders/generation is the last one formed."""

from __future__ import annotations

import time
from typing import Any

from ... import errors
from ...store.prefix import PrefixStore
from ..elastic import STORE_WAIT_S, start_group
from .machines import Machine

__all__ = ["Leaders"]

_POLL_S = 0.05


class Leaders:
    """The leaders' keys of one elastic job, seen from worker `rank` on `machine`."""

    def __init__(self, job: Any, machine: Machine, rank: int):
        self.job, self.machines, self.rank = job, machine.machines, rank
        self.index = machine.machines.index(machine.ranks)  # this worker's machine
        self.store = PrefixStore(f"{job.prefix}/leaders", job.store)
        self.generation = 0  # the generation this worker is a member of (0: none yet)

    def leads(self) -> bool:
        """Whether this worker leads its machine (every rank of it below this one is gone)."""
        return all(self.job.is_gone(r) for r in self.machines[self.index] if r < self.rank)

    def leader(self) -> int | None:
        """This machine's leader now (None: all its workers are gone)."""
        return min((r for r in self.machines[self.index] if not self.job.is_gone(r)), default=None)

    def next_opened(self) -> bool:
        """Whether a leader joined the generation after this worker's (it should leave its)."""
        return self.store.check([f"group{self.generation + 1}/open"])

    def join(self) -> list:
        """Joins the next generation (the one after the last formed, for a new leader) as this
        worker's default process group; returns its members (ranks, ascending)."""
        last = self.generation or self._last_generation()
        generation = last + 1
        store = PrefixStore(f"group{generation}", self.store)
        store.set("open", b"1")
        store.set(f"joined/{self.rank}", b"1")
        members = start_group(store, self.rank, self._wait_members(store, generation))
        self.generation = generation
        if self.rank == members[0]:
            self.store.set("generation", str(generation).encode())
        return members

    def _last_generation(self) -> int:
        return int(self.store.get("generation")) if self.store.check(["generation"]) else 0

    def _wait_members(self, store: Any, generation: int) -> list:
        """The leaders of the machines that take part, once each has joined; TimeoutError
        naming the leaders that did not."""
        deadline = time.monotonic() + STORE_WAIT_S
        while True:
            gone = self.job.gone()
            members, waiting = [], []
            for index, ranks in enumerate(self.machines):
                leader = min((r for r in ranks if r not in gone), default=None)
                if leader is None or self.store.check([f"final/{index}"]):
                    continue  # no one left there, or its tables are final
                (members if store.check([f"joined/{leader}"]) else waiting).append(leader)
            if not waiting:
                return members
            if time.monotonic() >= deadline:
                raise errors.TimeoutError(
                    f"distributed-hogwild: waited {STORE_WAIT_S:g} s for the machine leader(s) "
                    f"{waiting} to join the leaders' group generation {generation} (neither "
                    "there nor marked gone by pscore-run --elastic)"
                )
            time.sleep(_POLL_S)

    def set_final(self) -> None:
        """This machine's tables hold the job's final weights (its leader leaves the group)."""
        self.store.set(f"final/{self.index}", b"1")

    def final(self) -> bool:
        return self.store.check([f"final/{self.index}"])
