"""Trains an MLP on scikit-learn's digits with pscore.Trainer under any strategy.

    pscore-run -n 2 examples/train_digits.py                                  # allreduce
    pscore-run -n 2 examples/train_digits.py --strategy hogwild
    pscore-run --workers 2 --servers 1 examples/train_digits.py --strategy ps-sync
    pscore-run --workers 2 --servers 1 --worker-groups 2 examples/train_digits.py \
        --strategy ps-async --epochs 20                       # every worker its own group
    torchrun --standalone --nproc-per-node 2 examples/train_digits.py
    pscore-run -n 2 examples/train_digits.py --checkpoint-dir ckpt --save-every-steps 50
                                              # run it again: it resumes from ckpt/latest

The same script runs on every task: workers train on their shards, a ps task serves its shard
of the parameter server until the job ends. The chief prints the test accuracy at the end; the
process exits non-zero when it is under --min-accuracy.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import sys

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import pscore
from pscore.train import STRATEGIES, LoggingHook, StopAtStepHook


def digits():
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    return (x_train, y_train), (x_test, y_test)


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(64, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 256),
        torch.nn.ReLU(),
        torch.nn.Linear(256, 10),
    )


def hooks(args) -> list:
    chosen = []
    if args.stop_at_step is not None:
        chosen.append(StopAtStepHook(args.stop_at_step))
    if args.log_every is not None:
        chosen.append(LoggingHook(args.log_every))
    return chosen


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--strategy", choices=STRATEGIES, default="allreduce")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=32, help="per worker")
    p.add_argument("--optimizer", default="sgd")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--checkpoint-dir", default=None, help="checkpoint here; resume from here")
    p.add_argument("--save-every-steps", type=int, default=None)
    p.add_argument("--stop-at-step", type=int, default=None, help="stop at this global step")
    p.add_argument("--log-every", type=int, default=None, help="print loss every N steps")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the chief's progress bar (default: when stderr is a terminal)",
    )
    p.add_argument("--min-accuracy", type=float, default=0.0)
    p.add_argument(
        "--digest", action="store_true", help="every worker prints a digest of its final weights"
    )
    args = p.parse_args()

    train, test = digits()
    model = mlp()
    options = {"lr": args.lr}
    if args.optimizer == "sgd":
        options["momentum"] = args.momentum
    trainer = pscore.Trainer(
        model,
        torch.nn.functional.cross_entropy,
        optimizer=args.optimizer,
        optimizer_args=options,
        strategy=args.strategy,
        checkpoint_dir=args.checkpoint_dir,
        save_every_steps=args.save_every_steps,
        hooks=hooks(args),
        progress=args.progress,
    )
    history = trainer.fit(train, epochs=args.epochs, batch_size=args.batch)
    accuracy = trainer.evaluate(test)["accuracy"]
    if trainer.run.is_chief:
        print(
            f"strategy {args.strategy}: {len(history)} epochs to global step "
            f"{trainer.global_step}, loss {history[-1]['loss'] if history else math.nan:.4f}, "
            f"test accuracy {accuracy:.4f}",
            flush=True,
        )
    if args.digest:
        weights = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
        print(
            f"worker {trainer.run.rank} weights {hashlib.sha256(weights).hexdigest()}", flush=True
        )
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
