"""Trainer: trains a torch model on a cluster under any strategy (see pscore.train).

The chief's duties (TF's MonitoredTrainingSession): a global step, checkpoints every N steps
or seconds and at the end of fit (written by the chief alone, read back by every worker on
resume: see checkpoint.py), hooks, and the progress bar."""

from __future__ import annotations

import math
import os
import time
from typing import Any

from .. import _config, collectives, errors
from ..collectives import registration
from . import agreement, checkpoint, servers, stopping, strategies
from . import elastic as elastic_job
from .checks import check_int
from .data import ShardedData, as_dataset
from .elastic import ElasticJob
from .elastic_worker import ElasticWorker
from .hooks import Hook
from .optimizers import resolve
from .progress import Progress, wanted
from .run import current_run
from .tensorboard import TensorBoardHook
from .timeline import COMPUTE, STEP, UPDATE, Timeline
from .timeline_merge import write_job_trace

__all__ = ["Trainer"]


class Trainer:
    """Trains `model` with `loss_fn(output, target)` under `strategy` on the cluster this
    process belongs to (discovered from the launcher's environment, or `cluster`).

    The same script runs on every task: chief and workers train; a ps task serves its shard of
    the parameter server when it reaches Trainer(...) and exits (SystemExit(0)) when the job
    ends. After fit() the model on every worker holds the trained weights.

    With `checkpoint_dir`, the chief checkpoints every `save_every_steps` steps and/or
    `save_every_secs` seconds and at the end of fit, keeping the last `keep_checkpoints` (elastic:
    with the chief gone, the lowest worker left); a job started over a directory holding a
    checkpoint resumes from it (same global step, epoch and batch). `progress`: the chief's tqdm
    bar (None: when stderr is a terminal).

    `timeline`: a path (default PSCORE_TIMELINE) where the chief writes the job's Chrome trace of
    every rank's steps at the end of fit, each worker its own next to it (pscore.train.timeline).
    `tensorboard`: a log directory where the chief writes TensorBoard scalars (TensorBoardHook).

    `elastic`: a worker that dies does not end the job (every strategy; see pscore.train.elastic
    and docs/train.md): a replacement (pscore-run --max-restarts K, or Kubernetes) joins with the
    job's current weights where the dead worker left; with no replacement coming (pscore-run
    --elastic, elsewhere PSCORE_ELASTIC_GONE_AFTER) the job shrinks."""

    def __init__(
        self,
        model: Any,
        loss_fn: Any,
        optimizer: Any = "sgd",
        optimizer_args: dict | None = None,
        strategy: Any = "allreduce",
        strategy_args: dict | None = None,
        cluster: Any = None,
        checkpoint_dir: str | os.PathLike | None = None,
        save_every_steps: int | None = None,
        save_every_secs: float | None = None,
        hooks: Any = (),
        seed: int = 0,
        progress: bool | None = None,
        keep_checkpoints: int = 5,
        timeline: str | os.PathLike | None = None,
        tensorboard: str | os.PathLike | None = None,
        elastic: bool = False,
    ):
        self.run = current_run(cluster)
        self.timeline_path = os.fspath(timeline) if timeline else _config.TIMELINE.get()
        self.timeline = Timeline(self.run.rank, record=bool(self.timeline_path))
        self.model, self.loss_fn = model, loss_fn
        self.optimizer_choice = resolve(optimizer, optimizer_args)
        self.strategy = strategies.make(strategy, self.run, model, strategy_args)
        self.strategy.check(self.run)
        elastic_job.check_request(elastic, self.run, self.strategy)
        self.hooks: list[Hook] = list(hooks)
        if tensorboard:
            self.hooks.append(TensorBoardHook(tensorboard))
        for h in self.hooks:
            if not isinstance(h, Hook):
                raise TypeError(
                    f"hooks must be pscore.train.Hook instances, not {type(h).__name__}"
                )
        self.seed = check_int("seed", seed, 0)
        self._saver = checkpoint.Saver.create(
            checkpoint_dir,
            save_every_steps,
            save_every_secs,
            keep_checkpoints,
            writer=self.run.is_chief,
        )
        self._show_progress = wanted(progress, self.run.is_chief)
        self._progress = Progress(False, 0, 0, 1)  # a live bar only inside fit()
        self.global_step = 0  # steps this job took (each lockstep step once)
        self.epoch = 0  # the epoch in progress (or the next one)
        self.batch_in_epoch = 0  # batches of the current epoch already taken
        self.samples = 0  # samples this worker trained on
        self.history: list[dict] = []  # every epoch fit() ran in this process
        self.resumed_from: str | None = None  # the checkpoint this job resumed from
        self._resumed_metadata: dict = {}
        self._data_position: dict = {}  # fit()'s batch size and data size, for checkpoints
        self._stop_reason: str | None = None
        self._checkpoint_at_stop = True
        self._ready = False
        self._unfinished = False  # steps taken since the strategy's last finish()
        if self.run.is_server:
            self.strategy.serve(self)
            raise SystemExit(0)
        registration.describe(role=self.run.role, strategy=self.strategy.name)
        self._elastic: ElasticJob | None = None
        if elastic:
            self._elastic = elastic_job.open_job(
                servers.JobEnd.open(self.run, serve=True), self.run, self.strategy
            )
        self._elastic_worker = None if self._elastic is None else ElasticWorker(self._elastic, self)
        if self._elastic is None and not collectives.is_initialized():
            collectives.init_process_group()

    @property
    def checkpoint_dir(self) -> str | None:
        return None if self._saver is None else self._saver.directory

    # ---- setup and resume -----------------------------------------------------------------
    def setup(self) -> Trainer:
        """Readies the job (fit, step and evaluate call it first): checks that the workers'
        models agree, resumes from checkpoint_dir's latest checkpoint when there is one (every
        worker loads it; elastic: after the strategy's setup, and a replacement joins the running
        job instead), and sets the strategy up. Afterwards global_step, epoch and
        batch_in_epoch say where training stands."""
        if self._ready:
            return self
        with self.timeline.span("setup", STEP):
            run, job = self.run, self._elastic
            point = (self.model, run, self.strategy.name, self._saver, job)
            found = agreement.resume_point(*point) if job is None else None
            self.strategy.setup(self)
            if job is not None:  # through the store once set up: ps tasks clear it first
                found = agreement.resume_point(*point)
            if found is not None:
                self._resume(*found)
            if job is not None:  # a replacement joins from here at the least
                job.set_up(run.rank, self.epoch, self.batch_in_epoch, self.global_step)
        self._ready = True
        return self

    def _resume(self, path: str, tensors: dict, metadata: dict) -> None:
        """After the strategy's setup: its state, the servers' (by the chief), the position."""
        self.strategy.load_state_tensors(checkpoint.unpack(tensors)[1])
        if self.run.is_chief:
            self.strategy.load_servers(path)
        agreement.wait_resumed(self.run.rank, self.strategy.needs_servers, self._elastic)
        self.strategy.after_resume()
        self.global_step = int(metadata["global_step"])
        self.epoch = int(metadata["epoch"])
        self.batch_in_epoch = int(metadata["batch_in_epoch"])
        self.resumed_from, self._resumed_metadata = path, metadata
        if self.run.is_chief:
            self.log(
                f"pscore.train: resumed from {path} at global step {self.global_step} "
                f"(epoch {self.epoch}, batch {self.batch_in_epoch})"
            )

    # ---- checkpoints ----------------------------------------------------------------------
    def save_checkpoint(self) -> str | None:
        """Writes a checkpoint of the current step now; returns its path on the chief, None on
        the other workers (only the chief writes). fit() calls it on schedule; a loop of your
        own gets save_every_steps / save_every_secs from step() and calls this at its end."""
        if self._saver is None:
            raise ValueError("save_checkpoint() needs the Trainer's checkpoint_dir")
        self.setup()
        if not self._writes():
            return None
        with self.timeline.span("checkpoint", STEP):
            tensors = checkpoint.pack(self.model.state_dict(), self.strategy.state_tensors())
            path = self._saver.write(
                self.global_step, tensors, self._checkpoint_metadata(), self.strategy.save_servers
            )
        for h in self.hooks:
            h.after_checkpoint(self, path)
        return path

    def _writes(self) -> bool:
        """The chief writes for the job (elastic: with it gone, the lowest worker left)."""
        return self.run.is_chief if self._elastic is None else self._elastic.leads(self.run.rank)

    def _checkpoint_metadata(self) -> dict:
        return {
            "format": checkpoint.FORMAT,
            "global_step": self.global_step,
            "epoch": self.epoch,
            "batch_in_epoch": self.batch_in_epoch,
            "strategy": self.strategy.name,
            "world_size": self.run.world_size,
            "seed": self.seed,
            **self._data_position,
        }

    def _checkpoint_if_due(self) -> None:
        if self._saver is not None and self._saver.due(self.global_step) and self._writes():
            self.save_checkpoint()

    # ---- stopping -------------------------------------------------------------------------
    def request_stop(self, reason: str, *, checkpoint: bool = True) -> None:
        """Ends fit() after the current step (hooks call it); checkpoint=False: no final
        checkpoint (the state is not worth keeping, e.g. after a NaN loss). In a lockstep
        strategy call it on every worker, or from a hook with local_stop = True."""
        if self._stop_reason is None:
            self._stop_reason = str(reason)
        self._checkpoint_at_stop = self._checkpoint_at_stop and checkpoint

    @property
    def should_stop(self) -> bool:
        return self._stop_reason is not None

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    def _agree_on_stop(self) -> None:
        """Lockstep workers stop together (stopping.py); an elastic job with no collective
        group agrees through its store."""
        if not (self.strategy.lockstep and any(h.local_stop for h in self.hooks)):
            return
        asked = self._stop_reason, self._checkpoint_at_stop
        if self._elastic is not None and not collectives.is_initialized():
            asked = self._elastic.agree_on_stop(self.run.rank, *asked)
        elif collectives.get_world_size() > 1:
            asked = stopping.agree(*asked)
        self._stop_reason, self._checkpoint_at_stop = asked

    # ---- training -------------------------------------------------------------------------
    def log(self, line: str) -> None:
        """Prints `line` on stdout (around the progress bar when one is drawn)."""
        self._progress.write(line)

    def _forward_loss(self, batch: tuple) -> Any:
        if len(batch) < 2:
            raise ValueError(
                f"a batch must be (inputs..., target); this one has {len(batch)} part(s)"
            )
        *inputs, target = batch
        return self.loss_fn(self.model(*inputs), target)

    def _train_step(self, batch: Any) -> tuple[float, int]:
        """Forward, backward and update on `batch`; (loss, samples)."""
        self.setup()
        if not self.model.training:  # train() walks every module: only when needed
            self.model.train()
        batch = tuple(batch)
        if self._elastic_worker is not None:
            self._elastic_worker.before_step()
        timeline = self.timeline
        with timeline.span("step", STEP, step=self.global_step + 1):
            with timeline.span("forward", COMPUTE):
                loss = self._forward_loss(batch)
            with timeline.span("backward", COMPUTE):
                self.strategy.backward(loss)
            with timeline.span("update", UPDATE):
                self.strategy.update()
            value = float(loss.detach())
        self.global_step += 1
        self._unfinished = True
        return value, len(batch[-1])

    def _join_step(self) -> tuple[None, int]:
        with self.timeline.span("join step", STEP, step=self.global_step + 1):
            self.strategy.join_step()
        self.global_step += 1
        self._unfinished = True
        return None, 0

    def _after_step(self, loss: float | None, samples: int) -> None:
        """The step boundary: hooks, the stop agreement, the bar, a checkpoint when due."""
        self.samples += samples
        if self._elastic_worker is not None:
            self._elastic_worker.after_step()
        for h in self.hooks:
            h.after_step(self, loss)
        self._agree_on_stop()
        self._progress.update(self.global_step, loss, samples)
        if not self.should_stop or self._checkpoint_at_stop:
            self._checkpoint_if_due()

    def step(self, batch: Any) -> float:
        """One training step on `batch` (inputs..., target) for a loop of your own; returns
        the loss. global_step counts it, hooks' after_step run, a checkpoint is written when
        save_every_steps / save_every_secs say so; stop when trainer.should_stop says so."""
        loss, samples = self._train_step(batch)
        self._after_step(loss, samples)
        return loss

    def _epoch_steps(self, data: ShardedData) -> int:
        """Steps every worker takes this epoch: lockstep strategies all take the most any
        worker has (those out of batches join), the others take their own."""
        return data.max_batches() if self.strategy.lockstep else data.num_batches()

    def _run_epoch(self, data: ShardedData) -> dict:
        """Runs the epoch in progress from batch_in_epoch on, until its end or a stop; returns
        its metrics. epoch / batch_in_epoch advance before each step's checkpoint, so a
        checkpoint names the next batch to take."""
        epoch, steps, started = self.epoch, self._epoch_steps(data), time.monotonic()
        position = self.batch_in_epoch
        batches = data.batches(epoch, position)
        loss_sum, trained, samples = 0.0, 0, 0
        while position < steps and not self.should_stop:
            item = next(batches, None)
            try:
                loss, n = self._join_step() if item is None else self._train_step(item[1])
            except errors.Error as e:
                if self._elastic_worker is None:
                    raise
                self._elastic_worker.regroup(e)  # allreduce: a new group, its members' state
                epoch, position = self.epoch, self.batch_in_epoch
                batches = data.batches(epoch, position)
                continue
            position += 1
            self.epoch, self.batch_in_epoch = (
                (epoch, position) if position < steps else (epoch + 1, 0)
            )
            if loss is not None:
                loss_sum, trained, samples = loss_sum + loss, trained + 1, samples + n
            self._after_step(loss, n)
        if position >= steps:  # also an epoch with no steps for this worker
            self.epoch, self.batch_in_epoch = epoch + 1, 0
        return {
            "epoch": epoch,
            "loss": loss_sum / trained if trained else math.nan,
            "steps": trained,
            "samples": samples,
            "global_step": self.global_step,
            "seconds": time.monotonic() - started,
        }

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
        """Trains until `epochs` epochs are done (counted from the job's start: a resumed job
        runs the rest) over each worker's shard of train_data, or a hook stops it. Returns one
        dict per epoch run: epoch, loss (this worker's mean), steps and samples (this worker's
        batches and samples), global_step, seconds, and evaluate()'s metrics with eval_data;
        trainer.history gathers them over every fit() call."""
        check_int("epochs", epochs, 0)
        check_int("eval_batch_size", eval_batch_size, 1)
        if eval_data is not None:
            as_dataset(eval_data)  # a clear error now rather than after the first epoch
        self.setup()
        data = ShardedData(
            train_data,
            self.run.rank,
            self.run.world_size,
            batch_size,
            shuffle=shuffle,
            seed=self.seed,
        )
        self._check_data_position(data)
        if self._elastic_worker is not None:
            self._elastic_worker.rejoin_where_left()
        self._stop_reason, self._checkpoint_at_stop = None, True
        history: list[dict] = []
        for h in self.hooks:
            h.begin(self)
        self._progress = self._start_progress(data, epochs)
        try:
            while self.epoch < epochs and not self.should_stop:
                metrics = self._run_epoch(data)
                if eval_data is not None:
                    metrics.update(self.evaluate(eval_data, batch_size=eval_batch_size))
                history.append(metrics)
                self.history.append(metrics)
                for h in self.hooks:
                    h.after_epoch(self, metrics["epoch"], metrics)
        finally:
            self._progress.close()
            self._progress = Progress(False, 0, 0, 1)
        self._end_fit()
        for h in self.hooks:
            h.end(self, history)
        return history

    def _check_data_position(self, data: ShardedData) -> None:
        """A resumed position means the same batches only over the same data."""
        self._data_position = {"batch_size": data.batch_size, "num_samples": len(data.data)}
        if self.resumed_from is not None:
            now = {"seed": self.seed, **self._data_position}
            checkpoint.check_same_data(self.resumed_from, self._resumed_metadata, now)

    def _start_progress(self, data: ShardedData, epochs: int) -> Progress:
        left = (epochs - self.epoch) * self._epoch_steps(data) - self.batch_in_epoch
        total = self.global_step + max(left, 0)
        return Progress(self._show_progress, total, self.global_step, self.run.world_size)

    def _end_fit(self) -> None:
        """The final checkpoint (before the strategy's finish: PS servers may leave after it),
        then the strategy's finish."""
        saver = self._saver
        if saver is not None and self._checkpoint_at_stop and saver.last_step != self.global_step:
            self.save_checkpoint()  # the chief writes; the others return at once
        self._finish_strategy()
        if self.should_stop and self.run.is_chief:
            self.log(f"pscore.train: stopped at global step {self.global_step}: {self.stop_reason}")

    def _finish_strategy(self) -> None:
        """The strategy's finish, then the timeline's files (a collective over the workers)."""
        with self.timeline.span("finish", STEP):
            self.strategy.finish()
        self._unfinished = False
        if self._elastic is not None:
            self._elastic.fit_ended(self.run.rank)
        if self.timeline_path:
            role = "chief" if self.run.is_chief else "worker"
            other = {"strategy": self.strategy.name, "world_size": self.run.world_size}
            label = f"rank {self.run.rank} ({role})"
            write_job_trace(self.timeline, self.timeline_path, label, other, self._elastic)

    # ---- evaluation -----------------------------------------------------------------------
    def evaluate(self, data: Any, batch_size: int = 1024) -> dict:
        """The model's mean loss on `data` (a tuple of tensors/arrays or a map-style Dataset;
        and accuracy, for class logits and integer targets), computed on this worker over all
        of `data` with the job's current weights."""
        check_int("batch_size", batch_size, 1)
        dataset = as_dataset(data)
        if len(dataset) == 0:
            raise ValueError("the evaluation data is empty")
        self.setup()
        with self.timeline.span("evaluate", STEP):
            return self._evaluate(dataset, batch_size)

    def _evaluate(self, dataset: Any, batch_size: int) -> dict:
        import torch

        self.strategy.sync_model()
        self.model.eval()
        loss_sum, correct, seen, classify = 0.0, 0, 0, True
        with torch.no_grad():
            for start in range(0, len(dataset), batch_size):
                batch = dataset.batch(torch.arange(start, min(start + batch_size, len(dataset))))
                out = self.model(*batch[:-1])
                target = batch[-1]
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
        metrics = {"eval_loss": loss_sum / seen}
        if classify:
            metrics["accuracy"] = correct / seen
        return metrics

    def close(self) -> None:
        """Finishes the strategy after steps of a loop of the user's own (step(); fit() does it
        itself: PS strategies tell the servers this worker is done), then leaves the job's
        process group (fit() leaves it joined for further calls)."""
        if self._unfinished:
            self._finish_strategy()
        if collectives.is_initialized():
            collectives.destroy_process_group()
