"""Elastic training (Trainer(elastic=True)): a worker that dies does not end the job, and its
replacement (started by pscore-run --max-restarts, or by Kubernetes) joins the running job, and
with none coming (pscore-run --elastic marks the worker gone, or, under any other launcher, the
others do once its liveness beat stopped for PSCORE_ELASTIC_GONE_AFTER seconds) the job
shrinks. The PS strategies and hogwild form no job-wide collective group; allreduce (and
hybrid's dense half, a ps-async / ssp group of several workers) re-forms its group through the
store after a failed step (AllReduce.regroup, PSAsync.regroup), and distributed-hogwild
its machine leaders' averaging group after a failed round or when a new leader joins
(strategies/leaders.py).

What the workers would agree on through collectives they agree on through the job's store
(servers.job_store), under pscore/train/<job id>/elastic/:
  tables_ready      set by the chief once the dense tables exist (the others wait for it);
                    hogwild strategies: tables_ready/m<first rank> per machine (its leader's
                    shared tables)
  position/<rank>   "epoch batch_in_epoch global_step" after each of that worker's steps (and
                    at its setup): a replacement goes on from there instead of retraining its
                    shard (not allreduce: its group hands the position with the state)
  done/<rank>       set when that worker is done training: every worker takes the final
                    weights once all of them are set (the same weights everywhere at the end)
  model/<rank>, checkpoint/<rank>, resumed/<rank>
                    at the job's start (agreement.py): its model's digest, the global step of
                    the checkpoint it found (-1: none), and "the servers hold the checkpoint"
                    (the barrier before the first step)
  joined/<rank>     set once that worker is set up: its replacement joins the running job
                    (the state of the others or the servers) instead of reading a checkpoint
  timeline/<rank>   its timeline's events at the end (timeline_merge.py): the lead (the chief,
                    or the lowest worker left with it gone) merges those there
  gone/<rank>       set by pscore-run --elastic when that worker died with no restart left,
                    or by whoever waits for it once its beat stopped for
                    PSCORE_ELASTIC_GONE_AFTER s: the job shrinks (the others stop waiting
                    for it; the ps tasks send worker_done for it, so sync rounds and ssp bounds
                    close without it). A worker marked gone cannot rejoin: one that comes back
                    (stopped, late, or a replacement started after the mark) exits with an error
  gone_marks        how many marks were set (mark_gone): 0 tells a watcher no worker is gone in one
                    look, where the gone keys take one per worker
  beat/<rank>       a counter that worker's daemon thread adds 1 to every BEAT_S: a store-side
                    count, so watchers compare it with their own clock (no skew between hosts);
                    never reset (a worker may beat before a ps task resets the job's keys)
  ended/<rank>      set when that worker's fit() ended: under TF_CONFIG or Slurm the chief
                    serves the store and stays until every worker ended or is gone
  hogwild_prefix    hogwild: the name prefix of the shared tables, chosen by the leader
  machine/<rank>    distributed-hogwild: that worker's "local_rank local_world_size"
  leaders/          distributed-hogwild: its machine leaders' averaging group (leaders.py)
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
from ..store.prefix import PrefixStore

__all__ = [
    "BEAT_S",
    "STORE_WAIT_S",
    "ElasticJob",
    "check_request",
    "mark_gone",
    "open_job",
    "start_group",
]

STORE_WAIT_S = 600.0  # how long a worker waits for the chief's tables or the others' end
BEAT_S = 1.0  # how often an elastic worker beats (and a watcher looks at the beats)
_POLL_S = 0.1
_PER_RANK_KEYS = (  # each worker's keys (the docstring above), formatted with its rank
    "position/{}",
    "done/{}",
    "gone/{}",
    "joined/{}",
    "model/{}",
    "checkpoint/{}",
    "resumed/{}",
    "timeline/{}",
    "machine/{}",
    "tables_ready/m{}",
    "leaders/final/{}",
    "ended/{}",
    "wgroup{}/generation",  # ps-async / ssp groups (by first rank)
)


def mark_gone(store: Any, job_id: str, rank: int) -> None:
    """Marks worker `rank` of job `job_id` gone in `store` (the job-end prefix of
    servers.JobEnd, then the elastic keys'): its gone/<rank> key, then the count of marks, which
    lets a watcher see that no worker is gone in one look instead of one per worker."""
    _mark_gone_under(f"pscore/train/{job_id or 'default'}/elastic", store, rank)


def _mark_gone_under(prefix: str, store: Any, rank: int) -> None:
    store.set(f"{prefix}/gone/{rank}", b"1")
    store.add(f"{prefix}/gone_marks", 1)


class ElasticJob:
    """The elastic keys of one job in its store."""

    def __init__(self, end: Any, world_size: int):
        """`end`: the job's servers.JobEnd (its store and key prefix)."""
        self.store, self.url, self.world_size = end.store, end.url, world_size
        self.prefix = f"{end.prefix}/elastic"
        self.keys = PrefixStore(self.prefix, self.store)  # the store under the elastic prefix
        self.beats_seen: dict = {}  # rank -> (its beat count, when this process saw it change)
        self.next_look = 0.0  # monotonic time of the next look at the beats
        self.ended_here = False  # this process's fit() ended (the chief waits at exit then)

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}"

    def reset(self) -> None:
        """Clears what an earlier job under the same id left (a ps task, before serving)."""
        names = ["tables_ready", "hogwild_prefix", "generation", "leaders/generation"]
        names += ["stop", "stop/claim", "gone_marks"]
        for rank in range(self.world_size):
            names += [key.format(rank) for key in _PER_RANK_KEYS]
        for name in names:
            self.store.delete_key(self._key(name))

    @staticmethod
    def _tables_name(machine: int | None) -> str:
        """The key of the job's dense tables (None), or of the shared tables of the machine
        whose first rank is `machine` (the hogwild strategies)."""
        return "tables_ready" if machine is None else f"tables_ready/m{machine}"

    def tables_created(self, machine: int | None = None) -> None:
        self.store.set(self._key(self._tables_name(machine)), b"1")

    def wait_tables(self, machine: int | None = None, timeout: float = STORE_WAIT_S) -> None:
        self.store.wait([self._key(self._tables_name(machine))], timeout)

    def leaders_value(self, name: str, value: str, is_leader: bool) -> str:
        """The value the leader set under `name` first: a replacement leader keeps it."""
        key = self._key(name)
        if is_leader and not self.store.check([key]):
            self.store.set(key, value.encode())
        self.store.wait([key], STORE_WAIT_S)
        return self.store.get(key).decode()

    def tables_exist(self, machine: int | None = None) -> bool:
        return self.store.check([self._key(self._tables_name(machine))])

    def last_generation(self, group: str = "") -> int:
        """The last generation formed of `group` ("": allreduce's group of every worker; a
        ps-async / ssp worker group's name otherwise)."""
        key = self._key(f"{group}generation")
        return int(self.store.get(key)) if self.store.check([key]) else 0

    def is_gone(self, rank: int) -> bool:
        """Whether worker `rank` died with no restart left (pscore-run --elastic marks it)."""
        return self.store.check([self._key(f"gone/{rank}")])

    def gone(self) -> set:
        """The ranks that died with no restart left (one look when none did: every poll of the
        job's end asks, elastic or not)."""
        if not self.store.add(self._key("gone_marks"), 0):
            return set()
        return {r for r in range(self.world_size) if self.is_gone(r)}

    def leads(self, rank: int) -> bool:
        """Whether `rank` writes for the job (checkpoints, the merged timeline): the chief, or
        with it gone the lowest worker left."""
        if rank == 0 or not self.store.check([self._key("gone/0")]):  # one look while it lives
            return rank == 0
        return rank == min(set(range(self.world_size)) - self.gone())

    def gone_unfinished(self) -> set:
        """The gone ranks that had not set done/<rank> (the job's end counter lacks them)."""
        return {r for r in self.gone() if not self.store.check([self._key(f"done/{r}")])}

    def _missing(self, store: Any, name: str, ranks: Any = None) -> tuple[list, set]:
        """(the ranks, default every worker, that neither set `name`/<rank> in `store` nor
        are gone; the gone ranks)."""
        gone = self.gone()
        ranks = range(self.world_size) if ranks is None else ranks
        return [r for r in ranks if r not in gone and not store.check([f"{name}/{r}"])], gone

    def unfinished(self, ranks: Any) -> list:
        """Those of `ranks` neither done nor gone (does not wait)."""
        return self._missing(self.keys, "done", ranks)[0]

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
        for rank in self.unfinished(range(self.world_size)) if ranks is None else ranks:
            beats = self.store.add(self._key(f"beat/{rank}"), 0)
            seen = self.beats_seen.get(rank)
            if seen is None or seen[0] != beats:
                self.beats_seen[rank] = (beats, now)
            elif beats and now - seen[1] >= after:
                _mark_gone_under(self.prefix, self.store, rank)
                print(
                    f"pscore: elastic worker {rank} sent no liveness beat for {after:g} s "
                    f"({_config.ELASTIC_GONE_AFTER.name}): marked gone; the job goes on "
                    "without it",
                    file=sys.stderr,
                    flush=True,
                )

    def check_not_gone(self, rank: int) -> None:
        """RuntimeError when `rank` was marked gone: it cannot rejoin the job."""
        if self.is_gone(rank):
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
        if not self.ended_here:
            return
        try:
            self._wait_each(self.keys, "ended", "end", timeout)
        except (errors.Error, OSError) as e:
            print(f"pscore: the chief leaves the elastic job's store: {e}", file=sys.stderr)

    def _wait_each(
        self, store: Any, name: str, what: str, timeout: float, ranks: Any = None
    ) -> set:
        """Waits until every rank has set `name`/<rank> in `store` or is gone; returns the
        gone ranks. TimeoutError naming the ranks still missing."""
        deadline = time.monotonic() + timeout
        while True:
            missing, gone = self._missing(store, name, ranks)
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
        ranks = list(range(self.world_size)) if ranks is None else list(ranks)
        store = PrefixStore(self._key(f"{group}group{generation}"), self.store)
        store.set(f"fresh/{rank}", b"1" if fresh else b"0")
        what = f"join {group or 'group'} generation {generation}"
        gone = self._wait_each(store, "fresh", what, STORE_WAIT_S, ranks)
        members = start_group(store, rank, [r for r in ranks if r not in gone])
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

    def record_position(self, rank: int, epoch: int, batch_in_epoch: int, step: int) -> None:
        self.store.set(self._key(f"position/{rank}"), f"{epoch} {batch_in_epoch} {step}".encode())

    def position(self, rank: int) -> tuple[int, int, int] | None:
        """(epoch, batch_in_epoch, global_step) the last worker of this rank reached; None at
        its start."""
        key = self._key(f"position/{rank}")
        if not self.store.check([key]):
            return None
        epoch, batch, step = self.store.get(key).split()
        return int(epoch), int(batch), int(step)

    def joined(self, rank: int) -> bool:
        """Whether a worker of this rank was set up before: this one replaces it."""
        return self.store.check([self._key(f"joined/{rank}")])

    def set_up(self, rank: int, epoch: int, batch_in_epoch: int, step: int) -> None:
        """Worker `rank` is set up at this position (resumed, or the job's start; a replacement
        keeps its predecessor's)."""
        if not self.joined(rank):
            self.record_position(rank, epoch, batch_in_epoch, step)
        self.store.set(self._key(f"joined/{rank}"), b"1")

    def post(self, name: str, rank: int, value: bytes) -> None:
        """This worker's `value` under `name` (collect() gathers them)."""
        self.store.set(self._key(f"{name}/{rank}"), value)

    def collect(self, name: str, what: str, timeout: float = STORE_WAIT_S) -> dict:
        """{rank: value} of what the workers post()ed under `name`, once every worker did or
        is gone (a gone one's value when it posted before it died)."""
        self._wait_each(self.keys, name, what, timeout)
        keys = {r: self._key(f"{name}/{r}") for r in range(self.world_size)}
        return {r: self.store.get(k) for r, k in keys.items() if self.store.check([k])}

    def agree_on_stop(
        self, rank: int, reason: str | None, keep_checkpoint: bool
    ) -> tuple[str | None, bool]:
        """stopping.agree for a job with no collective group (the PS strategies, hogwild): the
        first worker to ask posts its reason under `stop`, every worker reads it at its next
        step boundary (no wait: another may be gone). As stopping.agree: (the reason, this
        worker's own when it asked, else `worker r stopped: ...`; keep the final checkpoint)."""
        key = self._key("stop")
        if reason is not None and self.store.add(self._key("stop/claim"), 1) == 1:
            said = f"{int(not keep_checkpoint)} worker {rank} stopped: {reason}"
            self.store.set(key, said.encode())
        if not self.store.check([key]):
            return None, keep_checkpoint
        skip, theirs = self.store.get(key).decode().split(" ", 1)
        return (reason if reason is not None else theirs), keep_checkpoint and skip == "0"

    def worker_done(self, rank: int) -> None:
        self.store.set(self._key(f"done/{rank}"), b"1")

    def wait_all_done(self, timeout: float = STORE_WAIT_S) -> None:
        """Until every worker is done or gone."""
        self._wait_each(self.keys, "done", "be done", timeout)


def start_group(store: Any, rank: int, members: list) -> list:
    """The members of the group whose rendezvous keys `store` holds (the first to claim it
    fixes them from its `members`: all agree), joined as this worker's default process group;
    RuntimeError when `rank` is not one of them (it was marked gone)."""
    from .. import collectives

    if store.add("claim", 1) == 1:
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
    return members


def check_request(elastic: bool, run: Any, strategy: Any) -> None:
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
