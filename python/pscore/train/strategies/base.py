"""The interface every training strategy implements. The Trainer owns the loop (data, hooks,
checkpoints, progress); a strategy owns how gradients become weights on a cluster."""

from __future__ import annotations

from typing import Any

from ..timeline import Timeline

__all__ = ["Strategy"]


class Strategy:
    """One way of training on a cluster. The Trainer calls, on each training process:

    check(run)            before anything starts: ValueError when the cluster cannot run it
    check_elastic(run)    with Trainer(elastic=True): ValueError unless it trains elastically
    setup(trainer)        once, before the first step: same initial weights everywhere (the
                          chief's, or the servers' tables), optimizer built; self.timeline is
                          the Trainer's recorder (pscore.train.timeline) from then on
    backward(loss)        autograd (the allreduce strategy reduces from its hooks meanwhile)
    update()              gradients -> weights: reduce/push, step, pull
    join_step()           lockstep strategies: this worker has no batch left in the epoch while
                          others do; it takes part in their collectives (torch's Join idea)
    sync_model()          make trainer.model hold the job's current weights (PS: pull them)
    state_tensors()       worker-side state to checkpoint (the torch optimizer's), flat names
    load_state_tensors(t) the inverse, on resume
    save_servers(dir)     PS strategies, chief only: the servers' tables and optimizer state
    load_servers(dir)     the inverse, on resume
    after_resume()        every worker, once the chief loaded the servers: refresh what the
                          worker knows of them (a sync table's open round)
    finish()              end of fit: final weights in trainer.model, servers told (worker_done)
    serve(trainer)        on ps tasks: serve this task's shard until the job ends
    """

    name = ""
    needs_servers = False  # a cluster without parameter servers cannot run it
    lockstep = True  # every worker takes every step together (collectives each step)
    timeline: Timeline = Timeline(-1, record=False)  # the Trainer's, from setup on
    elastic: Any = None  # the Trainer's elastic.ElasticJob with elastic=True
    regroups = False  # elastic: re-forms its collective group after a failed step (regroup())

    def __init__(self, **options: Any):
        if options:
            raise TypeError(
                f"strategy {self.name!r} takes no option {', '.join(map(repr, options))}"
            )
        self.trainer: Any = None

    def check(self, run: Any) -> None:
        if self.needs_servers and run.num_servers < 1:
            raise ValueError(
                f"strategy {self.name!r} needs parameter servers and the cluster has none: start "
                "them with pscore-run --servers M, list ps tasks in TF_CONFIG / ClusterSpec, or "
                "run pserver and set PSCORE_STORE"
            )

    def check_elastic(self, run: Any) -> None:  # noqa: ARG002 - the elastic ones look at it
        raise ValueError(
            f"strategy {self.name!r} does not train elastically; elastic=True takes pscore's "
            "strategies (see docs/train.md, Elastic training)"
        )

    def setup(self, trainer: Any) -> None:
        self.trainer = trainer
        self.timeline = trainer.timeline

    def backward(self, loss: Any) -> None:
        loss.backward()

    def update(self) -> None:
        raise NotImplementedError

    def join_step(self) -> None:
        pass

    def sync_model(self) -> None:
        pass

    def state_tensors(self) -> dict:
        return {}

    def load_state_tensors(self, tensors: dict) -> None:
        pass

    def save_servers(self, directory: str) -> None:
        pass

    def load_servers(self, directory: str) -> None:
        pass

    def after_resume(self) -> None:
        pass

    def finish(self) -> None:
        pass

    def serve(self, trainer: Any) -> None:  # noqa: ARG002 - PS strategies use it
        raise ValueError(f"strategy {self.name!r} has no parameter servers to serve")

    def __repr__(self) -> str:
        return f"<strategy {self.name}>"
