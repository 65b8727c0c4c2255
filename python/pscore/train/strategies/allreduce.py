"""allreduce: data parallelism as DDP does it. Parameters and buffers start from the chief's.
The gradients are reduced in flat buckets: the parameters are bucketed in reverse order, so the
last layers' bucket fills first, and as each gradient lands (an autograd hook) it is copied into
its bucket, divided by the number of workers on the way (DDP's pre-division: no pass over the
bucket afterwards); a bucket is all-reduced asynchronously as soon as it is full, while backward
still runs on the earlier layers. The last bucket, with nothing left to overlap, is reduced on
the calling thread (no hand-over to the group's background thread and back). Each parameter's
.grad then becomes its view into the bucket, so update() waits for the buckets and steps the
same torch.optim optimizer everywhere with no copy back; all workers keep identical weights.
(SINGA AllReduce, Caffe2 data_parallel_model, TF (MultiWorker)MirroredStrategy, ElasticDL's
overlap.)

Uneven shards (torch's Join idea): a worker out of batches calls join_step(), which reduces
zero buckets with a contributor count of 0; it receives the contributors' mean and steps too.
Each bucket carries the count in one extra slot; a step with fewer contributors than workers
rescales by workers / contributors. Buckets are reduced in the same order on every worker: a
bucket starts only after every bucket before it started, and update() starts the ones whose
parameters got no gradient this step (unused parameters reduce as zeros)."""

from __future__ import annotations

import io
from typing import Any

import torch

from ... import collectives
from ...collectives.work import CompletedWork
from ..state import load_optimizer_tensors, optimizer_tensors
from ..timeline import COMMUNICATION, COMPUTE, TRAIN_LANE
from .base import Strategy

__all__ = ["AllReduce"]

MB = 1 << 20


class _Bucket:
    """One flat buffer: the gradients of `params` back to back, then the contributor count."""

    def __init__(self, params: list, dtype: Any):
        self.params = params
        self.label = self.wait_label = ""  # its timeline events' names, set by the strategy
        self.lane, self.started_ns = TRAIN_LANE, None  # started_ns: when its async reduce began
        numel = sum(p.numel() for p in params)
        self.flat = torch.zeros(numel + 1, dtype=dtype)
        self.grads, at = [], 0
        for p in params:
            self.grads.append(self.flat[at : at + p.numel()].view_as(p))
            at += p.numel()
        self.landed = [False] * len(params)  # which gradients this step has copied in
        self.pending = len(params)
        self.work = None  # the running all_reduce

    def reset(self, count: float) -> None:
        """A new step: no gradient landed yet; this worker contributes `count` (1 or 0)."""
        self.flat[-1] = count
        self.landed = [False] * len(self.params)
        self.pending = len(self.params)
        self.work = self.started_ns = None

    def fill_missing(self) -> None:
        """Zeros for the parameters that got no gradient (unused this step, or a join step)."""
        for i, landed in enumerate(self.landed):
            if not landed:
                self.grads[i].zero_()


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
        if self.elastic is None:
            for t in [*model.parameters(), *model.buffers()]:
                collectives.broadcast(t.data, src=0)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.world = trainer.run.world_size
        self.buckets = _buckets(self.params, self.cap_bytes, self.first_cap_bytes)
        self.next_bucket = 0  # buckets start in this order on every worker
        for index, bucket in enumerate(self.buckets):
            bucket.label = f"allreduce bucket {index}"
            bucket.wait_label = f"wait allreduce bucket {index}"
            bucket.lane = self.timeline.lane(bucket.label)
            bucket.reset(1.0)
            for position, p in enumerate(bucket.params):
                p.grad = None
                p.register_post_accumulate_grad_hook(self._landed_hook(index, position))
        self.optimizer = trainer.optimizer_choice.torch(self.params)
        if self.elastic is not None:
            self.generation = self.elastic.last_generation()
            self._regroup(fresh=True)

    # ---- elastic (Trainer(elastic=True)) ------------------------------------------------------
    regroups = True  # with elastic=True a broken group is re-formed (Trainer._run_epoch)

    def check_elastic(self, run: Any) -> None:
        """Elastic: the group re-forms through the job's store, without the gone workers."""

    def regroup(self) -> None:
        """After a failed step: leaves the broken group, forms the next one with the others
        and a replacement, and takes the state of its lowest member that has one."""
        collectives.destroy_process_group()
        self.next_bucket = 0
        for bucket in self.buckets:
            bucket.reset(1.0)
        for p in self.params:
            p.grad = None
        self._regroup(fresh=False)

    def _regroup(self, fresh: bool) -> None:
        trainer, job = self.trainer, self.elastic
        rank, generation = trainer.run.rank, self.generation + 1
        source, members = job.form_group(generation, rank, fresh)
        self.generation, self.world = generation, len(members)
        state = job.hand_state(generation, source, rank, self._pack() if rank == source else b"")
        if rank != source:
            self._unpack(state)

    def _pack(self) -> bytes:
        t = self.trainer
        state = {
            "model": t.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "position": (t.global_step, t.epoch, t.batch_in_epoch),
        }
        out = io.BytesIO()
        torch.save(state, out)
        return out.getvalue()

    def _unpack(self, data: bytes) -> None:
        t = self.trainer
        state = torch.load(io.BytesIO(data), weights_only=True)
        t.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        t.global_step, t.epoch, t.batch_in_epoch = state["position"]

    def _landed_hook(self, index: int, position: int):
        def hook(param: Any) -> None:
            bucket = self.buckets[index]
            if bucket.work is not None or bucket.landed[position]:
                raise RuntimeError(
                    "strategy 'allreduce': a gradient landed twice in one step (backward ran "
                    "twice?); call trainer.step once per batch"
                )
            view, grad = bucket.grads[position], param.grad
            if grad.is_sparse:  # nn.Embedding(sparse=True): reduced dense, as the bucket is
                grad = grad.to_dense()
            torch.mul(grad, 1.0 / self.world, out=view)
            param.grad = view
            bucket.landed[position] = True
            bucket.pending -= 1
            self._start_ready()

        return hook

    def _start_ready(self) -> None:
        """Starts, in order, every bucket whose gradients have all landed."""
        buckets = self.buckets
        while self.next_bucket < len(buckets) and buckets[self.next_bucket].pending == 0:
            self._start(buckets[self.next_bucket])

    def _start(self, bucket: _Bucket) -> None:
        """The last bucket has nothing left to overlap with: it runs on this thread, sparing
        the hand-over to the group's background thread (what small models' steps are made of)."""
        self.next_bucket += 1
        if self.next_bucket < len(self.buckets):
            bucket.started_ns = self.timeline.now()
            bucket.work = collectives.all_reduce(bucket.flat, op="sum", async_op=True)
        else:
            with self.timeline.span(bucket.label, COMMUNICATION, nbytes=bucket.flat.nbytes):
                collectives.all_reduce(bucket.flat, op="sum")
            bucket.work = CompletedWork()

    def backward(self, loss: Any) -> None:
        for p in self.params:  # autograd hands over a fresh gradient, the hook copies it
            p.grad = None
        loss.backward()

    def _reduce_and_step(self) -> None:
        for bucket in self.buckets[self.next_bucket :]:  # not full: unused parameters
            bucket.fill_missing()
            self._start(bucket)
        counts, timeline = [], self.timeline
        for bucket in self.buckets:
            if bucket.started_ns is None:  # reduced on this thread
                bucket.work.wait()
            else:  # its own lane shows the reduce from its start to the end of this wait
                label, started, nbytes = bucket.label, bucket.started_ns, bucket.flat.nbytes
                timeline.wait(bucket.work, label, bucket.wait_label, started, bucket.lane, nbytes)
            count = float(bucket.flat[-1])
            counts.append(count)
            if 0 < count < self.world:  # the sum was pre-divided by every worker
                bucket.flat.mul_(self.world / count)
        for bucket in self.buckets:
            for p, view in zip(bucket.params, bucket.grads):
                p.grad = view
        if counts and counts[0] > 0:  # every bucket has the same count; 0: no worker had a batch
            with timeline.span("optimizer", COMPUTE):
                self.optimizer.step()
        self.next_bucket = 0
        for bucket in self.buckets:
            bucket.reset(1.0)

    def update(self) -> None:
        self._reduce_and_step()

    def join_step(self) -> None:
        for bucket in self.buckets:
            bucket.reset(0.0)
        self._reduce_and_step()

    def state_tensors(self) -> dict:
        return optimizer_tensors(self.optimizer)

    def load_state_tensors(self, tensors: dict) -> None:
        load_optimizer_tensors(self.optimizer, tensors)
