"""Hogwild training of a softmax classifier on scikit-learn's digits: N processes update one
shared-memory weight table without locks (PyTorch's mnist_hogwild pattern, with the update done
by pscore's fused Adagrad kernel instead of an optimizer per process).

    python examples/hogwild_digits.py --procs 2

The model is an "embedding bag": each pixel is cut into 4 intensity buckets, a sample is the sum
of the rows of its 64 active buckets (+ a bias row), one row of 10 logits per bucket. Each
worker computes the loss with torch autograd on the rows it gathered and sends the row gradients
to the table with table.adagrad(ids, grads): only the touched rows are written.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from pscore.hogwild import SharedTable, train

BUCKETS = 4


def features(x: np.ndarray) -> np.ndarray:
    """Active row ids per sample: pixel p at intensity bucket b -> row 4p+b, plus a bias row."""
    buckets = np.minimum(x // (17 / BUCKETS), BUCKETS - 1).astype(np.int64)
    active = buckets + BUCKETS * np.arange(x.shape[1])
    bias = np.full((len(x), 1), BUCKETS * x.shape[1])
    return np.concatenate([active, bias], axis=1)


def worker(rank: int, table: SharedTable, procs: int, x, y, epochs: int, batch: int, lr: float):
    torch.set_num_threads(1)
    weights = table.torch()  # the shared table itself, no copy
    shard = np.arange(rank, len(y), procs)
    rng = np.random.default_rng(rank)
    for _ in range(epochs):
        rng.shuffle(shard)
        for start in range(0, len(shard), batch):
            idx = shard[start : start + batch]
            ids = torch.from_numpy(x[idx])  # (b, 65) active rows
            rows = weights[ids.reshape(-1)].requires_grad_()  # gathered copy: autograd leaf
            logits = rows.view(len(idx), -1, 10).sum(dim=1)
            loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(y[idx]))
            loss.backward()
            table.adagrad(ids.reshape(-1), rows.grad, lr=lr)  # lock-free, in place
    return len(shard)


def accuracy(table: SharedTable, x, y) -> float:
    logits = table.numpy()[x].sum(axis=1)
    return float((logits.argmax(axis=1) == y).mean())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args()
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    f_train, f_test = features(x_train), features(x_test)
    rows = BUCKETS * x.shape[1] + 1
    with SharedTable.create(None, (rows, 10), optimizer="adagrad") as table:
        start = time.perf_counter()
        seen = train(
            worker,
            num_procs=args.procs,
            args=(table, args.procs, f_train, y_train, args.epochs, args.batch, args.lr),
        )
        took = time.perf_counter() - start
        print(
            f"{args.procs} Hogwild processes, {sum(seen)} samples x {args.epochs} epochs in "
            f"{took:.1f} s; {table.update_count} lock-free Adagrad updates"
        )
        print(f"test accuracy {accuracy(table, f_test, y_test):.3f}")


if __name__ == "__main__":
    main()
