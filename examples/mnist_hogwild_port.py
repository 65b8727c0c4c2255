"""PyTorch's mnist_hogwild example, ported to pscore and run on scikit-learn's digits: an MLP
trained by 2 processes started with torch.multiprocessing.Process, each passed the
model, with SGD(lr=0.01, momentum=0.5). The script's shape is torch's; `--impl` picks how the
model is shared:

    torch   model.share_memory(); each process steps torch.optim.SGD (momentum per process)
    pscore  SharedParameters(model, optimizer="sgd", lr=0.01, momentum=0.5); each process steps
            SharedParameters.of(model).optimizer(model): the fused kernels, one shared buffer

    python examples/mnist_hogwild_port.py --impl pscore --epochs 1
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from pscore.hogwild import SharedParameters


class Net(torch.nn.Module):
    """mnist_hogwild's Net for 8x8 digits, as an MLP: two linear layers with dropout."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(64, 50)
        self.fc2 = torch.nn.Linear(50, 10)

    def forward(self, x):
        x = F.relu(self.fc1(x.flatten(1)))
        x = F.dropout(x, training=self.training)
        return F.log_softmax(self.fc2(x), dim=1)


def digits(seed: int = 0):
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(
        (x / 16.0).astype(np.float32).reshape(-1, 1, 8, 8), y, test_size=0.25, random_state=seed
    )
    as_torch = torch.from_numpy
    return (as_torch(x_train), as_torch(y_train)), (as_torch(x_test), as_torch(y_test))


def make_optimizer(impl: str, model, args):
    if impl == "torch":
        return torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    return SharedParameters.of(model).optimizer(model)  # lr and momentum given at creation


def train(rank: int, impl: str, args, model, dataset):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed + rank)
    x, y = dataset
    optimizer = make_optimizer(impl, model, args)
    model.train()
    for _ in range(args.epochs):
        for batch in torch.randperm(len(y)).split(args.batch_size):
            optimizer.zero_grad()
            loss = F.nll_loss(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()


def test(model, dataset) -> float:
    model.eval()
    x, y = dataset
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def run(impl: str, args) -> float:
    """Trains with `impl` ("torch" or "pscore") as mnist_hogwild does; returns test accuracy."""
    train_set, test_set = digits()
    torch.manual_seed(args.seed)
    model = Net()
    shared = None
    if impl == "torch":
        model.share_memory()  # gradients are allocated lazily, so they are not shared here
    else:
        shared = SharedParameters(model, optimizer="sgd", lr=args.lr, momentum=args.momentum)
    ctx = mp.get_context(args.start_method)
    processes = []
    for rank in range(args.num_processes):
        p = ctx.Process(target=train, args=(rank, impl, args, model, train_set))
        p.start()
        processes.append(p)
    deadline = time.monotonic() + args.timeout
    for p in processes:
        p.join(max(0.0, deadline - time.monotonic()))
    hung = [p for p in processes if p.is_alive()]
    for p in hung:
        p.kill()
        p.join()
    failed = [p.exitcode for p in processes if p.exitcode != 0]
    try:
        if hung:
            raise TimeoutError(f"{len(hung)} training processes ran past {args.timeout} s")
        if failed:
            raise RuntimeError(f"{len(failed)} training processes failed: exit codes {failed}")
        return test(model, test_set)
    finally:
        if shared is not None:
            shared.close()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--impl", choices=["torch", "pscore"], default="pscore")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--num-processes", type=int, default=2)
    p.add_argument("--start-method", choices=["fork", "spawn", "forkserver"], default="fork")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds for training to end")
    return p


if __name__ == "__main__":
    args = parser().parse_args()
    print(f"{args.impl}: test accuracy {run(args.impl, args):.3f}")
