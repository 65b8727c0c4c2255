"""Elastic training (Trainer(elastic=True)): a worker that dies does not end the job, and its
replacement (started by pscore-run --max-restarts, or by Kubernetes) joins the running job, and
with none coming (pscore-run --elastic marks the worker gone, or, under any other launcher, the
others do once its liveness beat stopped for PSCORE_ELASTIC_GONE_AFTER seconds) the job
shrinks. The PS strategies and hogwild form no job-wide collective group; allreduce (and
hybrid's dense half, a ps-async / ssp group of several workers) re-forms its group through the
store after a failed step (AllReduce.regroup, PSAsync.regroup).

What the workers would agree on through collectives they agree on through the job's store
(servers.job_store), under pscore/train/<job id>/elastic/:
  tables_ready      set by the chief once the dense tables exist (the others wait for it)
  position/<rank>   "epoch batch_in_epoch" after each of that worker's steps: a replacement
                    goes on from there instead of retraining its shard (not allreduce: its
                    group hands the position with the state)
  done/<rank>       set when that worker is done training: every worker takes the final
                    weights once all of them are set (the same weights everywhere at the end)
  gone/<rank>       set by pscore-run --elastic when that worker died with no restart left,
                    or by whoever waits for it once its beat stopped for
                    PSCORE_ELASTIC_GONE_AFTER s: the job shrinks (the others stop waiting
                    for it; the ps tasks send worker_done for it, so sync rounds and ssp bounds
                    close without it). A worker marked gone cannot rejoin: one that comes back
                    (stopped, late, or a replacement started after the mark) exits with an error
  beat/<rank>       a counter that worker's daemon thread adds 1 to every BEAT_S: a store-side
                    count, so watchers compare it with their own clock (no skew between hosts);
                    never reset (a worker may beat before a ps task resets the job's keys)
  ended/<rank>      set when that worker's fit() ended: under TF_CONFIG or Slurm the chief
                    serves the store and stays until every worker ended or is gone
  hogwild_prefix    hogwild: the name prefix of the shared tables, chosen by the leader
  generation        allreduce: the last group formed; group<g>/ holds group g's rendezvous,
                    which members came with no state (fresh/<rank>) and the state its source
                    (the lowest member that has one) hands to the others, and members (the
                    ranks in it, fixed by the first to claim `claim`: all minus the gone).
                    A ps-async / ssp group of several workers keeps the same keys under
                    wgroup<its first rank>/.
A replacement pulls the servers' current values at setup (PSStrategy.create_dense_tables), or
attaches to the machine's shared tables (Hogwild)."""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from typing import Any

from .. import _config, errors

__all__ = ["BEAT_S", "STORE_WAIT_S", "ElasticJob", "check_request", "gone_key", "open_job"]

STORE_WAIT_S = 600.0  # how long a worker waits for the chief's tables or the others' end
BEAT_S = 1.0  # how often an elastic worker beats (and a watcher looks at the beats)
_POLL_S = 0.1


def gone_key(job_id: str, rank: int) -> str:
    """The store key that says worker `rank` of job `job_id` died with no restart left (the
    job-end prefix of servers.JobEnd, then the elastic keys')."""
    return f"pscore/train/{job_id or 'default'}/elastic/gone/{rank}"


class ElasticJob:
    """The elastic keys of one job in its store."""

    def __init__(self, end: Any, world_size: int):
        """`end`: the job's servers.JobEnd (its store and key prefix)."""
        self.store, self.url, self.world_size = end.store, end.url, world_size
        self.prefix = f"{end.prefix}/elastic"
        self.beats_seen: dict = {}  # rank -> (its beat count, when this process saw it change)
        self.next_look = 0.0  # monotonic time of the next look at the beats
        self.ended_here = False  # this process's fit() ended (the chief waits at exit then)

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def reset(self) -> None:
        """Clears what an earlier job under the same id left (a ps task, before serving)."""
        names = ["tables_ready", "hogwild_prefix", "generation"]
        for rank in range(self.world_size):
            names += [f"position/{rank}", f"done/{rank}", f"gone/{rank}", f"ended/{rank}"]
            names.append(f"wgroup{rank}/generation")  # ps-async / ssp groups (by first rank)
        for name in names:
            self.store.delete_key(self._key(name))

    def tables_created(self) -> None:
        self.store.set(self._key("tables_ready"), b"1")

    def wait_tables(self, timeout: float = STORE_WAIT_S) -> None:
        self.store.wait([self._key("tables_ready")], timeout)

    def leaders_value(self, name: str, value: str, is_leader: bool) -> str:
        """The value the leader set under `name` first: a replacement leader keeps it."""
        key = self._key(name)
        if is_leader and not self.store.check([key]):
            self.store.set(key, value.encode())
        self.store.wait([key], STORE_WAIT_S)
        return self.store.get(key).decode()

    def tables_exist(self) -> bool:
        return self.store.check([self._key("tables_ready")])

    def last_generation(self, group: str = "") -> int:
        """The last generation formed of `group` ("": allreduce's group of every worker; a
        ps-async / ssp worker group's name otherwise)."""
        key = self._key(f"{group}generation")
        return int(self.store.get(key)) if self.store.check([key]) else 0

    def gone(self) -> set:
        """The ranks that died with no restart left (pscore-run --elastic marks them)."""
        return {r for r in range(self.world_size) if self.store.check([self._key(f"gone/{r}")])}

    def gone_unfinished(self) -> set:
        """The gone ranks that had not set done/<rank> (the job's end counter lacks them)."""
        return {r for r in self.gone() if not self.store.check([self._key(f"done/{r}")])}

    def _not_done(self) -> list:
        gone = self.gone()
        return [
            r
            for r in range(self.world_size)
            if r not in gone and not self.store.check([self._key(f"done/{r}")])
        ]

    def mark_stalled(self, ranks: Any = None) -> None:
        """With PSCORE_ELASTIC_GONE_AFTER: marks gone each of `ranks` (the ranks this process
        waits for; None: those neither done nor gone, as a ps task waits for) whose beat this
        process saw stand still that long; it looks once per BEAT_S. A rank that never beat is
        not marked (it may not have started yet); a replacement's beats move the same counter."""
        after = _config.ELASTIC_GONE_AFTER.get()
        now = time.monotonic()
        if after is None or now < self.next_look:
            return
        self.next_look = now + BEAT_S
        for rank in self._not_done() if ranks is None else ranks:
            beats = self.store.add(self._key(f"beat/{rank}"), 0)
            seen = self.beats_seen.get(rank)
            if seen is None or seen[0] != beats:
                self.beats_seen[rank] = (beats, now)
            elif beats and now - seen[1] >= after:
                self.store.set(self._key(f"gone/{rank}"), b"1")
                print(
                    f"pscore: elastic worker {rank} sent no liveness beat for {after:g} s "
                    f"({_config.ELASTIC_GONE_AFTER.name}): marked gone; the job goes on "
                    "without it",
                    file=sys.stderr,
                    flush=True,
                )

    def check_not_gone(self, rank: int) -> None:
        """RuntimeError when `rank` was marked gone: it cannot rejoin the job."""
        if self.store.check([self._key(f"gone/{rank}")]):
            raise RuntimeError(_gone_message(rank))

    def start_beating(self, rank: int) -> None:
        """A daemon thread adds 1 to beat/<rank> every BEAT_S over its own connection (the
        main thread's may block in a long wait) until the process exits; once this rank is
        marked gone it ends the process (it cannot rejoin; its updates must not reach the job
        that went on)."""
        from ..ps import discovery as ps_discovery

        store, stop = ps_discovery.open_store(self.url, 30.0), threading.Event()
        thread = threading.Thread(
            target=self._beat, args=(rank, store, stop), name=f"pscore-beat-{rank}", daemon=True
        )
        thread.start()

        def stop_beating() -> None:  # not inside a store call when the interpreter goes
            stop.set()
            thread.join(BEAT_S * 5)

        atexit.register(stop_beating)

    def _beat(self, rank: int, store: Any, stop: threading.Event) -> None:
        beat, gone = self._key(f"beat/{rank}"), self._key(f"gone/{rank}")
        while not stop.is_set():
            try:
                if store.check([gone]):
                    print(f"pscore: {_gone_message(rank)}", file=sys.stderr, flush=True)
                    os._exit(1)
                store.add(beat, 1)
            except (errors.Error, OSError):
                return  # the store went with the job's end; the main thread sees it if not
            stop.wait(BEAT_S)

    def fit_ended(self, rank: int) -> None:
        self.store.set(self._key(f"ended/{rank}"), b"1")
        self.ended_here = True

    def wait_ended(self, timeout: float = STORE_WAIT_S) -> None:
        """The chief that serves the store, at its exit after a fit() that ended: until every
        worker's fit() ended or it is gone (the store goes with the chief)."""
        from ..store.prefix import PrefixStore

        if not self.ended_here:
            return
        try:
            self._wait_each(PrefixStore(self.prefix, self.store), "ended", "end", timeout)
        except (errors.Error, OSError) as e:
            print(f"pscore: the chief leaves the elastic job's store: {e}", file=sys.stderr)

    def _wait_each(
        self, store: Any, name: str, what: str, timeout: float, ranks: Any = None
    ) -> set:
        """Waits until every rank has set `name`/<rank> in `store` or is gone; returns the
        gone ranks. TimeoutError naming the ranks still missing."""
        deadline = time.monotonic() + timeout
        while True:
            gone = self.gone()
            missing = [
                r
                for r in (range(self.world_size) if ranks is None else ranks)
                if r not in gone and not store.check([f"{name}/{r}"])
            ]
            if not missing:
                return gone
            if time.monotonic() >= deadline:
                raise errors.TimeoutError(
                    f"elastic job: waited {timeout:g} s for worker(s) {missing} to {what} "
                    "(neither there nor marked gone by pscore-run --elastic or "
                    f"{_config.ELASTIC_GONE_AFTER.name})"
                )
            self.mark_stalled(missing)
            time.sleep(_POLL_S)

    def form_group(
        self, generation: int, rank: int, fresh: bool, ranks: Any = None, group: str = ""
    ) -> tuple[int, list]:
        """Joins generation `generation` of `group` (of `ranks`, default every worker) through
        the store with its members that are not gone; returns the rank whose state everyone
        takes (the lowest member that is not fresh, else the lowest member) and the members
        (ranks, ascending: a member's index is its rank in the collective group)."""
        from .. import collectives
        from ..store.prefix import PrefixStore

        ranks = list(range(self.world_size)) if ranks is None else list(ranks)
        store = PrefixStore(self._key(f"{group}group{generation}"), self.store)
        store.set(f"fresh/{rank}", b"1" if fresh else b"0")
        what = f"join {group or 'group'} generation {generation}"
        gone = self._wait_each(store, "fresh", what, STORE_WAIT_S, ranks)
        if store.add("claim", 1) == 1:  # one member fixes who is in: all agree on it
            members = [r for r in ranks if r not in gone]
            store.set("members", " ".join(map(str, members)).encode())
        store.wait(["members"], STORE_WAIT_S)
        members = [int(r) for r in store.get("members").split()]
        if rank not in members:
            raise RuntimeError(_gone_message(rank))
        collectives.init_process_group(
            store=PrefixStore("pg", store),
            rank=members.index(rank),
            world_size=len(members),
            timeout=STORE_WAIT_S,
        )
        holders = [r for r in members if store.get(f"fresh/{r}") == b"0"]
        if rank == members[0]:
            self.store.set(self._key(f"{group}generation"), str(generation).encode())
        return (holders[0] if holders else members[0]), members

    def hand_state(
        self, generation: int, source: int, rank: int, state: Any, group: str = ""
    ) -> Any:
        """`state` (bytes) from `source` to every member of `group`'s generation `generation`."""
        key = self._key(f"{group}group{generation}/state")
        if rank == source:
            self.store.set(key, state)
            return state
        self.store.wait([key], STORE_WAIT_S)
        return self.store.get(key)

    def record_position(self, rank: int, epoch: int, batch_in_epoch: int) -> None:
        self.store.set(self._key(f"position/{rank}"), f"{epoch} {batch_in_epoch}".encode())

    def position(self, rank: int) -> tuple[int, int] | None:
        """(epoch, batch_in_epoch) the last worker of this rank reached; None at its start."""
        key = self._key(f"position/{rank}")
        if not self.store.check([key]):
            return None
        epoch, batch = self.store.get(key).split()
        return int(epoch), int(batch)

    def worker_done(self, rank: int) -> None:
        self.store.set(self._key(f"done/{rank}"), b"1")

    def wait_all_done(self, timeout: float = STORE_WAIT_S) -> None:
        """Until every worker is done or gone."""
        from ..store.prefix import PrefixStore

        self._wait_each(PrefixStore(self.prefix, self.store), "done", "be done", timeout)


def check_request(
    elastic: bool, run: Any, strategy: Any, checkpoint_dir: Any, timeline_path: Any
) -> None:
    """Whether this Trainer may run as asked: elastic with a strategy and options that allow
    it; a restarted worker (PSCORE_RESTART_COUNT) only in an elastic job."""
    if not isinstance(elastic, bool):
        raise TypeError(f"elastic must be True or False, not {elastic!r}")
    if not elastic:
        restarts = _config.RESTART_COUNT.get()
        if restarts and not run.is_server:
            raise RuntimeError(
                f"worker {run.rank} was restarted ({_config.RESTART_COUNT.name}={restarts}) but "
                "this Trainer is not elastic: a restarted worker cannot rejoin the job (give "
                "Trainer(elastic=True), or pscore-run --max-restarts 0)"
            )
        return
    strategy.check_elastic(run)
    if checkpoint_dir is not None or timeline_path:
        raise ValueError(
            "elastic=True does not take checkpoint_dir or timeline yet (both gather the workers "
            "through collectives, which an elastic job does without)"
        )


def _gone_message(rank: int) -> str:
    return (
        f"worker {rank} was marked gone from the elastic job (pscore-run --elastic saw it die, "
        f"or its liveness beat stopped for {_config.ELASTIC_GONE_AFTER.name} s) and cannot "
        "rejoin it: the job went on without it"
    )


def open_job(end: Any, run: Any, strategy: Any) -> ElasticJob:
    """The job's elastic keys in `end`'s store (a servers.JobEnd, None when the job has no
    store), handed to the strategy; this worker beats in it from now on (under TF_CONFIG or
    Slurm the chief serves that store and stays, at its exit, until every worker's fit()
    ended). RuntimeError when this rank was marked gone."""
    if end is None:
        raise ValueError(
            "elastic=True keeps the workers' agreement in the job's store and this job has none: "
            "run it under pscore-run --servers, TF_CONFIG or Slurm, or set "
            f"{_config.STORE.name}"
        )
    job = ElasticJob(end, run.world_size)
    job.check_not_gone(run.rank)
    job.start_beating(run.rank)
    if end.chief_hosts and run.is_chief:
        atexit.register(job.wait_ended)
    strategy.elastic = job
    return job
