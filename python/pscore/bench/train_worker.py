"""One worker of the training benchmark's pscore runs: trains a workload with pscore.Trainer
under a strategy (started by `python -m pscore.bench train` through pscore-run); a ps task
serves its shard inside Trainer(...)."""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

import pscore
from pscore.bench.train_clock import Clock
from pscore.bench.train_workloads import WORKLOADS, workload
from pscore.train import Hook

__all__ = ["main"]


class _Timing(Hook):
    """Drives the Clock from the Trainer's hooks. Its stops are the same on every worker (a
    step count, or the chief's decision broadcast), so the Trainer need not agree on them."""

    local_stop = False

    def __init__(self, workload, train_samples: int, test: tuple):
        self.workload, self.train_samples, self.test = workload, train_samples, test
        self.clock: Clock | None = None

    def begin(self, trainer) -> None:
        world = trainer.run.world_size
        self.clock = Clock(self.workload, world, self.train_samples, _agree)
        self.clock.start()

    def after_step(self, trainer, loss) -> None:  # noqa: ARG002 - the Hook signature
        if self.clock.after_step():
            trainer.request_stop("timed steps done")

    def after_epoch(self, trainer, epoch, metrics) -> None:  # noqa: ARG002
        if self.clock.after_epoch(lambda: trainer.evaluate(self.test)["accuracy"]):
            trainer.request_stop("target reached or epoch cap")


class _TimelineAB(Hook):
    """Measures the timeline's cost inside one run: after `skip` warm-up steps recording is on
    for every other step and off for the others (every worker switches at the same step), and
    each step's wall time and training-thread CPU time (from the previous step's end) go to
    its side. CPU time is what recording adds, unblurred by waits for a loaded machine's
    scheduler. Needs the Trainer's timeline on (PSCORE_TIMELINE)."""

    local_stop = False

    def __init__(self, skip: int = 3):
        self.skip = skip
        self.samples: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        self._last = (0.0, 0.0)

    def begin(self, trainer) -> None:
        if not trainer.timeline_path:
            raise ValueError("--timeline-ab needs the Trainer's timeline on (PSCORE_TIMELINE)")
        self._last = (time.perf_counter(), time.thread_time())

    def after_step(self, trainer, loss) -> None:  # noqa: ARG002 - the Hook signature
        wall, cpu = time.perf_counter(), time.thread_time()
        self.skip -= 1
        if self.skip < 0:
            side = trainer.timeline.recording
            self.samples[side].append((wall - self._last[0], cpu - self._last[1]))
            trainer.timeline.recording = not side
        self._last = (time.perf_counter(), time.thread_time())

    def result(self) -> dict:
        def median(side: bool, i: int) -> float:
            return statistics.median(s[i] for s in self.samples[side])

        wall_on, wall_off = median(True, 0), median(False, 0)
        return {
            "step_s_timeline_on": wall_on,
            "step_s_timeline_off": wall_off,
            "timeline_overhead": wall_on / wall_off - 1,
            "timeline_cpu_overhead": (median(True, 1) - median(False, 1)) / wall_off,
        }


def _agree(flag: bool) -> bool:
    t = torch.tensor([int(flag)], dtype=torch.int64)
    pscore.broadcast(t, src=0)
    return bool(t.item())


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=WORKLOADS, required=True)
    p.add_argument("--strategy", required=True)
    p.add_argument("--max-epochs", type=int, default=None, help="cap on the epochs")
    p.add_argument("--out", required=True, help="the chief writes its result here (JSON)")
    p.add_argument(
        "--timeline-ab", action="store_true", help="time steps with the timeline on vs off"
    )
    args = p.parse_args()

    torch.set_num_threads(1)
    w = workload(args.workload, args.max_epochs)
    train, test = w.make_data()
    timing = _Timing(w, len(train[0]), test)
    ab = _TimelineAB() if args.timeline_ab else None
    trainer = pscore.Trainer(
        w.make_model(),
        w.loss_fn,
        optimizer=w.optimizer,
        optimizer_args=w.optimizer_args,
        strategy=args.strategy,
        hooks=[timing] if ab is None else [timing, ab],
    )
    epochs = w.max_epochs if w.target_accuracy is not None else 1 << 20
    trainer.fit(train, epochs=epochs, batch_size=w.batch_size)
    if trainer.run.is_chief:
        timing.clock.write(args.out, {} if ab is None else ab.result())
    return 0


if __name__ == "__main__":
    sys.exit(main())
