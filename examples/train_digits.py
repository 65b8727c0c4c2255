"""Data-parallel training of a small MLP on scikit-learn's digits with pscore collectives.

Run on 2 local ranks:  pscore-run -n 2 examples/train_digits.py
                  or:  torchrun --standalone --nproc-per-node 2 examples/train_digits.py
Each rank trains on its shard of the data; gradients are averaged with pscore.all_reduce after
every backward pass (what DDP does), so all ranks keep identical weights.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import pscore


def load_shard(rank: int, world: int):
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    shard = slice(rank, None, world)
    return (
        torch.from_numpy(x_train[shard]),
        torch.from_numpy(y_train[shard]),
        torch.from_numpy(x_test),
        torch.from_numpy(y_test),
    )


def average_gradients(model: torch.nn.Module) -> None:
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])  # one message per step
    pscore.all_reduce(flat, op=pscore.ReduceOp.AVG)
    at = 0
    for g in grads:
        g.copy_(flat[at : at + g.numel()].view_as(g))
        at += g.numel()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()

    pscore.init_process_group()  # rank, world size and master from the launcher's environment
    rank, world = pscore.get_rank(), pscore.get_world_size()
    torch.manual_seed(0)  # same initial weights everywhere
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    for p in model.parameters():  # make sure: start from rank 0's weights
        pscore.broadcast(p.data, src=0)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    x, y, x_test, y_test = load_shard(rank, world)
    steps = len(x) // args.batch
    counts = torch.tensor([steps], dtype=torch.int64)
    pscore.all_reduce(counts, op="min")  # equal step counts on every rank
    gen = torch.Generator().manual_seed(rank)
    for epoch in range(args.epochs):
        order = torch.randperm(len(x), generator=gen)
        for step in range(int(counts.item())):
            idx = order[step * args.batch : (step + 1) * args.batch]
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            average_gradients(model)
            opt.step()
        if rank == 0 and (epoch % 5 == 4 or epoch == args.epochs - 1):
            with torch.no_grad():
                acc = (model(x_test).argmax(1) == y_test).float().mean().item()
            print(
                f"epoch {epoch + 1:3d}  loss {loss.item():.4f}  test accuracy {acc:.4f}  "
                f"(world {world}, {pscore.get_backend()})",
                flush=True,
            )
    # All ranks must hold the same weights.
    digest = torch.cat([p.data.reshape(-1) for p in model.parameters()]).double().sum().reshape(1)
    spread = digest.clone()
    pscore.all_reduce(spread, op="max")
    pscore.all_reduce(digest, op="min")
    assert spread.item() == digest.item(), "ranks diverged"
    pscore.destroy_process_group()


if __name__ == "__main__":
    main()
