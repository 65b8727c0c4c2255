"""Trains a click-through model with a 1 M-row embedding table with pscore.Trainer; the tables
live on the parameter servers (strategy hybrid), the MLP is trained by allreduce.

    pscore-run --workers 2 --servers 1 examples/embeddings.py
    # or by hand: pserver --shard 0 --num-shards 1 --num-workers 2 --store file:///tmp/s &
    PSCORE_STORE=file:///tmp/s PSCORE_NUM_SERVERS=1 pscore-run -n 2 examples/embeddings.py

Synthetic data with a known signal (pscore.bench.ctr): every id has a hidden weight and a
sample's label is Bernoulli(sigmoid(sum of its ids' weights + noise)); ids are Zipf-popular.
The chief prints the test AUC; the process exits non-zero when it is under --min-auc.
"""

from __future__ import annotations

import argparse
import sys

import torch

import pscore
from pscore.bench import ctr
from pscore.train import STRATEGIES, Hook


class HeldOutAUC(Hook):
    """The test AUC after each epoch, computed while fit() runs: under pscore-run --servers the
    servers holding the tables stop once every worker's fit() is over."""

    def __init__(self, test: tuple, batch: int = 8192):
        self.test, self.batch, self.auc = test, batch, float("nan")

    def after_epoch(self, trainer, epoch: int, metrics: dict) -> None:
        *inputs, labels = self.test
        model = trainer.model
        model.eval()
        with torch.no_grad():
            scores = [
                model(*(x[i : i + self.batch] for x in inputs))
                for i in range(0, len(labels), self.batch)
            ]
        model.train()
        self.auc = metrics["test_auc"] = ctr.auc(torch.cat(scores).numpy(), labels.numpy())
        if trainer.run.is_chief:
            print(f"epoch {epoch}: loss {metrics['loss']:.4f}, test AUC {self.auc:.4f}", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--strategy", choices=STRATEGIES, default="hybrid")
    p.add_argument("--rows", type=int, default=ctr.FIELD_ROWS[0], help="ids of the largest table")
    p.add_argument("--samples", type=int, default=400_000)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--batch", type=int, default=ctr.BATCH, help="per worker")
    p.add_argument("--lr", type=float, default=ctr.OPTIMIZER_ARGS["lr"])
    p.add_argument("--min-auc", type=float, default=0.0)
    args = p.parse_args()

    train, test = ctr.make_data(args.rows, args.samples, seed=0)
    # Under hybrid the tables live on the servers: build them on the meta device (no memory).
    model = ctr.make_model(args.rows, table_device="meta" if args.strategy == "hybrid" else None)
    test_auc = HeldOutAUC(test)
    trainer = pscore.Trainer(
        model,
        ctr.loss_fn,
        optimizer=ctr.OPTIMIZER,
        optimizer_args={"lr": args.lr},
        strategy=args.strategy,
        hooks=[test_auc],
    )
    history = trainer.fit(train, epochs=args.epochs, batch_size=args.batch)
    auc = test_auc.auc
    if trainer.run.is_chief:
        print(
            f"strategy {args.strategy}: {args.rows} rows, {len(history)} epochs, "
            f"loss {history[-1]['loss']:.4f}, test AUC {auc:.4f}",
            flush=True,
        )
    return 0 if auc >= args.min_auc else 1


if __name__ == "__main__":
    sys.exit(main())
