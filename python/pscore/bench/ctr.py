"""A click-through workload with a 1 M-row embedding table, shared by examples/embeddings.py
and the benchmark comparing the hybrid strategy with torch DDP on gloo:

    python -m pscore.bench.ctr --compare ddp-gloo,ddp-gloo-sparse --json out.json

Data (make_data): each sample has one id per field of FIELD_ROWS (the first field has `rows`
ids) and a bag of up to TAGS_PER_SAMPLE tags (0 pads), ids drawn with Zipf-like popularity so
training sees repeats. Every id has a hidden weight; the label is Bernoulli(sigmoid(sum of the
sample's hidden weights + noise)), so a model that learns the ids' weights reaches a known AUC.
Model (make_model): an nn.Embedding per field and an nn.EmbeddingBag (mean, padding_idx 0) for
the tags, concatenated into an MLP; BCE-with-logits loss.

The benchmark runs 2 workers with the same model, batch and optimizer (Adam) under each system,
alternating phases (hybrid, the peers, hybrid, the peers...) with fresh processes, and prints
the p50 step time over all phases and samples/s (workers x batch / p50). Systems: `hybrid`
with 1 parameter server (dense layers by allreduce, the tables' rows pulled and pushed per
batch); `ddp-gloo`, the model as it is (every step allreduces the tables' full dense gradients
and Adam updates every row); `ddp-gloo-sparse`, the tables built with sparse=True (gloo
allreduces sparse gradients, SparseAdam updates the rows touched, as the servers do). Ratio =
hybrid / peer (above 1: hybrid is faster).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from .. import _config
from .report import p50, print_table, write_json

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
    "workload_fields",
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


def make_model(rows: int = FIELD_ROWS[0], table_device: Any = None, sparse: bool = False) -> Any:
    """The CTR model, seeded. table_device="meta" builds the embedding tables without memory
    (for the hybrid strategy, which keeps them on the parameter servers); sparse: the tables
    give sparse gradients (torch's sparse=True)."""
    import torch

    class CTRModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            sizes = (rows, *FIELD_ROWS[1:])
            self.fields = torch.nn.ModuleList(
                torch.nn.Embedding(n, DIM, sparse=sparse, device=table_device) for n in sizes
            )
            self.tags = torch.nn.EmbeddingBag(
                TAG_ROWS, DIM, mode="mean", padding_idx=0, sparse=sparse, device=table_device
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


def workload_fields(samples: int = 100_000) -> dict:
    """This workload as the keyword arguments of pscore.bench.train_workloads.Workload."""
    return {
        "name": "ctr",
        "make_model": make_model,
        "make_data": lambda: make_data(samples=samples),
        "loss_fn": loss_fn,
        "optimizer": OPTIMIZER,
        "optimizer_args": dict(OPTIMIZER_ARGS),
        "batch_size": BATCH,
        "target_accuracy": None,
        "about": f"CTR model, {FIELD_ROWS[0]:,}-row table + 3 smaller, synthetic, samples/s",
    }


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
            yield {_config.STORE.name: url, _config.NUM_SERVERS.name: str(servers)}
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
SYSTEMS = {
    "hybrid": "pscore hybrid, 1 server",
    "ddp-gloo": "DDP gloo, dense grads",
    "ddp-gloo-sparse": "DDP gloo, sparse grads",
}


def _batches(args, rank: int, world: int):
    train, _ = make_data(args.rows, args.samples, seed=0)
    n = len(train[0]) // world
    shard = [t[rank * n : (rank + 1) * n] for t in train]
    steps = args.warmup + args.steps
    starts = [(i * args.batch) % (n - args.batch) for i in range(steps)]
    return [tuple(t[s : s + args.batch] for t in shard) for s in starts]


def _time_steps(step, batches, warmup: int, barrier) -> list[float]:
    """Seconds of each step after the warmup (the steps are lockstep: each ends with the
    job's collective or sync push, so one worker's times are the job's)."""
    for b in batches[:warmup]:
        step(b)
    barrier()
    times = []
    for b in batches[warmup:]:
        start = time.perf_counter()
        step(b)
        times.append(time.perf_counter() - start)
    barrier()
    return times


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


def _ddp_optimizers(model: Any, sparse: bool) -> list:
    """Adam; with sparse tables, torch's SparseAdam (lazy Adam, as the servers run) for them."""
    import torch

    kinds = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    tables = [m.weight for m in model.modules() if isinstance(m, kinds)] if sparse else []
    dense = [p for p in model.parameters() if all(p is not t for t in tables)]
    optimizers = [torch.optim.Adam(dense, **OPTIMIZER_ARGS)]
    return optimizers + ([torch.optim.SparseAdam(tables, **OPTIMIZER_ARGS)] if tables else [])


def _ddp_worker(args) -> tuple[int, float]:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    sparse = args.worker == "ddp-gloo-sparse"
    model = torch.nn.parallel.DistributedDataParallel(make_model(args.rows, sparse=sparse))
    optimizers = _ddp_optimizers(model.module, sparse)

    def step(batch):
        *inputs, labels = batch
        loss = loss_fn(model(*inputs), labels)
        for o in optimizers:
            o.zero_grad()
        loss.backward()
        for o in optimizers:
            o.step()

    batches = _batches(args, dist.get_rank(), dist.get_world_size())
    seconds = _time_steps(step, batches, args.warmup, dist.barrier)
    rank = dist.get_rank()
    # DDP's reducer holds the gloo group inside reference cycles: free it now, not during
    # interpreter teardown, where a gloo group's threads can abort the process (seen once in CI:
    # "terminate called without an active exception").
    model = optimizers = step = None
    gc.collect()
    dist.destroy_process_group()
    return rank, seconds


def _worker(args) -> int:
    rank, seconds = (_hybrid_worker if args.worker == "hybrid" else _ddp_worker)(args)
    if rank == 0:
        with open(args.result, "w") as f:
            json.dump({"step_seconds": seconds}, f)
    return 0


def _phase(system: str, args) -> list[float]:
    """The step times of one run of `system` with fresh processes."""
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
            return json.load(f)["step_seconds"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench.ctr",
        description="CTR model with a 1M-row table: hybrid vs torch DDP on gloo, samples/s",
    )
    p.add_argument(
        "--compare",
        default="ddp-gloo,ddp-gloo-sparse",
        help="peers, comma-separated: ddp-gloo (dense table gradients), ddp-gloo-sparse "
        "(sparse=True tables, SparseAdam), or none (default: %(default)s)",
    )
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--servers", type=int, default=1)
    p.add_argument("--rows", type=int, default=FIELD_ROWS[0], help="rows of the largest table")
    p.add_argument("--samples", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=BATCH, help="per worker")
    p.add_argument("--steps", type=int, default=20, help="timed steps per phase")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--phases", type=int, default=3, help="runs per system, alternating")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per phase")
    p.add_argument("--json", default=None, metavar="PATH")
    p.add_argument("--worker", choices=list(SYSTEMS), help=argparse.SUPPRESS)
    p.add_argument("--result", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker:
        return _worker(args)
    peers = [] if args.compare == "none" else args.compare.split(",")
    unknown = [p for p in peers if p not in SYSTEMS or p == "hybrid"]
    if unknown:
        raise SystemExit(
            f"--compare: no peer {', '.join(unknown)}; the peers are ddp-gloo, "
            "ddp-gloo-sparse (or none)"
        )
    systems = ["hybrid", *peers]
    times: dict[str, list[float]] = {s: [] for s in systems}
    for _ in range(args.phases):
        for s in systems:
            times[s] += _phase(s, args)
    samples = args.workers * args.batch
    rate = {s: samples / p50(t) for s, t in times.items()}
    ratio = {p: rate["hybrid"] / rate[p] for p in peers}
    rows = [[SYSTEMS[s], p50(times[s]) * 1e3, rate[s], ratio.get(s, 1.0)] for s in systems]
    print_table(
        f"CTR model, {args.rows} x {DIM} table, {args.workers} workers, batch {args.batch} "
        f"per worker, Adam; p50 over {args.phases} x {args.steps} steps",
        ["system", "step ms", "samples/s", "hybrid/it"],
        rows,
        [26, 10, 12, 11],
    )
    result = {"rows": args.rows, "workers": args.workers, "batch": args.batch}
    result.update(samples_per_s=rate, ratio=ratio, step_seconds=times)
    write_json(args.json, {"benchmark": "ctr", **result})
    return 0


if __name__ == "__main__":
    sys.exit(main())
