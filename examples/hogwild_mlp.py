"""PyTorch's mnist_hogwild with pscore: N processes train one MLP on scikit-learn's digits, its
parameters in shared tables that every worker updates in place without locks.

    python examples/hogwild_mlp.py --procs 2

SharedParameters moves the model's parameters into shared memory and pickles by table names;
each worker binds its own copy of the architecture to the tables and steps a HogwildOptimizer,
which applies the gradients with pscore's fused kernels (no optimizer state per process).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from pscore.hogwild import SharedParameters, train


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def worker(rank: int, shared: SharedParameters, procs: int, x, y, epochs: int, lr: float):
    torch.set_num_threads(1)
    model = shared.bind(make_model())  # the parameters are now the shared tables
    opt = shared.optimizer(model, lr=lr)
    shard = torch.arange(rank, len(y), procs)
    for _ in range(epochs):
        for batch in shard[torch.randperm(len(shard))].split(16):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()  # lock-free, in place: the other workers see it at once
    return len(shard)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--procs", type=int, default=2)
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--optimizer", default="adagrad", choices=["sgd", "adagrad", "adam"])
    args = p.parse_args()
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        (x / 16.0).astype(np.float32), y, test_size=0.25, random_state=0
    )
    x_train, y_train = torch.from_numpy(x_train), torch.from_numpy(y_train)
    torch.manual_seed(0)
    model = make_model()
    with SharedParameters(model, optimizer=args.optimizer) as shared:
        start = time.perf_counter()
        train(
            worker,
            num_procs=args.procs,
            args=(shared, args.procs, x_train, y_train, args.epochs, args.lr),
        )
        took = time.perf_counter() - start
        with torch.no_grad():  # the parent's model is bound to the same tables
            pred = model(torch.from_numpy(x_test)).argmax(1).numpy()
        print(
            f"{args.procs} Hogwild processes, {args.epochs} epochs of {len(y_train)} samples "
            f"in {took:.1f} s ({args.optimizer}): test accuracy {(pred == y_test).mean():.3f}"
        )


if __name__ == "__main__":
    main()
