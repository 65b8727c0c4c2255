"""Parameter-server training of a two-layer MLP on scikit-learn's digits: two pserver shards,
N worker processes that find them through a store, sync (BSP) updates with Adam on the servers,
and a checkpoint at the end that loads with pscore.ps.read_checkpoint (no server needed).

    python examples/ps_digits.py --workers 2 --mode sync
    python examples/ps_digits.py --workers 3 --mode sync --backup-workers 1
    python examples/ps_digits.py --workers 2 --mode ssp --staleness 2

Each worker keeps a torch copy of the model, computes gradients on its shard of every batch,
pushes them to the servers (one round trip for all tables with push_many) and pulls the new
parameters back. The servers average the workers' gradients of a step and apply Adam once.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from pscore.ps import Adam, PSClient, read_checkpoint
from pscore.store import TCPStore


def data():
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y, test_size=0.25, random_state=0, stratify=y)


def model() -> torch.nn.Module:
    torch.manual_seed(0)  # every worker builds the same initial parameters
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))


def worker(rank: int, args, store_port: int) -> None:
    x, _, y, _ = data()
    net = model()
    params = dict(net.named_parameters())
    client = PSClient(store=TCPStore("127.0.0.1", store_port, timeout=60), worker_id=rank)
    for name, p in params.items():
        client.create_dense(
            name,
            init=p.detach(),
            optimizer=Adam(lr=args.lr),
            consistency=args.mode,
            staleness=args.staleness,
            backup_workers=args.backup_workers,
        )
    client.pull_many({name: p.data for name, p in params.items()})
    rng = np.random.default_rng(0)
    for epoch in range(args.epochs):
        order = rng.permutation(len(y))
        for start in range(0, len(y) - args.batch + 1, args.batch):
            idx = order[start : start + args.batch][rank :: args.workers]
            net.zero_grad()
            loss = torch.nn.functional.cross_entropy(
                net(torch.from_numpy(x[idx])), torch.from_numpy(y[idx])
            )
            loss.backward()
            client.push_many({name: p.grad for name, p in params.items()})
            client.pull_many({name: p.data for name, p in params.items()})
        if rank == 0:
            print(f"epoch {epoch}: loss {loss.item():.3f}", flush=True)
    client.worker_done()  # sync rounds stop waiting for this worker


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--mode", choices=["sync", "async", "ssp"], default="sync")
    p.add_argument("--staleness", type=int, default=2)
    p.add_argument("--backup-workers", type=int, default=0)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.01)
    args = p.parse_args()

    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=60)
    url = f"tcp://127.0.0.1:{store.port}"
    servers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "pscore.ps.pserver",
                "--shard",
                str(s),
                "--num-shards",
                "2",
                "--num-workers",
                str(args.workers),
                "--store",
                url,
            ],
            stdout=subprocess.DEVNULL,
        )
        for s in range(2)
    ]
    try:
        ctx = mp.get_context("spawn")
        procs = [
            ctx.Process(target=worker, args=(r, args, store.port)) for r in range(args.workers)
        ]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join()
        client = PSClient(store=store, worker_id=0)
        ckpt = tempfile.mkdtemp(prefix="ps_digits_")
        client.save(ckpt)
        print(
            "server stats:",
            [(s["shard"], s["requests"], s["latency_p50_us"]) for s in client.stats()],
        )
    finally:
        for s in servers:
            s.terminate()
            s.wait()
    net = model()
    saved = read_checkpoint(ckpt)
    net.load_state_dict({k: torch.from_numpy(v) for k, v in saved.items()})
    _, x_test, _, y_test = data()
    acc = (net(torch.from_numpy(x_test)).argmax(1).numpy() == y_test).mean()
    print(f"test accuracy {acc:.3f} (checkpoint in {ckpt}: {sorted(os.listdir(ckpt))})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
