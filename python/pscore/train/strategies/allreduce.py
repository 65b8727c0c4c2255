"""allreduce: data parallelism as DDP does it. Parameters start from the chief's; after each
backward the gradients are averaged across workers with pscore.all_reduce and every worker
steps the same torch.optim optimizer, so all keep identical weights. (SINGA AllReduce, Caffe2
data_parallel_model, TF (MultiWorker)MirroredStrategy.)"""

from __future__ import annotations

from typing import Any

from ... import collectives
from ..state import load_optimizer_tensors, optimizer_tensors
from .base import Strategy

__all__ = ["AllReduce"]


class AllReduce(Strategy):
    name = "allreduce"

    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        model = trainer.model
        for t in [*model.parameters(), *model.buffers()]:
            collectives.broadcast(t.data, src=0)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = trainer.optimizer_choice.torch(self.params)

    def _reduce(self, contributing: bool) -> None:
        import torch

        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads] + [torch.ones(1)])
        if not contributing:
            flat.zero_()
        collectives.all_reduce(flat, op="sum")
        count = flat[-1].item()
        at = 0
        for p in self.params:
            n = p.numel()
            p.grad = (flat[at : at + n] / count).view_as(p)
            at += n

    def update(self) -> None:
        self._reduce(True)
        self.optimizer.step()
        self.optimizer.zero_grad()

    def join_step(self) -> None:
        self._reduce(False)
        self.optimizer.step()
        self.optimizer.zero_grad()

    def state_tensors(self) -> dict:
        return optimizer_tensors(self.optimizer)

    def load_state_tensors(self, tensors: dict) -> None:
        load_optimizer_tensors(self.optimizer, tensors)
