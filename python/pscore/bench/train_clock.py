"""What the training benchmark times, the same way for every system, inside the workers: from
the first step (after start-up, imports, data loading and the initial broadcast) to the epoch
whose test accuracy reaches the workload's target (evaluation included), and the samples/s of
training alone; or, for a workload without a target, samples/s over fixed steps after a warm-up.
The chief also reports its own CPU seconds over the same span (process_time, every thread),
a figure less at the mercy of other jobs' load than wall time. The chief writes the result as
JSON for the bench to read."""

from __future__ import annotations

import json
import os
import time
from typing import Callable

__all__ = ["Clock"]


class Clock:
    """Driven by the training loop: start(), then after_step() / after_epoch(); each returns True
    when the run should stop. `agree(flag)` returns the chief's flag on every worker (so all
    stop at the same epoch)."""

    def __init__(self, workload, world: int, train_samples: int, agree: Callable[[bool], bool]):
        self.workload, self.world, self.train_samples, self.agree = (
            workload,
            world,
            train_samples,
            agree,
        )
        self.epochs = self.steps = 0
        self.train_s = 0.0
        self.accuracy: float | None = None
        self.time_to_target: float | None = None
        self.warm_at = self.end_at = None
        self.cpu_s: float | None = None  # the chief's CPU seconds (all threads) while timed

    def start(self) -> None:
        self.started = self.last = time.perf_counter()
        self.cpu_started = time.process_time()

    def after_step(self) -> bool:
        w = self.workload
        self.steps += 1
        if w.target_accuracy is not None:
            return False
        if self.steps == w.warmup:
            self.warm_at, self.cpu_started = time.perf_counter(), time.process_time()
        if self.steps == w.warmup + w.steps:
            self.end_at, self.cpu_s = time.perf_counter(), time.process_time() - self.cpu_started
            return True
        return False

    def after_epoch(self, evaluate: Callable[[], float]) -> bool:
        """End of an epoch of a time-to-accuracy run: evaluates and decides whether to stop."""
        w = self.workload
        if w.target_accuracy is None:
            return False
        now = time.perf_counter()
        self.train_s += now - self.last
        self.epochs += 1
        self.accuracy = evaluate()
        reached = self.accuracy >= w.target_accuracy
        if reached and self.time_to_target is None:
            self.time_to_target = time.perf_counter() - self.started
            self.cpu_s = time.process_time() - self.cpu_started
        stop = self.agree(reached or self.epochs >= w.max_epochs)
        self.last = time.perf_counter()
        return stop

    def result(self) -> dict:
        w = self.workload
        if w.target_accuracy is None:
            if self.end_at is None:
                raise RuntimeError(
                    f"workload {w.name!r}: the run ended after {self.steps} steps, before "
                    f"{w.warmup} warm-up + {w.steps} timed steps (too little data?)"
                )
            samples = w.steps * w.batch_size * self.world
            return {
                "samples_per_s": samples / (self.end_at - self.warm_at),
                "chief_cpu_s": self.cpu_s,
                "steps": w.steps,
            }
        return {
            "time_to_target_s": self.time_to_target,
            "chief_cpu_s": self.cpu_s if self.time_to_target is not None else None,
            "samples_per_s": self.epochs * self.train_samples / self.train_s,
            "accuracy": self.accuracy,
            "epochs": self.epochs,
        }

    def write(self, path: str, extra: dict | None = None) -> None:
        """The chief's result (and `extra` figures), written atomically."""
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump({**self.result(), **(extra or {})}, f)
        os.replace(tmp, path)
