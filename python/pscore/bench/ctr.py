"""A click-through workload with a 1 M-row embedding table, shared by examples/embeddings.py
and the benchmark comparing the hybrid strategy with torch DDP on gloo:

    python -m pscore.bench.ctr --compare ddp-gloo --json out.json

Data (make_data): each sample has one id per field of FIELD_ROWS (the first field has `rows`
ids) and a bag of up to TAGS_PER_SAMPLE tags (0 pads), ids drawn with Zipf-like popularity so
training sees repeats. Every id has a hidden weight; the label is Bernoulli(sigmoid(sum of the
sample's hidden weights + noise)), so a model that learns the ids' weights reaches a known AUC.
Model (make_model): an nn.Embedding per field and an nn.EmbeddingBag (mean, padding_idx 0) for
the tags, concatenated into an MLP; BCE-with-logits loss.

The benchmark runs 2 workers with the same model, batch and optimizer (Adam) under each system,
alternating phases (hybrid, DDP, hybrid, DDP), and prints samples/s: `hybrid` with 1 parameter
server (dense layers by allreduce, the tables' rows pulled and pushed per batch) and DDP on gloo
(every step allreduces the tables' full dense gradients: DDP does not reduce sparse ones on
gloo). Ratio = hybrid / DDP (above 1: hybrid is faster).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from .report import print_table, write_json

__all__ = [
    "BATCH",
    "FIELD_ROWS",
    "OPTIMIZER",
    "OPTIMIZER_ARGS",
    "TAG_ROWS",
    "auc",
    "local_servers",
    "loss_fn",
    "main",
    "make_data",
    "make_model",
]

FIELD_ROWS = (1_000_000, 50_000, 1_000)  # ids per field; the first is make_data's `rows`
TAG_ROWS = 10_000
TAGS_PER_SAMPLE = 4
DIM = 16
HIDDEN = 64
BATCH = 512  # per worker
OPTIMIZER, OPTIMIZER_ARGS = "adam", {"lr": 0.01}
ZIPF_EXPONENT = 1.1
WEIGHT_STD = 1.0  # of the hidden per-id weights
NOISE_STD = 0.5


def _zipf_ids(rng: np.random.Generator, rows: int, n: int, exponent: float = ZIPF_EXPONENT):
    """n ids in [0, rows) with P(the k-th most popular) ~ 1 / (k + 1)^exponent; popularity
    ranks are scattered over the id range by a permutation."""
    cdf = np.cumsum(1.0 / np.arange(1, rows + 1, dtype=np.float64) ** exponent)
    ranks = np.searchsorted(cdf, rng.random(n) * cdf[-1])
    return rng.permutation(rows)[np.minimum(ranks, rows - 1)]


def make_data(rows: int = FIELD_ROWS[0], samples: int = 400_000, seed: int = 0):
    """(train, test), each (ids int64 [n, fields], tags int64 [n, TAGS_PER_SAMPLE], labels
    float32 [n]); test is a fifth of `samples`."""
    import torch

    rng = np.random.default_rng(seed)
    sizes = (rows, *FIELD_ROWS[1:])
    hidden = [rng.normal(0, WEIGHT_STD, n) for n in (*sizes, TAG_ROWS)]
    ids = np.stack([_zipf_ids(rng, n, samples) for n in sizes], axis=1)
    tags = 1 + _zipf_ids(rng, TAG_ROWS - 1, samples * TAGS_PER_SAMPLE)
    tags = tags.reshape(samples, TAGS_PER_SAMPLE)
    tags[np.arange(TAGS_PER_SAMPLE) >= rng.integers(1, TAGS_PER_SAMPLE + 1, (samples, 1))] = 0
    present = tags > 0
    tag_mean = (hidden[-1][tags] * present).sum(1) / present.sum(1)
    logit = sum(h[ids[:, f]] for f, h in enumerate(hidden[:-1])) + tag_mean
    logit = logit + rng.normal(0, NOISE_STD, samples)
    labels = (rng.random(samples) < 1 / (1 + np.exp(-logit))).astype(np.float32)
    cut = samples - samples // 5
    arrays = [torch.from_numpy(a) for a in (ids, tags, labels)]
    return tuple(a[:cut] for a in arrays), tuple(a[cut:] for a in arrays)


def make_model(rows: int = FIELD_ROWS[0], table_device: Any = None) -> Any:
    """The CTR model, seeded. table_device="meta" builds the embedding tables without memory
    (for the hybrid strategy, which keeps them on the parameter servers)."""
    import torch

    class CTRModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            sizes = (rows, *FIELD_ROWS[1:])
            self.fields = torch.nn.ModuleList(
                torch.nn.Embedding(n, DIM, device=table_device) for n in sizes
            )
            self.tags = torch.nn.EmbeddingBag(
                TAG_ROWS, DIM, mode="mean", padding_idx=0, device=table_device
            )
            self.mlp = torch.nn.Sequential(
                torch.nn.Linear(DIM * (len(sizes) + 1), HIDDEN),
                torch.nn.ReLU(),
                torch.nn.Linear(HIDDEN, 1),
            )

        def forward(self, ids, tags):
            x = [e(ids[:, f]) for f, e in enumerate(self.fields)] + [self.tags(tags)]
            return self.mlp(torch.cat(x, 1)).squeeze(1)

    torch.manual_seed(0)
    return CTRModel()


def loss_fn(logits: Any, labels: Any) -> Any:
    import torch

    return torch.nn.functional.binary_cross_entropy_with_logits(logits, labels)


def auc(scores: Any, labels: Any) -> float:
    """Area under the ROC curve (the Mann-Whitney statistic, ties averaged)."""
    s = np.asarray(scores, dtype=np.float64)
    y = np.asarray(labels) > 0.5
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s))
    sorted_s = s[order]
    starts = np.r_[0, np.flatnonzero(np.diff(sorted_s)) + 1]
    ends = np.r_[starts[1:], len(s)]
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    pos, neg = int(y.sum()), int((~y).sum())
    if pos == 0 or neg == 0:
        raise ValueError("AUC needs both positive and negative labels")
    return float((ranks[y].sum() - pos * (pos + 1) / 2) / (pos * neg))


@contextlib.contextmanager
def local_servers(servers: int, workers: int, timeout: float = 60.0):
    """Starts `servers` pserver shards on loopback for `workers` workers; yields the
    environment a worker needs to find them (PSCORE_STORE, PSCORE_NUM_SERVERS)."""
    with tempfile.TemporaryDirectory(prefix="pscore-ctr-") as tmp:
        url = f"file://{tmp}/store"
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        procs = [
            subprocess.Popen(
                [
                    *(sys.executable, "-m", "pscore.ps.pserver", "--shard", str(s)),
                    *("--num-shards", str(servers), "--num-workers", str(workers)),
                    *("--store", url, "--store-timeout", str(timeout)),
                ],
                env=env,
                stdout=subprocess.DEVNULL,
            )
            for s in range(servers)
        ]
        try:
            yield {"PSCORE_STORE": url, "PSCORE_NUM_SERVERS": str(servers)}
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


# ---- the benchmark -------------------------------------------------------------------------
SYSTEMS = {"hybrid": "pscore hybrid (1 server)", "ddp-gloo": "torch DDP, gloo"}


def _batches(args, rank: int, world: int):
    train, _ = make_data(args.rows, args.samples, seed=0)
    n = len(train[0]) // world
    shard = [t[rank * n : (rank + 1) * n] for t in train]
    steps = args.warmup + args.steps
    starts = [(i * args.batch) % (n - args.batch) for i in range(steps)]
    return [tuple(t[s : s + args.batch] for t in shard) for s in starts]


def _time_steps(step, batches, warmup: int, barrier) -> float:
    for b in batches[:warmup]:
        step(b)
    barrier()
    start = time.perf_counter()
    for b in batches[warmup:]:
        step(b)
    barrier()
    return time.perf_counter() - start


def _hybrid_worker(args) -> tuple[int, float]:
    import pscore

    model = make_model(args.rows, table_device="meta")
    trainer = pscore.Trainer(
        model, loss_fn, optimizer=OPTIMIZER, optimizer_args=OPTIMIZER_ARGS, strategy="hybrid"
    )
    rank, world = trainer.run.rank, trainer.run.world_size
    seconds = _time_steps(
        trainer.step, _batches(args, rank, world), args.warmup, pscore.collectives.barrier
    )
    trainer.strategy.finish()
    return rank, seconds


def _ddp_worker(args) -> tuple[int, float]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(make_model(args.rows))
    optimizer = torch.optim.Adam(model.parameters(), **OPTIMIZER_ARGS)

    def step(batch):
        *inputs, labels = batch
        loss = loss_fn(model(*inputs), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    batches = _batches(args, dist.get_rank(), dist.get_world_size())
    seconds = _time_steps(step, batches, args.warmup, dist.barrier)
    rank = dist.get_rank()
    dist.destroy_process_group()
    return rank, seconds


def _worker(args) -> int:
    rank, seconds = (_hybrid_worker if args.worker == "hybrid" else _ddp_worker)(args)
    if rank == 0:
        with open(args.result, "w") as f:
            json.dump({"seconds": seconds}, f)
    return 0


def _phase(system: str, args) -> float:
    """samples/s of one run of `system` with fresh processes."""
    with tempfile.TemporaryDirectory(prefix="pscore-ctr-") as tmp:
        result = os.path.join(tmp, "result.json")
        command = [sys.executable, "-m", "pscore.launch", "-n", str(args.workers), "-m"]
        command += ["pscore.bench.ctr", "--worker", system, "--result", result]
        command += [f"--{k}={getattr(args, k)}" for k in ("rows", "samples", "batch")]
        command += [f"--steps={args.steps}", f"--warmup={args.warmup}"]
        with contextlib.ExitStack() as stack:
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
            if system == "hybrid":
                env.update(stack.enter_context(local_servers(args.servers, args.workers)))
            subprocess.run(command, env=env, check=True, timeout=args.timeout)
        with open(result) as f:
            seconds = json.load(f)["seconds"]
    return args.workers * args.batch * args.steps / seconds


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench.ctr",
        description="CTR model with a 1M-row table: hybrid vs torch DDP on gloo, samples/s",
    )
    p.add_argument("--compare", default="ddp-gloo", help="ddp-gloo, or none")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--rows", type=int, default=FIELD_ROWS[0], help="rows of the largest table")
    p.add_argument("--samples", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=BATCH, help="per worker")
    p.add_argument("--steps", type=int, default=30, help="timed steps per phase")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--phases", type=int, default=2, help="runs per system, alternating")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per phase")
    p.add_argument("--json", default=None, metavar="PATH")
    p.add_argument("--worker", choices=list(SYSTEMS), help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker:
        return _worker(args)
    if args.compare not in ("ddp-gloo", "none"):
        raise SystemExit(f"--compare takes ddp-gloo or none, not {args.compare!r}")
    systems = ["hybrid"] + (["ddp-gloo"] if args.compare == "ddp-gloo" else [])
    rates: dict[str, list[float]] = {s: [] for s in systems}
    for _ in range(args.phases):
        for s in systems:
            rates[s].append(_phase(s, args))
    best = {s: max(r) for s, r in rates.items()}
    rows = [[SYSTEMS[s], best[s], ", ".join(f"{r:.0f}" for r in rates[s])] for s in systems]
    print_table(
        f"CTR model, {args.rows} x {DIM} table, {args.workers} workers, batch {args.batch} "
        "per worker, Adam",
        ["system", "samples/s", "phases"],
        rows,
        [28, 12, 24],
    )
    result = {"rows": args.rows, "workers": args.workers, "batch": args.batch, "rates": rates}
    if "ddp-gloo" in best:
        result["ratio"] = best["hybrid"] / best["ddp-gloo"]
        print(f"# hybrid / ddp-gloo = {result['ratio']:.2f}x")
    write_json(args.json, {"benchmark": "ctr", **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
