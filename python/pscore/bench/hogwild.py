"""Hogwild sparse and dense update throughput: pscore SharedTable kernels (lock-free and locked)
against torch.multiprocessing workers on share_memory_() tensors (the mnist_hogwild pattern),
with 1..N processes updating one table at once.

    python -m pscore.bench hogwild --procs 1,2 --compare torch-mp --json out.json

Sparse: batches of --batch random ids (of --rows rows, --dim wide); torch SGD is
emb.index_add_(0, ids, -lr * g) and torch Adagrad the index_add_ / index_select / sqrt sequence.
Dense: one --dense-element vector, torch's add_ (SGD) and addcmul_/addcdiv_ (Adagrad). Each
worker runs --seconds after a barrier; rows/s is the sum over workers. Timings are medians of
--repeat runs, with process counts and tasks interleaved in each. The ratio columns compare
with torch at the same process count and with 1 process of the same implementation; the latter
is the median of the ratios of runs made back to back. Each worker is pinned to its own core.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import platform
import statistics
import sys
import time

import numpy as np

__all__ = ["EPS", "LR", "main"]

LR = 0.01
EPS = 1e-10
SPARSE_OPS = ("sgd", "adagrad")
DENSE_OPS = ("dense-sgd", "dense-adagrad")


def _parse(argv):
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench hogwild",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--procs", default="1,2", help="comma-separated process counts")
    p.add_argument("--compare", default="torch-mp", choices=["torch-mp", "none"])
    p.add_argument("--ops", default=",".join(SPARSE_OPS + DENSE_OPS))
    p.add_argument("--no-locked", action="store_true", help="skip the locked variant")
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--dense", type=int, default=1_000_000, help="elements of the dense vector")
    p.add_argument("--seconds", type=float, default=0.5, help="timed run per measurement")
    p.add_argument(
        "--pool",
        type=int,
        default=1024,
        help="pre-generated batches each worker cycles through (1024 x 256 ids touch ~64 MB of "
        "rows, more than the caches hold, as random ids of a big table do)",
    )
    p.add_argument(
        "--grad-pool",
        type=int,
        default=4,
        help="distinct gradient batches a worker cycles through (4 x 64 KB stay in L2, as a "
        "gradient fresh from backward does; a large pool streams gradients from memory too)",
    )
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads/worker")
    p.add_argument(
        "--isa", default=None, help="pscore kernel set (avx2, baseline); default: the best one"
    )
    p.add_argument("--json", default=None, help="write the results here")
    a = p.parse_args(argv)
    a.procs = [int(x) for x in a.procs.split(",") if x]
    a.ops = [x for x in a.ops.split(",") if x]
    bad = [o for o in a.ops if o not in SPARSE_OPS + DENSE_OPS]
    if bad or not a.procs or min(a.procs) < 1:
        p.error(f"bad --ops {bad} or --procs {a.procs}")
    return a


# ---- the workloads, one per (implementation, op) -------------------------------------------
_cache: dict = {}


def _batches(args, rank, kind):
    """This worker's pool of (ids, grads) batches, made once; torch gets views of the arrays.
    Every batch has its own random ids; the gradients cycle through a few arrays."""
    if "numpy" not in _cache:
        rng = np.random.default_rng(1000 + rank)
        grads = [
            rng.standard_normal((args.batch, args.dim), dtype=np.float32)
            for _ in range(min(args.grad_pool, args.pool))
        ]
        _cache["numpy"] = [
            (rng.integers(0, args.rows, args.batch, dtype=np.int64), grads[k % len(grads)])
            for k in range(args.pool)
        ]
    if kind == "torch" and "torch" not in _cache:
        import torch

        _cache["torch"] = [(torch.from_numpy(i), torch.from_numpy(g)) for i, g in _cache["numpy"]]
    return _cache[kind]


def _step_fn(impl, op, tables, args, rank):  # noqa: PLR0911 - one return per implementation and operation
    """Returns (step(k), rows_per_step) for one worker."""
    if op in DENSE_OPS:
        g = np.random.default_rng(rank).standard_normal(args.dense, dtype=np.float32)
        if impl == "torch-mp":
            import torch

            v, s, gt = tables["t_vec"], tables["t_vec_sum"], torch.from_numpy(g)
            if op == "dense-sgd":
                return (lambda _k: v.add_(gt, alpha=-LR)), 1
            return (
                lambda _k: (s.addcmul_(gt, gt), v.addcdiv_(gt, s.sqrt().add_(EPS), value=-LR))
            ), 1
        t, locked = tables["p_vec"], impl == "pscore-locked"
        if op == "dense-sgd":
            return (lambda _k: t.sgd(None, g, LR, locked=locked)), 1
        return (lambda _k: t.adagrad(None, g, LR, EPS, locked=locked)), 1
    pool = _batches(args, rank, "torch" if impl == "torch-mp" else "numpy")
    n_pool = len(pool)
    if impl == "torch-mp":
        emb, st = tables["t_emb"], tables["t_emb_sum"]

        def sgd(k):
            ids, g = pool[k % n_pool]
            emb.index_add_(0, ids, -LR * g)

        def adagrad(k):
            ids, g = pool[k % n_pool]
            st.index_add_(0, ids, g * g)
            std = st.index_select(0, ids).sqrt_().add_(EPS)
            emb.index_add_(0, ids, g / std, alpha=-LR)

        return (sgd if op == "sgd" else adagrad), args.batch
    t, locked = tables["p_emb"], impl == "pscore-locked"
    if op == "sgd":
        return (lambda k: t.sgd(*pool[k % n_pool], LR, locked=locked)), args.batch
    return (lambda k: t.adagrad(*pool[k % n_pool], LR, EPS, locked=locked)), args.batch


def _worker(rank, tables, args, barriers, conn):
    import torch

    from pscore import hogwild

    torch.set_num_threads(args.torch_threads)
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[rank % len(cpus)]})  # one core per worker, as for every impl
    if args.isa:
        hogwild.set_kernel_isa(args.isa)
    for key, x in tables.items():  # fault torch's shared pages in (pscore maps with MAP_POPULATE)
        if key.startswith("t_"):
            x.view(-1)[::1024].add_(0)
    while True:
        task = conn.recv()
        if task is None:
            break
        impl, op, n = task
        step, rows = _step_fn(impl, op, tables, args, rank)
        for k in range(20):  # warm up: page tables, caches, lazy inits
            step(k)
        lat = []
        gc.disable()  # as timeit does: no collection pauses inside the timed loop
        barriers[n].wait()
        start = time.perf_counter()
        stop, k = start + args.seconds, 0
        while True:
            t0 = time.perf_counter()
            step(k)
            t1 = time.perf_counter()
            lat.append(t1 - t0)
            k += 1
            if t1 >= stop:
                break
        gc.enable()
        conn.send((k * rows, t1 - start, statistics.median(lat)))
    from pscore.hogwild import close_all

    close_all()


# ---- driver ----------------------------------------------------------------------------------
def _make_tables(args, impls):
    import torch

    from pscore.hogwild import SharedTable

    rng = np.random.default_rng(0)
    emb0 = rng.standard_normal((args.rows, args.dim), dtype=np.float32) * 0.01
    vec0 = rng.standard_normal(args.dense, dtype=np.float32) * 0.01
    tables = {
        "p_emb": SharedTable.create(None, emb0.shape, optimizer="adagrad", init=emb0),
        "p_vec": SharedTable.create(None, vec0.shape, optimizer="adagrad", init=vec0),
    }
    if "torch-mp" in impls:
        tables["t_emb"] = torch.from_numpy(emb0.copy()).share_memory_()
        tables["t_emb_sum"] = torch.zeros(args.rows, args.dim).share_memory_()
        tables["t_vec"] = torch.from_numpy(vec0.copy()).share_memory_()
        tables["t_vec_sum"] = torch.zeros(args.dense).share_memory_()
    return tables


def _measure(tables, args, tasks):
    """Runs every (process count, task) pair --repeat times, interleaved, so that load from
    elsewhere hits 1 and N processes alike; returns {process count: {task: figures}}."""
    import torch.multiprocessing as tmp  # noqa: F401 - registers tensor sharing for spawn

    ctx = mp.get_context("spawn")
    barriers = {n: ctx.Barrier(n) for n in args.procs}
    conns, procs = [], []
    for r in range(max(args.procs)):
        a, b = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(r, tables, args, barriers, b), daemon=True)
        p.start()
        conns.append(a)
        procs.append(p)
    runs: dict = {(n, task): [] for n in args.procs for task in tasks}
    try:
        for _ in range(args.repeat):
            for task in tasks:
                for n in args.procs:
                    for c in conns[:n]:
                        c.send((*task, n))
                    res = [c.recv() for c in conns[:n]]
                    rows = sum(r[0] for r in res)
                    secs = max(r[1] for r in res)
                    runs[(n, task)].append((rows / secs, statistics.median(r[2] for r in res)))
    finally:
        for c in conns:
            c.send(None)
        for p in procs:
            p.join(30)
    out: dict = {n: {} for n in args.procs}
    for (n, task), rs in runs.items():
        rates = [r[0] for r in rs]  # in run order: rates[i] of every pair ran side by side
        out[n][task] = {
            "rows_per_s": statistics.median(rates),
            "p50_us": statistics.median(r[1] for r in rs) * 1e6,
            "runs_rows_per_s": rates,
        }
    return out


def _paired_ratio(m, base):
    """Median over repeats of rate / base rate, each pair measured back to back: slow drifts in
    the machine's load cancel, where a ratio of medians would mix different moments."""
    return statistics.median(a / b for a, b in zip(m["runs_rows_per_s"], base["runs_rows_per_s"]))


def _print(results, args):
    print(
        f"# hogwild: rows={args.rows} dim={args.dim} batch={args.batch} dense={args.dense} "
        f"float32, {args.seconds}s x {args.repeat} runs, cpus={os.cpu_count()}, "
        f"pscore kernels={args.isa}, torch threads/worker={args.torch_threads}"
    )
    hdr = (
        f"{'op':>14} {'impl':>14} {'procs':>5} {'bytes/call':>11} {'p50(us)':>9} "
        f"{'Mrows/s':>9} {'GB/s':>7} {'vs torch':>9} {'vs 1proc':>9}"
    )
    print(hdr)
    for r in results:
        vt = f"{r['vs_torch']:.2f}x" if r.get("vs_torch") else "-"
        v1 = f"{r['vs_1proc']:.2f}x" if r.get("vs_1proc") else "-"
        print(
            f"{r['op']:>14} {r['impl']:>14} {r['procs']:>5} {r['bytes_per_call']:>11} "
            f"{r['p50_us']:>9.1f} {r['rows_per_s'] / 1e6:>9.2f} {r['gb_per_s']:>7.2f} "
            f"{vt:>9} {v1:>9}"
        )


def main(argv: list[str]) -> int:
    if argv and argv[0] == "hogwild":  # python -m pscore.bench passes the benchmark's name first
        argv = argv[1:]
    args = _parse(argv)
    from pscore import hogwild

    args.isa = args.isa or hogwild.kernel_isa()
    impls = ["pscore"] + ([] if args.no_locked else ["pscore-locked"])
    if args.compare == "torch-mp":
        impls.append("torch-mp")
    tasks = [(impl, op) for op in args.ops for impl in impls]
    load_before = os.getloadavg()[0]
    tables = _make_tables(args, impls)
    try:
        by_n = _measure(tables, args, tasks)
    finally:
        for k in ("p_emb", "p_vec"):
            tables[k].close()
    results = []
    for op in args.ops:
        for n in args.procs:
            for impl in impls:
                m = by_n[n][(impl, op)]
                dense = op in DENSE_OPS
                elems = args.dense if dense else args.batch * args.dim
                touched = 3 if op.endswith("sgd") else 5  # arrays read or written per element
                r = {
                    "op": op,
                    "impl": impl,
                    "procs": n,
                    "bytes_per_call": elems * 4,
                    "rows_per_s": m["rows_per_s"] * (args.dense if dense else 1),
                    "p50_us": m["p50_us"],
                    "runs": m["runs_rows_per_s"],
                }
                per_row = args.dim if not dense else 1
                r["gb_per_s"] = r["rows_per_s"] * per_row * 4 * touched / 1e9
                if impl != "torch-mp" and "torch-mp" in impls:
                    r["vs_torch"] = m["rows_per_s"] / by_n[n][("torch-mp", op)]["rows_per_s"]
                if n != 1 and 1 in by_n:
                    r["vs_1proc"] = _paired_ratio(m, by_n[1][(impl, op)])
                results.append(r)
    load_after = os.getloadavg()[0]
    _print(results, args)
    print(
        f"# 1-minute load average {load_before:.1f} before, {load_after:.1f} after, on "
        f"{os.cpu_count()} cpus: scaling with processes needs idle cores"
    )
    if args.json:
        meta = {
            "load_average_before": load_before,
            "load_average_after": load_after,
            "kernel_isa": args.isa,
            "args": vars(args),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        }
        with open(args.json, "w") as f:
            json.dump({"benchmark": "hogwild", "meta": meta, "results": results}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
