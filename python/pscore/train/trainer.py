"""Trainer: trains a torch model on a cluster under any strategy (see pscore.train)."""

from __future__ import annotations

import math
import zlib
from typing import Any

from .. import collectives
from . import strategies
from .data import ShardedData, as_dataset
from .hooks import Hook
from .optimizers import resolve
from .run import current_run

__all__ = ["Trainer"]


class Trainer:
    """Trains `model` with `loss_fn(output, target)` under `strategy` on the cluster this
    process belongs to (discovered from the launcher's environment, or `cluster`).

    The same script runs on every task: chief and workers train; a ps task serves its shard of
    the parameter server when it reaches Trainer(...) and exits (SystemExit(0)) when the job
    ends. After fit() the model on every worker holds the trained weights."""

    def __init__(
        self,
        model: Any,
        loss_fn: Any,
        optimizer: Any = "sgd",
        optimizer_args: dict | None = None,
        strategy: Any = "allreduce",
        strategy_args: dict | None = None,
        cluster: Any = None,
        checkpoint_dir: str | None = None,
        save_every_steps: int | None = None,
        save_every_secs: float | None = None,
        hooks: Any = (),
        seed: int = 0,
        progress: bool | None = None,
    ):
        self.run = current_run(cluster)
        self.model, self.loss_fn = model, loss_fn
        self.optimizer_choice = resolve(optimizer, optimizer_args)
        self.strategy = strategies.make(strategy, self.run, model, strategy_args)
        self.strategy.check(self.run)
        self.hooks: list[Hook] = list(hooks)
        for h in self.hooks:
            if not isinstance(h, Hook):
                raise TypeError(
                    f"hooks must be pscore.train.Hook instances, not {type(h).__name__}"
                )
        self.checkpoint_dir = checkpoint_dir
        self.save_every_steps, self.save_every_secs = save_every_steps, save_every_secs
        self.seed, self.progress = seed, progress
        self.global_step = 0  # steps this job took (each lockstep step once)
        self.epoch = 0  # the epoch in progress (or the next one)
        self.batch_in_epoch = 0  # batches of the current epoch already taken
        self._stop_reason: str | None = None
        self._ready = False
        self._unfinished = False  # steps taken since the strategy's last finish()
        if self.run.is_server:
            self.strategy.serve(self)
            raise SystemExit(0)
        if not collectives.is_initialized():
            collectives.init_process_group()

    # ---- setup ----------------------------------------------------------------------------
    def _setup(self) -> None:
        if self._ready:
            return
        self._check_models_agree()
        self.strategy.setup(self)
        self._ready = True

    def _check_models_agree(self) -> None:
        """Every worker must build the same model: a digest of its parameters' names, shapes
        and dtypes, compared across workers; a mismatch names the workers that differ."""
        import torch

        if collectives.get_world_size() == 1:
            return
        text = ";".join(f"{n}:{tuple(p.shape)}:{p.dtype}" for n, p in self.model.named_parameters())
        mine = torch.tensor([zlib.crc32(text.encode())], dtype=torch.int64)
        every = [torch.zeros(1, dtype=torch.int64) for _ in range(collectives.get_world_size())]
        collectives.all_gather(every, mine)
        digests = [int(t.item()) for t in every]
        if len(set(digests)) > 1:
            differ = [r for r, d in enumerate(digests) if d != digests[0]]
            raise ValueError(
                f"the workers' models differ: worker(s) {differ} built a model whose parameter "
                f"names, shapes or dtypes are not worker 0's (this worker {self.run.rank}: "
                f"{text[:300]})"
            )

    # ---- training -------------------------------------------------------------------------
    def request_stop(self, reason: str) -> None:
        """Ends fit() after the current step (hooks call it)."""
        self._stop_reason = reason

    def _forward_loss(self, batch: tuple) -> Any:
        *inputs, target = batch
        return self.loss_fn(self.model(*inputs), target)

    def step(self, batch: Any) -> float:
        """One training step on `batch` (inputs..., target); returns the loss."""
        self._setup()
        self.model.train()
        loss = self._forward_loss(tuple(batch))
        self.strategy.backward(loss)
        self.strategy.update()
        self.global_step += 1
        self._unfinished = True
        return float(loss.detach())

    def _join_step(self) -> None:
        self.strategy.join_step()
        self.global_step += 1
        self._unfinished = True

    def _epoch_steps(self, data: ShardedData) -> int:
        """Steps every worker takes this epoch: lockstep strategies all take the most any
        worker has (those out of batches join), the others take their own."""
        return data.max_batches() if self.strategy.lockstep else data.num_batches()

    def fit(
        self,
        train_data: Any,
        epochs: int = 1,
        batch_size: int = 32,
        eval_data: Any = None,
        *,
        shuffle: bool = True,
        eval_batch_size: int = 1024,
    ) -> list[dict]:
        """Trains for `epochs` epochs over each worker's shard of train_data; returns one dict
        per epoch (epoch, loss, steps, global_step, and evaluate()'s metrics with eval_data)."""
        if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 0:
            raise ValueError(f"epochs must be an int >= 0, got {epochs!r}")
        self._setup()
        data = ShardedData(
            train_data,
            self.run.rank,
            self.run.world_size,
            batch_size,
            shuffle=shuffle,
            seed=self.seed,
        )
        history: list[dict] = []
        for h in self.hooks:
            h.begin(self)
        while self.epoch < epochs and self._stop_reason is None:
            total, count = 0.0, 0
            steps = self._epoch_steps(data)
            batches = data.batches(self.epoch, self.batch_in_epoch)
            while self.batch_in_epoch < steps and self._stop_reason is None:
                item = next(batches, None)
                loss = None
                if item is None:
                    self._join_step()
                else:
                    loss = self.step(item[1])
                    total, count = total + loss, count + 1
                self.batch_in_epoch += 1
                for h in self.hooks:
                    h.after_step(self, loss)
            metrics = {
                "epoch": self.epoch,
                "loss": total / count if count else math.nan,
                "steps": count,
                "global_step": self.global_step,
            }
            if eval_data is not None:
                metrics.update(self.evaluate(eval_data, batch_size=eval_batch_size))
            history.append(metrics)
            for h in self.hooks:
                h.after_epoch(self, self.epoch, metrics)
            if self.batch_in_epoch >= steps:
                self.epoch, self.batch_in_epoch = self.epoch + 1, 0
        self.strategy.finish()
        self._unfinished = False
        for h in self.hooks:
            h.end(self, history)
        return history

    # ---- evaluation -----------------------------------------------------------------------
    def evaluate(self, data: Any, batch_size: int = 1024) -> dict:
        """The model's mean loss on `data` (and accuracy, for class logits and integer
        targets), computed on this worker over all of `data` with the job's current weights."""
        import torch

        self._setup()
        self.strategy.sync_model()
        dataset = as_dataset(data)
        self.model.eval()
        loss_sum, correct, seen, classify = 0.0, 0, 0, True
        with torch.no_grad():
            for start in range(0, len(dataset), batch_size):
                *inputs, target = dataset.batch(
                    torch.arange(start, min(start + batch_size, len(dataset)))
                )
                out = self.model(*inputs)
                n = len(target)
                loss_sum += float(self.loss_fn(out, target)) * n
                seen += n
                if (
                    classify
                    and out.dim() == 2
                    and not target.is_floating_point()
                    and target.dim() == 1
                ):
                    correct += int((out.argmax(1) == target).sum())
                else:
                    classify = False
        self.model.train()
        metrics = {"eval_loss": loss_sum / max(seen, 1)}
        if classify and seen:
            metrics["accuracy"] = correct / seen
        return metrics

    def close(self) -> None:
        """Finishes the strategy after steps of a loop of the user's own (step(); fit() does it
        itself: PS strategies tell the servers this worker is done), then leaves the job's
        process group (fit() leaves it joined for further calls)."""
        if self._unfinished:
            self.strategy.finish()
            self._unfinished = False
        if collectives.is_initialized():
            collectives.destroy_process_group()
