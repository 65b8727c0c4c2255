"""The Trainer's parameter servers: workers connect to every shard; a ps task serves its shard
until the job ends.

The end of the job is told through a store, so that no task must start first: every worker,
when its fit() is over (weights pulled, worker_done sent), adds 1 to a counter in the job's
store; a ps task serves until that counter reaches the job's worker count, adds 1 to a second
counter and returns. The store is PSCORE_STORE's (pscore-run hosts one for its run), else, under
TF_CONFIG or Slurm, the job's rendezvous store that the chief serves; in that case the chief
leaves only after every ps task has seen the end, since its store goes with it. A ps task whose
store stops answering exits non-zero. Under Slurm the shards publish their addresses in that
store too (TF_CONFIG names them)."""

from __future__ import annotations

import time
import urllib.parse
from typing import Any

from .. import _config, errors
from ..collectives.rendezvous import advertised_host
from ..ps import PSClient, environment
from ..ps import discovery as ps_discovery
from ..ps.server import PServer
from ..store.create import env_store
from .elastic import ElasticJob

__all__ = ["JOB_END_TIMEOUT_S", "JobEnd", "connect", "finish_job", "job_store", "serve"]

JOB_END_TIMEOUT_S = 300.0  # the chief's wait for the ps tasks to see the end (TF_CONFIG, Slurm)
STORE_WAIT_S = 600.0  # how long a task waits for the job's store to come up
_POLL_S = 0.2


_CHIEF_SERVED_SOURCES = ("tf_config", "slurm")  # discover() sources whose chief serves the store


def job_store(run: Any) -> tuple[str, bool] | None:
    """(URL of the job's store, whether the chief serves it): PSCORE_STORE's, else under
    TF_CONFIG or Slurm the chief's rendezvous store; None when the job has neither."""
    url = _config.STORE.get()
    if url is not None:
        return url, False
    env = run.env
    if env is None or env.source not in _CHIEF_SERVED_SOURCES:
        return None
    return f"tcp://{env.master_addr}:{env.master_port}", True


def connect(run: Any, timeout: float = 60.0) -> Any:
    """A PSClient on every shard of the job, found through the environment (PSCORE_STORE, else
    TF_CONFIG's ps tasks, else under Slurm the job's store); connecting retries until
    `timeout`, so workers may start before the servers."""
    slurm = _config.STORE.get() is None and run.env is not None and run.env.source == "slurm"
    store = job_store(run)[0] if slurm else None  # None: PSClient reads PSCORE_STORE / TF_CONFIG
    return PSClient(worker_id=run.rank, store=store, connect_timeout=timeout)


class JobEnd:
    """The job-end counters in the job's store (see the module doc)."""

    def __init__(self, store: Any, url: str, chief_hosts: bool):
        self.store, self.url, self.chief_hosts = store, url, chief_hosts
        self.prefix = prefix = f"pscore/train/{environment.job_id() or 'default'}"
        self.finished_key = f"{prefix}/workers_finished"
        self.released_key = f"{prefix}/servers_released"

    @classmethod
    def open(cls, run: Any, timeout: float = STORE_WAIT_S, serve: bool = False) -> JobEnd | None:
        """The job's store (job_store); None when the job has none (no ps task of a Trainer can
        be waiting then). `serve`: the chief starts the store where it serves it (an elastic
        job, which forms no process group whose rendezvous would)."""
        found = job_store(run)
        if found is None:
            return None
        url, chief_hosts = found
        if serve and chief_hosts and run.is_chief:
            return cls(env_store(run.env, 0, run.world_size, timeout), url, chief_hosts)
        return cls(ps_discovery.open_store(url, timeout), url, chief_hosts)

    def count(self, key: str) -> int:
        return self.store.add(key, 0)

    def reset(self) -> None:
        """Clears counts an earlier job under the same job id left in a long-lived store (a ps
        task does it before serving: no worker can have finished while a shard was down)."""
        for key in (self.finished_key, self.released_key):
            self.store.delete_key(key)

    def worker_finished(self) -> int:
        return self.store.add(self.finished_key, 1)

    def wait_released(self, run: Any, timeout: float = JOB_END_TIMEOUT_S) -> None:
        """The chief, when it hosts the store: waits until every worker finished and every ps
        task saw it."""
        deadline = time.monotonic() + timeout
        elastic = ElasticJob(self, run.world_size)
        while True:
            finished, released = self.count(self.finished_key), self.count(self.released_key)
            finished += len(elastic.gone_unfinished())
            if finished >= run.world_size and released >= run.num_servers:
                return
            if time.monotonic() >= deadline:
                raise errors.TimeoutError(
                    f"the chief serves the job's store and waited {timeout:g} s for the job to "
                    f"end: {finished} of {run.world_size} workers finished, {released} of "
                    f"{run.num_servers} ps tasks saw it"
                )
            time.sleep(_POLL_S)


def finish_job(run: Any, timeout: float = STORE_WAIT_S) -> None:
    """A worker's last act in a job with parameter servers: count itself finished in the job's
    store (the ps tasks return once every worker has); the chief, when it hosts that store,
    stays until every ps task saw the end."""
    end = JobEnd.open(run, timeout)
    if end is not None:
        end.worker_finished()
        if end.chief_hosts and run.is_chief:
            end.wait_released(run)


def _start_shard(run: Any, store: Any, store_url: str) -> PServer:
    """This ps task's shard: where TF_CONFIG puts it, else at a free port published in the
    store, on the address a rank would advertise towards the store's host (PSCORE_HOST when
    set; loopback for a store on loopback, as under pscore-run; else this host's address on
    the route to the store, so that workers on other hosts reach the shard)."""
    placement = environment.shard_from_tf_config() if run.env is not None else None
    if placement is not None:
        return PServer(
            placement.shard,
            placement.num_shards,
            placement.num_workers,
            host=placement.bind_host,
            port=placement.port,
            store=store if _config.STORE.get() else None,
        )
    host = advertised_host(urllib.parse.urlsplit(store_url).hostname)
    return PServer(run.shard, run.num_servers, run.world_size, host=host, store=store)


def _worker_gone(run: Any, rank: int) -> None:
    """Worker `rank` is gone (pscore-run --elastic saw it die with no restart left, or its
    beat stopped for PSCORE_ELASTIC_GONE_AFTER s): worker_done on its behalf (to every shard:
    each ps task sends it, the servers take it once), so that sync rounds and ssp bounds close
    without it."""
    with PSClient(worker_id=rank, connect_timeout=30.0) as client:
        client.worker_done()
    print(
        f"pscore: ps task (shard {run.shard}): worker {rank} is gone; the job goes on without it",
        flush=True,
    )


def serve(run: Any, timeout: float = STORE_WAIT_S) -> None:
    """Serves this ps task's shard until every worker of the job has finished, then stops it
    and returns. SystemExit (non-zero, with a message) when the job's store cannot be reached
    or stops answering: the job is gone."""
    who = f"ps task (shard {run.shard})"
    try:
        end = JobEnd.open(run, timeout)
    except (errors.Error, OSError) as e:
        raise SystemExit(f"{who}: cannot reach the job's store: {e}") from None
    if end is None:
        raise SystemExit(
            f"{who}: the job has no store to tell its end; set {_config.STORE.name} (pscore-run "
            "--servers does) or run under TF_CONFIG or Slurm"
        )
    end.reset()
    elastic = ElasticJob(end, run.world_size)
    elastic.reset()
    server = _start_shard(run, end.store, end.url)
    print(f"pscore: {who} serving on {server.address}", flush=True)
    told: set = set()  # gone workers this shard was told worker_done for
    try:
        finished = 0
        while finished < run.world_size:
            time.sleep(_POLL_S)
            try:
                elastic.mark_stalled()
                gone = elastic.gone_unfinished()
                for rank in sorted(gone - told):
                    _worker_gone(run, rank)
                told |= gone
                finished = end.count(end.finished_key) + len(gone)
            except (errors.Error, OSError) as e:
                raise SystemExit(
                    f"{who}: the job's store at {end.url} stopped answering after {finished} of "
                    f"{run.world_size} workers finished ({e}); the job is gone"
                ) from None
        end.store.add(end.released_key, 1)
    finally:
        server.stop(drain_timeout=5.0)
