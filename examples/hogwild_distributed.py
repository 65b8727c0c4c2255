"""Distributed Hogwild (SINGA): each "machine" runs a Hogwild group of worker processes on its
own shared table, and the machines average their tables every --sync-every local updates over
pscore's collectives.

Two machines on this host, each with 2 Hogwild workers:
    pscore-run -n 2 examples/hogwild_distributed.py --procs 2

Each pscore rank plays one machine: it joins the process group (pscore.init_process_group reads
the launcher's environment), creates its table, and runs train(..., sync=DistributedHogwild(...)):
the workers train while this process averages the table with the other machines in the
background; a final average after the last update leaves every machine with the same model.
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import pscore
from pscore.hogwild import DistributedHogwild, SharedTable, train

BUCKETS = 4


def features(x: np.ndarray) -> np.ndarray:
    buckets = np.minimum(x // (17 / BUCKETS), BUCKETS - 1).astype(np.int64)
    active = buckets + BUCKETS * np.arange(x.shape[1])
    return np.concatenate([active, np.full((len(x), 1), BUCKETS * x.shape[1])], axis=1)


def softmax_grad(w: np.ndarray, ids: np.ndarray, y: np.ndarray) -> np.ndarray:
    """d(cross-entropy)/d(row) for every active row of every sample in the batch."""
    logits = w[ids].sum(axis=1)
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    return np.repeat(p / len(y), ids.shape[1], axis=0).astype(np.float32)


def worker(rank: int, table: SharedTable, shard: np.ndarray, x, y, epochs: int, lr: float):
    w = table.numpy()
    mine = shard[rank::2].copy()
    rng = np.random.default_rng(rank)
    for _ in range(epochs):
        rng.shuffle(mine)
        for start in range(0, len(mine), 8):
            idx = mine[start : start + 8]
            table.adagrad(x[idx].reshape(-1), softmax_grad(w, x[idx], y[idx]), lr=lr)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=2, help="Hogwild workers per machine")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--sync-every", type=int, default=50, help="local updates between averages")
    p.add_argument("--lr", type=float, default=0.1)
    args = p.parse_args()
    pscore.init_process_group()
    machine, machines = pscore.get_rank(), pscore.get_world_size()
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    f_train, f_test = features(x_train), features(x_test)
    shard = np.arange(machine, len(y_train), machines)  # this machine's part of the data
    rows = BUCKETS * x.shape[1] + 1
    with SharedTable.create(None, (rows, 10), optimizer="adagrad") as table:
        sync = DistributedHogwild([table], sync_every=args.sync_every)
        train(
            worker,
            num_procs=args.procs,
            args=(table, shard, f_train, y_train, args.epochs, args.lr),
            sync=sync,
        )
        acc = float((table.numpy()[f_test].sum(axis=1).argmax(axis=1) == y_test).mean())
        check = np.array([table.numpy().sum()], dtype=np.float64)
        pscore.all_reduce(check, op="max")
        same = bool(np.isclose(check[0], table.numpy().sum()))
        print(
            f"machine {machine}/{machines}: {sync.rounds} averaging rounds, test accuracy "
            f"{acc:.3f}, tables identical across machines: {same}"
        )
    pscore.destroy_process_group()


if __name__ == "__main__":
    main()
