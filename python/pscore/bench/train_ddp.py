"""One worker of the training benchmark's DDP peers: torch DistributedDataParallel on the gloo
backend or on pscore's torch backend, the same workload, data sharding (DistributedSampler,
seeded, reshuffled per epoch), optimizer and timing as the pscore runs. Started by
`python -m pscore.bench train` with RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT set."""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DistributedSampler

from pscore.bench.train_clock import Clock
from pscore.bench.train_workloads import WORKLOADS, workload
from pscore.train.optimizers import resolve

__all__ = ["main"]


def _agree(flag: bool) -> bool:
    t = torch.tensor([int(flag)], dtype=torch.int64)
    dist.broadcast(t, src=0)
    return bool(t.item())


def _accuracy(model, test: tuple) -> float:
    *inputs, y = (torch.as_tensor(a) for a in test)
    model.eval()
    with torch.no_grad():
        correct = int((model(*inputs).argmax(1) == y).sum())
    model.train()
    return correct / len(y)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--workload", choices=WORKLOADS, required=True)
    p.add_argument("--backend", choices=["gloo", "pscore"], required=True)
    p.add_argument("--max-epochs", type=int, default=None, help="cap on the epochs")
    p.add_argument("--out", required=True, help="rank 0 writes its result here (JSON)")
    args = p.parse_args()

    torch.set_num_threads(1)
    if args.backend == "pscore":
        import pscore.torch_backend  # noqa: F401 - registers the backend
    dist.init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    w = workload(args.workload, args.max_epochs)
    train, test = w.make_data()
    *inputs, y = (torch.as_tensor(a) for a in train)
    model = DistributedDataParallel(w.make_model())
    optimizer = resolve(w.optimizer, w.optimizer_args).torch(model.parameters())
    sampler = DistributedSampler(range(len(y)), world, rank, shuffle=True, seed=0)
    clock = Clock(w, world, len(y), _agree)
    clock.start()
    epoch, stop = 0, False
    while not stop:
        sampler.set_epoch(epoch)
        shard = torch.tensor(list(sampler))
        for start in range(0, len(shard), w.batch_size):
            batch = shard[start : start + w.batch_size]
            optimizer.zero_grad()
            w.loss_fn(model(*(x[batch] for x in inputs)), y[batch]).backward()
            optimizer.step()
            stop = clock.after_step()
            if stop:
                break
        stop = stop or clock.after_epoch(lambda: _accuracy(model.module, test))
        epoch += 1
    if rank == 0:
        clock.write(args.out)
    dist.barrier()  # no rank tears its group down while another still uses it
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
