"""What staging costs: all_reduce of a CUDA tensor on pscore's TCP (or shared-memory) path,
copied through pinned host memory on the caller's stream, against all_reduce of the same bytes
from host memory, in the same processes and run (alternating rounds). A CUDA call is timed until
its result is back on the device (torch.cuda.synchronize). All ranks share GPU 0.
`python -m pscore.bench staging --world 2 --json out.json`."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys

from .collectives import _iters_for, _row, _slowest_rank, _time, default_sizes, parse_sizes
from .report import human_bytes, print_table, write_json

__all__ = ["main", "parser", "print_report", "run"]


def _worker(rank, args, port, queue):
    os.environ["PSCORE_TRANSPORT"] = args.transport
    import torch

    import pscore
    from pscore.store import TCPStore

    torch.set_num_threads(1)
    torch.cuda.set_device(0)
    store = TCPStore("127.0.0.1", port, is_master=False, timeout=60)
    pscore.init_process_group(store=store, rank=rank, world_size=args.world, timeout=120)
    rows = []
    for nbytes in args.sizes:
        host = torch.ones(max(1, nbytes // 4))
        cuda = host.cuda()

        def staged(t=cuda):
            pscore.all_reduce(t)
            torch.cuda.synchronize()

        def from_host(t=host):
            pscore.all_reduce(t)

        iters = _iters_for(nbytes, args.iters)
        staged_t, host_t = [], []
        for _ in range(args.rounds):
            _time(staged, 2)
            staged_t += _time(staged, iters)
            _time(from_host, 2)
            host_t += _time(from_host, iters)
        rows.append((nbytes, {"cuda_staged": staged_t, "host": host_t}))
    queue.put((rank, rows, pscore.get_backend()))


def run(args) -> dict:
    from pscore.store import TCPStore

    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=60)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(r, args, master.port, queue)) for r in range(args.world)
    ]
    for p in procs:
        p.start()
    results, backend = {}, None
    for _ in range(args.world):
        rank, rows, backend = queue.get(timeout=3600)
        results[rank] = rows
    for p in procs:
        p.join()
    out = []
    for nbytes, samples in _slowest_rank(results):
        entry = {"bytes": nbytes}
        entry.update({key: _row("allreduce", args.world, nbytes, s) for key, s in samples.items()})
        entry["time_ratio"] = entry["cuda_staged"]["p50_us"] / entry["host"]["p50_us"]
        out.append(entry)
    return {
        "benchmark": "staging",
        "collective": "allreduce",
        "world": args.world,
        "backend": backend,
        "chunk_bytes": args.chunk_bytes,
        "results": out,
    }


def print_report(report: dict) -> None:
    cols = ["bytes", "cuda p50 us", "cuda busbw", "host p50 us", "host busbw", "time / host"]
    rows = [
        [
            human_bytes(r["bytes"]),
            r["cuda_staged"]["p50_us"],
            r["cuda_staged"]["busbw_GBps"],
            r["host"]["p50_us"],
            r["host"]["busbw_GBps"],
            r["time_ratio"],
        ]
        for r in report["results"]
    ]
    title = f"staged allreduce world={report['world']} backend={report['backend']}"
    print_table(title, cols, rows, [10, 13, 12, 13, 12, 13])


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench staging",
        description="all_reduce of a CUDA tensor staged through pinned host memory against the "
        "same bytes from host memory, same processes and run; nccl-tests columns (p50 of the "
        "slowest rank, busbw) and the time ratio.",
    )
    p.add_argument("--world", type=int, default=2, help="ranks, all on GPU 0 (default %(default)s)")
    p.add_argument(
        "--transport",
        choices=["tcp", "shm"],
        default="tcp",
        help="pscore's transport (default %(default)s)",
    )
    p.add_argument(
        "--sizes",
        type=parse_sizes,
        default=",".join(human_bytes(n) for n in default_sizes()),
        help="message sizes in bytes, comma-separated, K/M/G suffixes (default %(default)s)",
    )
    p.add_argument("--iters", type=int, default=100, help="timed calls per round, at most")
    p.add_argument("--rounds", type=int, default=3, help="rounds, each timing both paths")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    return p


def _cuda_missing() -> str | None:
    """Why this machine cannot run the benchmark, or None."""
    try:
        import torch
    except ImportError:
        return "needs torch (pip install torch, a CUDA build)"
    if not torch.cuda.is_available():
        return f"needs a CUDA device: torch {torch.__version__} sees none"
    return None


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv[1:])
    if args.world < 1 or args.iters < 1 or args.rounds < 1:
        print(
            "python -m pscore.bench staging: --world, --iters and --rounds must be >= 1",
            file=sys.stderr,
        )
        return 2
    missing = _cuda_missing()
    if missing:
        print(f"python -m pscore.bench staging: {missing}", file=sys.stderr)
        return 2
    from .. import _config

    args.chunk_bytes = _config.STAGING_CHUNK_BYTES.get()
    report = run(args)
    print_report(report)
    write_json(args.json, report)
    return 0
