"""allreduce: data parallelism as DDP does it. Parameters and buffers start from the chief's.
The gradients live in flat buckets (each parameter's .grad is a view into its bucket, so autograd
accumulates straight into them); the parameters are bucketed in reverse order, so the last
layers' bucket fills first, and a bucket is all-reduced asynchronously from the autograd hooks
as soon as its last gradient lands, while backward still runs on the earlier layers. update()
waits for the buckets, divides by the number of contributing workers and steps the same
torch.optim optimizer everywhere, so all workers keep identical weights. (SINGA AllReduce,
Caffe2 data_parallel_model, TF (MultiWorker)MirroredStrategy, ElasticDL's overlap.)

Uneven shards (torch's Join idea): a worker out of batches calls join_step(), which reduces
zero buckets with a contributor count of 0; it receives the contributors' mean and steps too.
Each bucket carries the count in one extra slot. Buckets are reduced in the same order on every
worker: a bucket starts only after every bucket before it started, and update() starts the ones
whose parameters got no gradient this step (unused parameters reduce as zeros)."""

from __future__ import annotations

from typing import Any

from ... import collectives
from ..state import load_optimizer_tensors, optimizer_tensors
from .base import Strategy

__all__ = ["AllReduce"]

MB = 1 << 20


class _Bucket:
    """One flat buffer: the gradients of `params` back to back, then the contributor count."""

    def __init__(self, params: list, dtype: Any):
        import torch

        self.params = params
        numel = sum(p.numel() for p in params)
        self.flat = torch.zeros(numel + 1, dtype=dtype)
        self.grads, at = [], 0
        for p in params:
            self.grads.append(self.flat[at : at + p.numel()].view_as(p))
            at += p.numel()
        self.pending = len(params)  # gradients still to land this step
        self.work = None  # the running all_reduce

    def reset(self, count: float) -> None:
        """Zero gradients (autograd adds into them) and this worker's contribution `count`."""
        self.flat.zero_()
        self.flat[-1] = count
        self.pending = len(self.params)
        self.work = None


def _buckets(params: list, cap_bytes: int, first_cap_bytes: int) -> list:
    """Parameters in reverse order cut into buckets of about cap_bytes (the first of
    first_cap_bytes, so communication starts early), one dtype per bucket."""
    buckets, current, size = [], [], 0
    for p in reversed(params):
        cap = first_cap_bytes if not buckets else cap_bytes
        if current and (size >= cap or p.dtype != current[0].dtype):
            buckets.append(_Bucket(current, current[0].dtype))
            current, size = [], 0
        current.append(p)
        size += p.numel() * p.element_size()
    if current:
        buckets.append(_Bucket(current, current[0].dtype))
    return buckets


def _check_size(option: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"strategy 'allreduce': {option} must be a number > 0, got {value!r}")


class AllReduce(Strategy):
    """Options: bucket_cap_mb (default 25, as DDP), first_bucket_mb (default 1, as DDP)."""

    name = "allreduce"

    def __init__(self, bucket_cap_mb: float = 25.0, first_bucket_mb: float = 1.0):
        super().__init__()
        _check_size("bucket_cap_mb", bucket_cap_mb)
        _check_size("first_bucket_mb", first_bucket_mb)
        self.cap_bytes = int(bucket_cap_mb * MB)
        self.first_cap_bytes = int(first_bucket_mb * MB)

    def setup(self, trainer: Any) -> None:
        super().setup(trainer)
        model = trainer.model
        for t in [*model.parameters(), *model.buffers()]:
            collectives.broadcast(t.data, src=0)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.buckets = _buckets(self.params, self.cap_bytes, self.first_cap_bytes)
        self.next_bucket = 0  # buckets start in this order on every worker
        for index, bucket in enumerate(self.buckets):
            bucket.reset(1.0)
            for p, grad in zip(bucket.params, bucket.grads):
                p.grad = grad
                p.register_post_accumulate_grad_hook(self._ready_hook(index))
        self.optimizer = trainer.optimizer_choice.torch(self.params)

    def _ready_hook(self, index: int):
        def hook(param: Any) -> None:  # noqa: ARG001 - torch passes the parameter
            bucket = self.buckets[index]
            if bucket.work is not None:
                raise RuntimeError(
                    "strategy 'allreduce': a gradient landed after its bucket's all_reduce "
                    "started (backward ran twice in one step?); call trainer.step once per batch"
                )
            bucket.pending -= 1
            self._start_ready()

        return hook

    def _start_ready(self) -> None:
        """Starts, in order, every bucket whose gradients have all landed."""
        buckets = self.buckets
        while self.next_bucket < len(buckets) and buckets[self.next_bucket].pending == 0:
            self._start(buckets[self.next_bucket])

    def _start(self, bucket: _Bucket) -> None:
        bucket.work = collectives.all_reduce(bucket.flat, op="sum", async_op=True)
        self.next_bucket += 1

    def backward(self, loss: Any) -> None:
        for bucket in self.buckets:  # a user's zero_grad(set_to_none) drops the views
            for p, grad in zip(bucket.params, bucket.grads):
                if p.grad is not grad:
                    p.grad = grad
        loss.backward()

    def _reduce_and_step(self) -> None:
        while self.next_bucket < len(self.buckets):  # buckets with unused parameters
            self._start(self.buckets[self.next_bucket])
        counts = []
        for bucket in self.buckets:
            bucket.work.wait()
            count = float(bucket.flat[-1])
            counts.append(count)
            if count > 1:
                bucket.flat.div_(count)
        if counts and counts[0] > 0:  # every bucket has the same count; 0: no worker had a batch
            self.optimizer.step()
        self.next_bucket = 0

    def update(self) -> None:
        self._reduce_and_step()
        for bucket in self.buckets:
            bucket.reset(1.0)

    def join_step(self) -> None:
        for bucket in self.buckets:
            bucket.reset(0.0)
        self._reduce_and_step()
        for bucket in self.buckets:
            bucket.reset(1.0)

    def state_tensors(self) -> dict:
        return optimizer_tensors(self.optimizer)

    def load_state_tensors(self, tensors: dict) -> None:
        load_optimizer_tensors(self.optimizer, tensors)
