"""Parameter-server benchmark: pscore's PS against a torch.distributed.rpc parameter server, in
one run, plus this machine's loopback TCP bandwidth measured by the same tool.

    python -m pscore.bench ps --servers 2 --workers 1 --compare torch-rpc --json out.json

The two systems never run at the same time (an idle torch RPC process keeps polling and takes
CPU from whatever else runs): the run alternates phases, pscore then torch then pscore then
torch, each with fresh server and worker processes, and pools each system's per-iteration times
over its phases, so both see the same drift in background load. Times are p50 per iteration;
with several workers the rates add up. Ratios are pscore / torch (above 1: pscore is faster).

Dense: push+pull of one float32 tensor split evenly over the servers, 4 KB to 64 MB. pscore:
push_pull (one round trip per shard); torch: rpc_async to every shard, whose function adds the
scaled gradient under a lock and returns a copy of the shard. algbw = 2 x bytes / time.
Sparse: batches of --batch ids drawn uniformly from --rows, rows of --dim floats, each batch
pushed then pulled. pscore: push_pull_sparse on a table created with capacity=--rows (memory
for the id range reserved up front, as the torch shards are preallocated; rows still get their
values on first touch; --no-reserve grows it instead); torch: one rpc per shard running
index_add_ then index_select on a preallocated --rows x --dim shard (the design of PyTorch's
parameter-server tutorial). Both apply SGD on the servers.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from typing import ClassVar

import numpy as np

from pscore._config import parse_bytes
from pscore.bench.report import human_bytes, p50, print_table, write_json

__all__ = ["LR", "main", "run", "run_phase"]

LR = 0.01
DEFAULT_SIZES = [4 << 10, 64 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
PHASES = 3  # phases per system, alternating pscore / torch


def _iters(nbytes: int, scale: float) -> int:
    return max(3, min(300, int(scale * (256 << 20) / nbytes)))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _measure(step, iters: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        step()
        samples.append(time.perf_counter() - t0)
    return samples


# ----- the torch.distributed.rpc parameter server (functions run on its servers) -----
class _TorchShard:
    dense: ClassVar[dict] = {}
    table = None
    lock = threading.Lock()


def _t_create_dense(n: int) -> None:
    import torch

    _TorchShard.dense[n] = torch.zeros(n)


def _t_push_pull(n: int, grad):
    with _TorchShard.lock:
        shard = _TorchShard.dense[n]
        shard.add_(grad, alpha=-LR)
        return shard.clone()


def _t_create_table(rows: int, dim: int) -> None:
    import torch

    if _TorchShard.table is None:
        _TorchShard.table = torch.zeros(rows, dim)


def _t_sparse(ids, grads):
    with _TorchShard.lock:
        _TorchShard.table.index_add_(0, ids, grads, alpha=-LR)
        return _TorchShard.table.index_select(0, ids)


def _torch_steps(args, rpc):
    import torch

    shards = [f"ps{s}" for s in range(args.servers)]

    def dense(nbytes):
        n = nbytes // 4
        bounds = np.linspace(0, n, args.servers + 1).astype(int)
        sizes = [int(b - a) for a, b in zip(bounds[:-1], bounds[1:])]
        for s, size in zip(shards, sizes):
            rpc.rpc_sync(s, _t_create_dense, args=(size,))
        grads = [torch.ones(size) for size in sizes]

        def step():
            futs = [
                rpc.rpc_async(s, _t_push_pull, args=(size, g))
                for s, size, g in zip(shards, sizes, grads)
            ]
            torch.cat([f.wait() for f in futs])

        return step

    def sparse(ids, grads):
        per_shard = (args.rows + args.servers - 1) // args.servers
        for s in shards:
            rpc.rpc_sync(s, _t_create_table, args=(per_shard, args.dim))
        tids = [torch.from_numpy(i) for i in ids]
        tgrads = torch.from_numpy(grads)
        out = torch.empty_like(tgrads)
        it = iter(range(1 << 62))

        def step():
            i = tids[next(it) % len(tids)]
            owner = i % args.servers
            futs = []
            for s in range(args.servers):
                sel = (owner == s).nonzero().squeeze(1)
                local = i[sel] // args.servers
                futs.append((sel, rpc.rpc_async(shards[s], _t_sparse, args=(local, tgrads[sel]))))
            for sel, f in futs:
                out[sel] = f.wait()

        return step

    return dense, sparse


def _pscore_steps(client, args):
    from pscore.ps import SGD

    def dense(nbytes):
        n = nbytes // 4
        client.create_dense(f"d{nbytes}", (n,), optimizer=SGD(lr=LR))
        grad, out = np.ones(n, np.float32), np.empty(n, np.float32)
        return lambda: client.push_pull(f"d{nbytes}", grad, out)

    def sparse(ids, grads):
        # Room for the id range up front, as the torch shards are preallocated (--no-reserve:
        # memory grows with the rows touched, paying page faults as it goes).
        capacity = 0 if args.no_reserve else args.rows
        client.create_sparse("emb", args.dim, optimizer=SGD(lr=LR), capacity=capacity)
        out = np.empty_like(grads)
        it = iter(range(1 << 62))
        return lambda: client.push_pull_sparse("emb", ids[next(it) % len(ids)], grads, out)

    return dense, sparse


# ----- processes -----
def _process(rank, system, args, rpc_port, store_port, barrier, queue):
    """torch: ranks 0..servers-1 serve RPC, the others are workers; pscore: all are workers."""
    if system == "torch":
        import torch
        from torch.distributed import rpc

        torch.set_num_threads(1)  # one intra-op thread per process: the cores are shared
        # torch's own rpc.init_rpc / shutdown use a deprecated form internally; not ours to fix.
        warnings.filterwarnings("ignore", message="You are using a Backend", category=UserWarning)
        name = f"ps{rank}" if rank < args.servers else f"worker{rank - args.servers}"
        opts = rpc.TensorPipeRpcBackendOptions(
            init_method=f"tcp://127.0.0.1:{rpc_port}", rpc_timeout=600
        )
        rpc.init_rpc(
            name, rank=rank, world_size=args.servers + args.workers, rpc_backend_options=opts
        )
        if rank < args.servers:
            rpc.shutdown()
            return
        wrank = rank - args.servers
        dense, sparse = _torch_steps(args, rpc)
    else:
        from pscore.ps import PSClient
        from pscore.store import TCPStore

        wrank = rank
        client = PSClient(
            store=TCPStore("127.0.0.1", store_port, timeout=120), worker_id=wrank, job_id="bench"
        )
        dense, sparse = _pscore_steps(client, args)
    result = {"dense": {}, "sparse": None}
    for nbytes in args.sizes:
        step = dense(nbytes)
        barrier.wait()
        result["dense"][nbytes] = _measure(step, _iters(nbytes, args.scale) // PHASES + 1)
    if args.batch:
        rng = np.random.default_rng(wrank)
        ids = [rng.integers(0, args.rows, args.batch, dtype=np.int64) for _ in range(64)]
        grads = rng.standard_normal((args.batch, args.dim)).astype(np.float32)
        step = sparse(ids, grads)
        barrier.wait()
        result["sparse"] = _measure(step, args.sparse_iters // PHASES + 1, warmup=5)
    barrier.wait()
    queue.put((wrank, result))
    if system == "torch":
        rpc.shutdown()
    else:
        client.close()


def run_phase(system: str, args) -> list[dict]:
    """Starts `system`'s servers and workers, returns each worker's samples."""
    from pscore.store import TCPStore

    servers, store_port = [], 0
    if system == "pscore":
        store = TCPStore("127.0.0.1", 0, is_master=True, timeout=120)
        store_port = store.port
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        url = f"tcp://127.0.0.1:{store_port}"
        servers = [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pscore.ps.pserver",
                    "--shard",
                    str(s),
                    "--num-shards",
                    str(args.servers),
                    "--num-workers",
                    str(args.workers),
                    "--store",
                    url,
                    "--job-id",
                    "bench",
                ],
                stdout=subprocess.DEVNULL,
                env=env,
            )
            for s in range(args.servers)
        ]
    ctx = mp.get_context("spawn")
    queue, barrier = ctx.Queue(), ctx.Barrier(args.workers)
    ranks = range(args.servers + args.workers) if system == "torch" else range(args.workers)
    rpc_port = _free_port()
    procs = [
        ctx.Process(target=_process, args=(r, system, args, rpc_port, store_port, barrier, queue))
        for r in ranks
    ]
    for p in procs:
        p.start()
    try:
        got = {}
        while len(got) < args.workers:
            try:
                wrank, result = queue.get(timeout=5)
                got[wrank] = result
            except Exception:  # noqa: BLE001 - queue.Empty: are the processes still alive?
                dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    raise RuntimeError(f"a {system} process exited with {dead[0]}") from None
        return [got[r] for r in range(args.workers)]
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
        for s in servers:
            s.terminate()
            s.wait()


def _retrying(fn, system, args, attempts: int = 3):
    """A phase again (fresh processes and ports) when one of its processes failed to start:
    TensorPipe's rendezvous occasionally loses a race for a just-freed port."""
    for attempt in range(attempts):
        try:
            return fn(system, args)
        except RuntimeError as e:
            if attempt == attempts - 1:
                raise
            print(f"# {system} phase failed ({e}); retrying with new processes", file=sys.stderr)
    raise AssertionError("unreachable")


def run(args) -> list[dict]:
    """Per worker: {"dense": {bytes: {system: p50 s}}, "sparse": {system: p50 s}}."""
    systems = ["pscore"] + (["torch"] if args.compare == "torch-rpc" else [])
    pooled = [{"dense": {n: {} for n in args.sizes}, "sparse": {}} for _ in range(args.workers)]
    for _ in range(PHASES):
        for system in systems:
            for w, result in enumerate(_retrying(run_phase, system, args)):
                for n in args.sizes:
                    pooled[w]["dense"][n].setdefault(system, []).extend(result["dense"][n])
                if result["sparse"]:
                    pooled[w]["sparse"].setdefault(system, []).extend(result["sparse"])
    for w in pooled:
        for n in args.sizes:
            w["dense"][n] = {k: p50(v) for k, v in w["dense"][n].items()}
        w["sparse"] = {k: p50(v) for k, v in w["sparse"].items()} or None
    return pooled


# ----- report -----
def _report(args, results, loopback) -> dict:
    systems = list(results[0]["dense"][args.sizes[0]]) if args.sizes else ["pscore"]
    both = "torch" in systems
    rows, dense = [], []
    for nbytes in args.sizes:
        entry = {"bytes": nbytes}
        line = [human_bytes(nbytes)]
        for name in systems:
            times = [r["dense"][nbytes][name] for r in results]
            entry[f"{name}_p50_us"] = p50(times) * 1e6
            entry[f"{name}_GBps"] = sum(2 * nbytes / t / 1e9 for t in times)
            line += [entry[f"{name}_p50_us"], entry[f"{name}_GBps"]]
        if both:
            entry["ratio"] = entry["pscore_GBps"] / entry["torch_GBps"]
            line.append(entry["ratio"])
        rows.append(line)
        dense.append(entry)
    cols = ["bytes"] + [c for n in systems for c in (f"{n}_us", f"{n}_GB/s")] + (["ratio"] * both)
    print_table(
        f"dense push+pull, {args.servers} servers, {args.workers} workers "
        "(algbw = 2 x bytes / time)",
        cols,
        rows,
    )
    sparse = None
    if args.batch:
        sparse = {"batch": args.batch, "dim": args.dim, "rows": args.rows}
        line = [args.batch]
        for name in systems:
            times = [r["sparse"][name] for r in results]
            sparse[f"{name}_p50_us"] = p50(times) * 1e6
            sparse[f"{name}_rows_per_s"] = sum(args.batch / t for t in times)
            line += [sparse[f"{name}_p50_us"], sparse[f"{name}_rows_per_s"]]
        if both:
            sparse["ratio"] = sparse["pscore_rows_per_s"] / sparse["torch_rows_per_s"]
            line.append(sparse["ratio"])
        cols = ["batch"] + [c for n in systems for c in (f"{n}_us", f"{n}_rows/s")]
        print_table(
            f"sparse push+pull, dim {args.dim}, ids from {args.rows}",
            cols + (["ratio"] * both),
            [line],
            [10] + [12, 16] * len(systems) + [8],
        )
    print_table(
        "loopback TCP (this machine, this tool), GB/s per direction",
        ["mode", "GB/s"],
        [["one-way", loopback[0]], ["full-duplex", loopback[1]]],
    )
    return {"dense": dense, "sparse": sparse}


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench ps",
        description="pscore parameter server vs torch.distributed.rpc",
    )
    p.add_argument("--servers", type=int, default=2, help="shards (default %(default)s)")
    p.add_argument("--workers", type=int, default=1, help="worker processes (default %(default)s)")
    p.add_argument(
        "--compare",
        choices=["torch-rpc", "none"],
        default="torch-rpc",
        help="the peer timed alongside (default %(default)s)",
    )
    p.add_argument(
        "--sizes",
        default=",".join(human_bytes(s) for s in DEFAULT_SIZES),
        help="dense sizes, e.g. 4K,1M,64M (default %(default)s)",
    )
    p.add_argument(
        "--rows", type=int, default=10_000_000, help="sparse id range (default %(default)s)"
    )
    p.add_argument(
        "--batch",
        type=int,
        default=4096,
        help="ids per sparse batch (0: skip; default %(default)s)",
    )
    p.add_argument("--dim", type=int, default=64, help="sparse row width (default %(default)s)")
    p.add_argument(
        "--sparse-iters",
        type=int,
        default=200,
        help="timed sparse batches per worker (default %(default)s)",
    )
    p.add_argument(
        "--no-reserve",
        action="store_true",
        help="pscore's sparse table grows with the rows touched (default: reserved capacity)",
    )
    p.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiplies the iteration counts (default %(default)g)",
    )
    p.add_argument(
        "--loopback-mb",
        type=int,
        default=256,
        help="MiB sent by the loopback TCP measurement (default %(default)s)",
    )
    p.add_argument(
        "--json", default=None, help="also write the results to this JSON file (default none)"
    )
    args = p.parse_args(argv[1:])
    args.sizes = [parse_bytes(s) for s in args.sizes.split(",") if s]
    if args.servers < 1 or args.workers < 1 or any(s < 4 or s % 4 for s in args.sizes):
        p.error("--servers and --workers must be >= 1; sizes must be multiples of 4 bytes")
    args.sparse_iters = max(PHASES * 3, int(args.sparse_iters * args.scale))

    from pscore.bench.loopback import measure

    nbytes = args.loopback_mb << 20
    loopback = (measure(nbytes, False), measure(nbytes, True))
    report = _report(args, run(args), loopback)
    write_json(
        args.json,
        {
            "benchmark": "ps",
            "servers": args.servers,
            "workers": args.workers,
            "compare": args.compare,
            **report,
            "loopback": {"one_way_GBps": loopback[0], "duplex_GBps": loopback[1]},
            "targets": {"dense_64MB_ratio": 1.3, "sparse_ratio": 3.0},
        },
    )
    return 0
