"""What every strategy with parameter servers shares: ps tasks serve their shard
(pscore.train.servers.serve); workers connect to every shard at setup, keep dense parameters in
server-side tables (created by the chief from its weights, updated by the server-side optimizer
named as the Trainer's optimizer), save and load the servers' tables for checkpoints, and at the
end of fit send worker_done, pull the final weights and tell the job's store they finished."""

from __future__ import annotations

from typing import Any

from ... import collectives
from .. import servers
from ..timeline import COMMUNICATION, WAIT
from .base import Strategy

__all__ = ["PSStrategy"]

TABLE_PREFIX = "dense/"
_WAIT_FOR = {"sync": "sync round", "ssp": "ssp bound", "async": "push_pull"}  # what a push waits on


class _TableTrace:
    """A table's timeline names and lane, and the bytes of one push_pull (gradient + values)."""

    def __init__(self, timeline: Any, table: str, consistency: str, param: Any):
        self.label = f"push_pull {table}"
        self.wait_label = f"wait {_WAIT_FOR[consistency]} {table}"
        self.lane = timeline.lane(self.label)
        self.nbytes = 2 * param.nbytes


class PSStrategy(Strategy):
    """Base of ps-sync, ps-async, ssp and hybrid. Subclasses set `consistency` and extend
    `table_settings()`; `self.tables` maps table name -> the parameter it holds."""

    needs_servers = True
    consistency = "async"

    def __init__(self, connect_timeout: float = 60.0, **options: Any):
        super().__init__(**options)
        if isinstance(connect_timeout, bool) or not isinstance(connect_timeout, (int, float)):
            raise TypeError(f"connect_timeout must be seconds, not {connect_timeout!r}")
        self.connect_timeout = float(connect_timeout)
        self.client: Any = None
        self.tables: dict[str, Any] = {}
        self.ended = False
        self.final_step = 0

    # ---- ps tasks ---------------------------------------------------------------------------
    def serve(self, trainer: Any) -> None:
        servers.serve(trainer.run)

    # ---- workers ----------------------------------------------------------------------------
    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        self.client = servers.connect(trainer.run, self.connect_timeout)

    def table_settings(self) -> dict:
        """create_dense's settings for every dense table of this strategy."""
        return {
            "optimizer": self.trainer.optimizer_choice.server(),
            "consistency": self.consistency,
        }

    def create_dense_tables(self, params: dict) -> None:
        """One dense table per parameter (name -> tensor): the chief creates them from its
        weights (a table that already exists keeps the servers' values), the others wait for it;
        then every worker pulls them into the model. Buffers (e.g. BatchNorm statistics) are the
        chief's, broadcast."""
        for name, p in params.items():
            if not (p.dtype.is_floating_point and p.dtype.itemsize == 4 and p.device.type == "cpu"):
                raise ValueError(
                    f"strategy {self.name!r}: parameter {name!r} is {p.dtype} on {p.device}; the "
                    "parameter servers hold float32 CPU parameters"
                )
        self.tables = {TABLE_PREFIX + name: p for name, p in params.items()}
        self.traces = {
            t: _TableTrace(self.timeline, t, self.consistency, p) for t, p in self.tables.items()
        }
        self.dense_nbytes = sum(p.nbytes for p in self.tables.values())
        is_chief = self.trainer.run.is_chief
        if is_chief:
            settings = self.table_settings()
            for table, p in self.tables.items():
                self.client.create_dense(table, init=p.detach(), **settings)
        if self.elastic is not None:  # no collectives: each worker keeps its own buffers
            self.elastic.tables_created() if is_chief else self.elastic.wait_tables()
        else:
            collectives.barrier()  # the others look the tables up once the chief made them
            for b in self.trainer.model.buffers():
                collectives.broadcast(b.data, src=0)
        self.sync_model()

    def pull_into_model(self) -> None:
        if self.tables:
            with self.timeline.span("pull", COMMUNICATION, nbytes=self.dense_nbytes):
                self.client.pull_many({t: p.data for t, p in self.tables.items()})

    def push_pull(self, grads: dict) -> None:
        """Pushes each table's gradient and pulls its new values into the parameter, every
        table's request in flight at once (each table's lane shows its round trip)."""
        timeline = self.timeline
        works = [
            (self.traces[t], timeline.now(), self.client.push_pull_async(t, g, self.tables[t].data))
            for t, g in grads.items()
        ]
        for trace, started, work in works:
            timeline.wait(work, trace.label, trace.wait_label, started, trace.lane, trace.nbytes)

    def increment_global_step(self) -> None:
        with self.timeline.span("increment_global_step", COMMUNICATION, nbytes=16):
            self.client.increment_global_step()

    def gradients(self) -> dict:
        """table name -> this worker's gradient of its parameter (zeros when it has none)."""
        import torch

        return {
            t: p.grad if p.grad is not None else torch.zeros_like(p) for t, p in self.tables.items()
        }

    def zero_grad(self) -> None:
        for p in self.tables.values():
            p.grad = None

    def check_running(self) -> None:
        if self.ended:
            raise RuntimeError(
                f"strategy {self.name!r}: this job has ended (fit() finished and told the "
                "servers); a job with parameter servers trains one fit()"
            )

    def global_step(self) -> int:
        """The job's global step as the servers count it (updates applied to the tables); after
        finish(), its value then."""
        return self.final_step if self.ended else self.client.global_step()

    def sync_model(self) -> None:
        """Pulls the servers' values; after finish() the model already holds the final ones
        (and the ps tasks may be gone)."""
        if not self.ended:
            self.pull_into_model()

    def save_servers(self, directory: str) -> None:
        self.client.save(directory)

    def load_servers(self, directory: str) -> None:
        self.client.load(directory)

    def after_resume(self) -> None:
        """Looks every table up again: the loaded tables' sync rounds (ssp clocks) went on from
        the checkpoint's, and a push still carrying the round this client learnt before the
        load would be dropped as late. Then the servers' values into the model."""
        for table in self.tables:
            self.client.lookup_table(table)
        self.sync_model()

    def finish(self) -> None:
        """worker_done (sync rounds and ssp bounds stop waiting for this worker), then, once
        every worker got there, the final weights into the model and the job's store told."""
        if self.ended:
            return
        self.client.worker_done()
        with self.timeline.span("wait workers done", WAIT):
            if self.elastic is None:
                collectives.barrier()
            else:
                self.elastic.worker_done(self.trainer.run.rank)
                self.elastic.wait_all_done()
        self.pull_into_model()
        self.final_step = self.client.global_step()
        self.ended = True
        servers.finish_job(self.trainer.run, self.connect_timeout)
