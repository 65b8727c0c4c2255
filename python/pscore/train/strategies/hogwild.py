"""hogwild: HOGWILD! (Niu et al. 2011; PyTorch's mnist_hogwild) under the Trainer. The workers
of one machine train one model held in shared-memory tables (pscore.hogwild.SharedParameters)
and update it in place, without locks and without exchanging gradients: each runs its own
shard's batches at its own pace and applies its step with the fused Hogwild kernels, whose
optimizer state (momentum buffers, accumulators, moments) is shared as well.

The machine's leader (local rank 0) makes the tables from its model under a name no other job,
run or machine on the host uses; after a barrier the others attach and bind their models to
them (the parameters ARE the shared memory), and after a second one the leader unlinks the
names: the mappings live on, and nothing is left in /dev/shm however the job ends. finish()
waits until every worker of the machine is done, then each worker's model gets a copy of the
final weights as ordinary tensors and the tables are released."""

from __future__ import annotations

from typing import Any

from ... import collectives
from ...hogwild import SharedParameters, optim_options
from ...hogwild.table import STATE_NAMES
from ..timeline import COMPUTE, WAIT
from . import machines
from .base import Strategy

__all__ = ["SUPPORTED_OPTIMIZERS", "Hogwild"]

SUPPORTED_OPTIMIZERS = ("sgd", "adagrad", "adam", "adamw")  # the Hogwild kernels' optimizers


def hogwild_optimizer(strategy: str, choice: Any) -> tuple[str, dict]:
    """The Trainer's optimizer as the Hogwild kernels run it (name, torch.optim's options);
    ValueError/TypeError naming the strategy when they cannot."""
    if choice.name not in SUPPORTED_OPTIMIZERS:
        raise ValueError(
            f"strategy {strategy!r} updates the shared tables with pscore's Hogwild kernels, "
            f"which run {', '.join(SUPPORTED_OPTIMIZERS)}; optimizer {choice.label} is not "
            "one of them"
        )
    try:  # every worker checks, so a bad option fails everywhere before any table is made
        optim_options.kernel_options(choice.name, optim_options.resolve(choice.name, choice.args))
    except (TypeError, ValueError) as e:
        raise type(e)(f"strategy {strategy!r}: {e}") from None
    return choice.name, dict(choice.args)


class Hogwild(Strategy):
    name = "hogwild"
    lockstep = False  # each worker runs its own batches; one done early just stops

    def __init__(self, **options: Any):
        super().__init__(**options)
        self.machine: machines.Machine | None = None
        self.machine_group: Any = None  # None: the default group (hogwild: one machine)
        self.shared: SharedParameters | None = None
        self.optimizer: Any = None

    def check(self, run: Any) -> None:
        super().check(run)
        local = run.env.local_world_size if run.env is not None else 1
        if local != run.world_size:
            raise ValueError(
                f"strategy {self.name!r} trains the workers of one machine on its shared memory; "
                f"this job has {run.world_size} workers, {local} on this machine: use "
                "'distributed-hogwild' for several machines"
            )

    # ---- setup ----------------------------------------------------------------------------
    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        kind, args = hogwild_optimizer(self.name, trainer.optimizer_choice)
        if self.elastic is not None:
            self.machine = self._elastic_machine(trainer.run)
            self._share_elastic(trainer.model, kind, args)
        else:
            self.machine = machines.this_machine(trainer.run)
            self._join_machine()
            self._share(trainer.model, kind, args)
        self.optimizer = self.shared.optimizer(trainer.model)

    def _join_machine(self) -> None:
        """Hook for the groups a strategy needs before the tables are shared."""

    @property
    def is_leader(self) -> bool:
        return self.trainer.run.rank == self.machine.leader

    def _share(self, model: Any, kind: str, args: dict) -> None:
        prefix = self.machine.prefix
        if self.is_leader:
            self.shared = SharedParameters(model, optimizer=kind, prefix=prefix, **args)
        collectives.barrier(self.machine_group)  # the tables exist
        if not self.is_leader:
            self.shared = SharedParameters.attach(model, prefix, optimizer=kind, **args)
        collectives.barrier(self.machine_group)  # every worker holds them
        if self.is_leader:
            for t in self.shared.tables.values():
                t.unlink()  # the mappings stay; no name outlives the job, even a killed one

    # ---- elastic (Trainer(elastic=True): the job's store instead of collectives) ----------
    def check_elastic(self, run: Any) -> None:
        """Elastic: one machine's workers share the tables; a replacement attaches to them."""

    def _elastic_machine(self, run: Any) -> machines.Machine:
        ranks = list(range(run.world_size))  # check(): every worker is on this machine
        return machines.Machine(ranks, [ranks], machines.elastic_table_prefix(run, self.elastic, 0))

    def _share_elastic(self, model: Any, kind: str, args: dict) -> None:
        """The leader makes the tables (a replacement leader attaches to its predecessor's);
        the names stay until every worker is done, so that a replacement can attach."""
        prefix, first = self.machine.prefix, self.machine.leader
        if self.is_leader and not self.elastic.tables_exist(first):
            self.shared = SharedParameters(model, optimizer=kind, prefix=prefix, **args)
            self.elastic.tables_created(first)
        else:
            self.elastic.wait_tables(first)
            self.shared = SharedParameters.attach(model, prefix, optimizer=kind, **args)

    def _finish_elastic(self) -> None:
        """Every worker done (the tables hold the final weights); the lowest worker left (the
        leader unless it is gone) unlinks the names."""
        with self.timeline.span("wait workers done", WAIT):
            self.elastic.worker_done(self.trainer.run.rank)
            self.elastic.wait_all_done()
        if self.trainer.run.rank == min(set(self.machine.ranks) - self.elastic.gone()):
            for t in self.shared.tables.values():
                t.unlink()
        self._release()

    # ---- training -------------------------------------------------------------------------
    def update(self) -> None:
        if self.optimizer is None:
            raise RuntimeError(
                f"strategy {self.name!r} has finished (fit() ended and released the shared "
                "tables); make a new Trainer to train again"
            )
        with self.timeline.span("optimizer", COMPUTE):
            self.optimizer.step()
        self.optimizer.zero_grad()

    def finish(self) -> None:
        if self.elastic is not None:
            self._finish_elastic()
            return
        self._end_training()
        self._release()

    def _end_training(self) -> None:
        """Returns once the machine's tables hold the final weights."""
        with self.timeline.span("wait workers done", WAIT):
            collectives.barrier(self.machine_group)  # every worker of the machine is done

    def _release(self) -> None:
        """Each worker's model gets the final weights as ordinary tensors; the tables go.
        Buffers (never shared) are made the chief's everywhere (elastic: each keeps its own)."""
        model = self.trainer.model
        self.shared.unbind(model)
        self.shared.close()
        self.shared = self.optimizer = None
        if self.elastic is None:
            for b in model.buffers():
                collectives.broadcast(b.data, src=0)

    # ---- checkpoints ----------------------------------------------------------------------
    def _state_arrays(self):
        """(name in optimizer_tensors' format, parameter, table state view) per state array."""
        for i, (name, p) in enumerate(self.trainer.model.named_parameters()):
            t = self.shared.tables[name]
            for state in STATE_NAMES[t.optimizer]:
                yield f"optimizer/{i}/{state}", p, t.state(state, as_torch=True)

    def state_tensors(self) -> dict:
        """The tables' optimizer state by torch's names (the weights are the model's). The
        step count of Adam's bias correction and Adagrad's lr_decay is the tables' own update
        counter, which is not saved: it starts again from 0 on resume."""
        if self.shared is None:
            return {}
        return {key: view.clone().reshape(p.shape) for key, p, view in self._state_arrays()}

    def load_state_tensors(self, tensors: dict) -> None:
        arrays = list(self._state_arrays())
        missing = [key for key, _, _ in arrays if key not in tensors]
        if missing:
            raise ValueError(
                f"strategy {self.name!r}: the checkpoint lacks the optimizer state "
                f"{', '.join(missing[:5])}"
            )
        for key, p, view in arrays:
            if tensors[key].numel() != view.numel():
                raise ValueError(
                    f"strategy {self.name!r}: the checkpoint's {key} has "
                    f"{tuple(tensors[key].shape)}, the parameter {tuple(p.shape)}"
                )
            view.copy_(tensors[key].reshape(view.shape))
