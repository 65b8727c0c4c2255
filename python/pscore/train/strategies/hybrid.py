"""hybrid: dense parameters by allreduce, embedding tables on the parameter servers (ElasticDL's
big embeddings, PERSIA).

At setup each trainable torch.nn.Embedding / EmbeddingBag with at least `min_rows` rows
becomes a sparse table on the servers and its local weight is freed (see
pscore.train.server_embeddings): a forward pulls only the rows of the batch's distinct ids, and
update() pushes their gradients. The tables are `sync` (BSP): a shard applies the mean of the
workers' row gradients once every worker has pushed, with the Trainer's optimizer run on the
servers (pscore.ps.optim, torch.optim's arithmetic; an untouched row is not updated, as with
torch's sparse optimizers). Everything else is trained exactly as the allreduce strategy trains
it; the sparse push is in flight while the dense gradients are reduced.

Rows are created on the servers the first time an id is touched, from `row_init` (default
normal(0, 1), torch's initialisation of both modules; seeded per table by the Trainer's seed),
not copied from the chief's weights: a sparse table has no bulk assignment, and a table of
millions of rows should not cross the wire at every start. A padding_idx row reads as zeros
and is never pushed, as torch keeps it. Forwards look rows up on the servers until fit() ends;
then (restore_at_end, the default) every worker pulls the tables back into the modules'
weights, so the model stands alone once the ps tasks are gone (rows never touched come back
with their initial values)."""

from __future__ import annotations

import zlib
from typing import Any

from ... import collectives
from .. import servers
from ..server_embeddings import ServerEmbedding, find_embeddings
from .allreduce import AllReduce
from .base import Strategy

__all__ = ["Hybrid"]

_ROW_INIT_KEYS = ("initializer", "mean", "std", "low", "high", "value")
TABLE_PREFIX = "hybrid/"  # a module "emb.user" is the servers' table "hybrid/emb.user"


class Hybrid(AllReduce):
    """Options: min_rows (only tables with at least this many rows go to the servers; the
    others are dense parameters; default 0 = all), row_init (create_sparse initializer
    settings, default {"initializer": "normal", "mean": 0.0, "std": 1.0}), restore_at_end
    (pull the trained tables into the modules when fit() ends; default True)."""

    name = "hybrid"
    needs_servers = True

    def __init__(
        self,
        min_rows: int = 0,
        row_init: dict | None = None,
        restore_at_end: bool = True,
        **options: Any,
    ):
        if isinstance(min_rows, bool) or not isinstance(min_rows, int) or min_rows < 0:
            raise ValueError(f"strategy 'hybrid': min_rows must be an int >= 0, got {min_rows!r}")
        row_init = dict(row_init or {"initializer": "normal", "mean": 0.0, "std": 1.0})
        unknown = sorted(set(row_init) - set(_ROW_INIT_KEYS))
        if unknown:
            raise ValueError(
                f"strategy 'hybrid': row_init takes {', '.join(_ROW_INIT_KEYS)}, not "
                f"{', '.join(map(repr, unknown))}"
            )
        super().__init__(**options)
        self.min_rows, self.row_init = min_rows, row_init
        self.restore_at_end = bool(restore_at_end)
        self.ended = False
        self.tables: list[ServerEmbedding] = []
        self.client: Any = None
        self.dense = True  # the model has parameters left to allreduce
        self.unanswered: list | None = None  # elastic: the row pushes of a step that failed
        self.final_rounds: dict[str, int] = {}  # each sparse table's closed rounds at the end

    def setup(self, trainer: Any) -> None:
        found = find_embeddings(trainer.model, self.min_rows)
        if not found and trainer.run.is_chief:
            trainer.log(
                f"pscore.train: strategy 'hybrid': the model has no trainable nn.Embedding or "
                f"nn.EmbeddingBag with >= {self.min_rows} rows; every parameter trains by "
                "allreduce"
            )
        self.client = servers.connect(trainer.run)
        optimizer = trainer.optimizer_choice.server()
        self.tables = [
            ServerEmbedding(
                self.client,
                TABLE_PREFIX + name,
                name,
                module,
                trainer.timeline,
                optimizer=optimizer,
                consistency="sync",
                seed=(trainer.seed << 32) ^ zlib.crc32(name.encode()),
                **self.row_init,
            )
            for name, module in found
        ]
        self.dense = any(p.requires_grad for p in trainer.model.parameters())
        self.regroups = self.dense  # elastic: with no dense half there is no group to re-form
        if self.dense:  # the dense half: what is left in model.parameters()
            super().setup(trainer)
        else:  # every parameter is on the servers
            Strategy.setup(self, trainer)

    def _with_rows_pushed(self, dense_step: Any) -> None:
        """Starts every table's push, runs the dense step meanwhile, then waits for the pushes
        (a sync table answers once every worker's push of the step has arrived). Elastic: when
        the dense step fails (a member died), its pushes stay in their round; the step taken
        again in the re-formed group pushes no rows a second time but waits for those (the round
        closes with the replacement's push, or without the gone worker)."""
        if self.unanswered is None:
            self.unanswered = [t.push_async() for t in self.tables]
        else:
            for t in self.tables:
                t.gradient()  # the retaken step's rows: already pushed by the failed one
        dense_step()
        for t, w in zip(self.tables, self.unanswered):
            t.wait_push(w)
        self.unanswered = None

    def update(self) -> None:
        self._with_rows_pushed(super().update if self.dense else _nothing)

    def join_step(self) -> None:
        self._with_rows_pushed(super().join_step if self.dense else _nothing)

    def state_tensors(self) -> dict:
        return super().state_tensors() if self.dense else {}

    def load_state_tensors(self, tensors: dict) -> None:
        if self.dense:
            super().load_state_tensors(tensors)

    def serve(self, trainer: Any) -> None:
        servers.serve(trainer.run)

    def finish(self) -> None:
        """worker_done, then once every worker's last push is in, the tables back into the
        modules (restore_at_end) and the job's store told this worker finished."""
        if self.ended:
            return
        super().finish()
        self.client.worker_done()
        if self.elastic is None:
            collectives.barrier()
        else:  # no collective: a worker may be gone
            self.elastic.worker_done(self.trainer.run.rank)
            self.elastic.wait_all_done()
        self.final_rounds = {t.table: self.client.table_step(t.table) for t in self.tables}
        if self.restore_at_end:
            for t in self.tables:
                t.restore()
        self.ended = True
        servers.finish_job(self.trainer.run)

    def save_servers(self, directory: str) -> None:
        self.client.save(directory)

    def load_servers(self, directory: str) -> None:
        self.client.load(directory)

    def after_resume(self) -> None:
        """Looks the sync tables up again: their rounds went on from the checkpoint's (see
        PSStrategy.after_resume)."""
        for t in self.tables:
            self.client.lookup_table(t.table)


def _nothing() -> None:
    pass
