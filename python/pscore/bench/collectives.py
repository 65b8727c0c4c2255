"""Collective benchmarks against torch.distributed, measured in the same processes and the same
run: `python -m pscore.bench allreduce --world 2 --compare gloo --json out.json` on CPU tensors;
`python -m pscore.bench allreduce --device cuda --compare nccl-torch,gloo-torch` on CUDA tensors:
pscore's NCCL backend against torch's NCCL (world --world when there are that many GPUs, else
1: NCCL refuses two ranks on one device), and pscore's staged TCP/shm path (backend tcp)
against torch gloo on CUDA tensors with --world ranks sharing the GPUs."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time

from .report import human_bytes, p50, print_table, write_json

__all__ = ["default_sizes", "main", "parse_sizes", "parser", "print_report", "run"]

# nccl-tests' bus bandwidth factors: what each rank's links carry relative to the message.
BUS_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda _n: 1.0,
    "reduce": lambda _n: 1.0,
    "barrier": lambda _n: 0.0,
}


def parse_sizes(text: str) -> list[int]:
    """'4K,1M' -> [4096, 1048576]; each size a positive multiple of 4 bytes (float32 elements)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    out = []
    for item in text.split(","):
        part = item.strip().upper().rstrip("B")
        scale = units.get(part[-1:], 1)
        digits = part[:-1] if scale > 1 else part
        if not digits.isdigit() or int(digits) * scale % 4 or int(digits) == 0:
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r} is not a size: expected a positive multiple of 4 bytes, "
                "K/M/G suffixes allowed (e.g. 4K,1M)"
            )
        out.append(int(digits) * scale)
    return out


def default_sizes() -> list[int]:
    return [4 << 10 << (2 * i) for i in range(8)]  # 4 KB .. 64 MB, x4 steps


def _ops(name, torch, dist, pscore, world, device):
    """(pscore call, peer call) building their buffers on `device` once per size."""

    def make(nbytes):  # noqa: PLR0911 - one return per operation
        n = max(1, nbytes // 4)
        x = torch.ones(n, dtype=torch.float32, device=device)
        if name == "allreduce":
            return (lambda: pscore.all_reduce(x)), (lambda: dist.all_reduce(x))
        if name == "broadcast":
            return (lambda: pscore.broadcast(x, 0)), (lambda: dist.broadcast(x, 0))
        if name == "reduce":
            return (lambda: pscore.reduce(x, 0)), (lambda: dist.reduce(x, 0))
        if name == "allgather":
            part = torch.ones(max(1, n // world), device=device)
            out = torch.empty(part.numel() * world, device=device)
            return (lambda: pscore.all_gather_into_tensor(out, part)), (
                lambda: dist.all_gather_into_tensor(out, part)
            )
        if name == "reduce_scatter":
            out = torch.empty(max(1, n // world), device=device)
            inp = torch.ones(out.numel() * world, device=device)
            return (lambda: pscore.reduce_scatter_tensor(out, inp)), (
                lambda: dist.reduce_scatter_tensor(out, inp)
            )
        if name == "alltoall":
            m = max(world, n - n % world)
            inp, out = torch.ones(m, device=device), torch.empty(m, device=device)
            return (lambda: pscore.all_to_all_single(out, inp)), (
                lambda: dist.all_to_all_single(out, inp)
            )
        if name == "barrier":
            return pscore.barrier, dist.barrier
        raise ValueError(name)

    return make


def _time(fn, iters: int, sync) -> list[float]:
    """Seconds per call, each until sync() returns (CUDA calls return once enqueued)."""
    samples = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return samples


def _iters_for(nbytes: int, budget: int) -> int:
    return max(5, min(budget, (256 << 20) // max(nbytes, 1)))


def _worker(rank, args, port, gloo_file, queue):
    os.environ["PSCORE_TRANSPORT"] = args.transport
    import torch
    import torch.distributed as dist

    import pscore
    from pscore.store import TCPStore

    torch.set_num_threads(1)
    device, sync = "cpu", lambda: None
    if args.device == "cuda":  # ranks share the GPUs when they outnumber them
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        sync = torch.cuda.synchronize
    store = TCPStore("127.0.0.1", port, is_master=False, timeout=60)
    pscore.init_process_group(
        args.backend, store=store, rank=rank, world_size=args.world, timeout=120
    )
    if args.peer:
        dist.init_process_group(
            args.peer, init_method=f"file://{gloo_file}", rank=rank, world_size=args.world
        )
    make = _ops(args.collective, torch, dist, pscore, args.world, device)
    rows = []
    for nbytes in args.sizes:
        ours, theirs = make(nbytes)
        iters = _iters_for(nbytes, args.iters)
        ours_t, theirs_t = [], []
        for _ in range(args.rounds):  # alternate so both see the same machine weather
            _time(ours, 2, sync)
            ours_t += _time(ours, iters, sync)
            if args.peer:
                _time(theirs, 2, sync)
                theirs_t += _time(theirs, iters, sync)
        rows.append((nbytes, ours_t, theirs_t))
    used = pscore.get_backend() + ("+nccl" if args.backend == "nccl" else "")
    queue.put((rank, rows, used))
    pscore.destroy_process_group()
    if args.peer:
        dist.destroy_process_group()


def _row(name, world, nbytes, samples):
    t = p50(samples)
    algbw = nbytes / t / 1e9 if name != "barrier" else 0.0
    return {"p50_us": t * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * BUS_FACTOR[name](world)}


def _slowest_rank(results: dict) -> list:
    """Per size, the samples of the rank with the highest p50: a broadcast root returns as soon
    as its bytes are queued, so the receivers' time is the operation's time (as nccl-tests)."""
    rows = []
    for i, (nbytes, _, _) in enumerate(results[0]):
        ours = max((results[r][i][1] for r in results), key=p50)
        theirs_all = [results[r][i][2] for r in results if results[r][i][2]]
        theirs = max(theirs_all, key=p50) if theirs_all else []
        rows.append((nbytes, ours, theirs))
    return rows


def run(args) -> dict:
    from pscore.store import TCPStore

    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=60)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(target=_worker, args=(r, args, master.port, f"{tmp}/gloo", queue))
            for r in range(args.world)
        ]
        for p in procs:
            p.start()
        results = {}
        backend = None
        for _ in range(args.world):
            rank, rows, backend_r = queue.get(timeout=3600)
            results[rank] = rows
            backend = backend or backend_r
        for p in procs:
            p.join()
    out = []
    for nbytes, ours_t, theirs_t in _slowest_rank(results):
        entry = {"bytes": nbytes, "pscore": _row(args.collective, args.world, nbytes, ours_t)}
        if theirs_t:
            entry[args.peer] = _row(args.collective, args.world, nbytes, theirs_t)
            entry["time_ratio"] = entry["pscore"]["p50_us"] / entry[args.peer]["p50_us"]
        out.append(entry)
    return {
        "collective": args.collective,
        "world": args.world,
        "device": args.device,
        "backend": backend,
        "peer": args.peer,
        "results": out,
    }


def print_report(report: dict) -> None:
    peer = report.get("peer")
    compare = bool(peer) and any(peer in r for r in report["results"])
    cols = ["bytes", "p50 us", "algbw GB/s", "busbw GB/s"]
    if compare:
        cols += [f"{peer} p50 us", f"{peer} busbw", f"busbw x {peer}", f"time / {peer}"]
    rows = []
    for r in report["results"]:
        ours = r["pscore"]
        row = [human_bytes(r["bytes"]), ours["p50_us"], ours["algbw_GBps"], ours["busbw_GBps"]]
        if compare:
            g = r[peer]
            speed = ours["busbw_GBps"] / g["busbw_GBps"] if g["busbw_GBps"] else 0.0
            row += [g["p50_us"], g["busbw_GBps"], speed, r["time_ratio"]]
        rows.append(row)
    title = (
        f"{report['collective']} world={report['world']} device={report.get('device', 'cpu')} "
        f"backend={report['backend']} vs torch {peer or 'none'}"
    )
    print_table(title, cols, rows, [10, 12, 12, 12, 13, 12, 14, 13][: len(cols)])


def parser(name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench " + name,
        description=f"{name}: pscore against torch.distributed gloo in the same processes and "
        "run, alternating rounds; nccl-tests columns (p50 of the slowest rank, algbw, busbw) "
        "and the ratios.",
    )
    p.add_argument(
        "--world", type=int, default=2, help="ranks (local processes; default %(default)s)"
    )
    p.add_argument(
        "--transport",
        choices=["auto", "tcp", "shm"],
        default="auto",
        help="pscore's transport (PSCORE_TRANSPORT; default %(default)s: shared memory on "
        "one host)",
    )
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="where the tensors live (default %(default)s; cuda needs a GPU and torch with CUDA)",
    )
    p.add_argument(
        "--compare",
        default=None,
        help="the peers timed alongside: gloo or none on CPU (default gloo); on CUDA a "
        f"comma-separated subset of {','.join(CUDA_PEERS)} (default all), or none",
    )
    p.add_argument(
        "--sizes",
        type=parse_sizes,
        default=",".join(human_bytes(n) for n in default_sizes()),
        help="message sizes in bytes, comma-separated, K/M/G suffixes (default %(default)s)",
    )
    p.add_argument(
        "--iters",
        type=int,
        default=200,
        help="timed calls per round and size, at most (fewer for large sizes: about 256 MB "
        "moved per round, at least 5 calls; default %(default)s)",
    )
    p.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="rounds, each timing pscore then the peer (default %(default)s)",
    )
    p.add_argument(
        "--json", default=None, help="also write the results to this JSON file (default none)"
    )
    return p


# --compare names on CUDA tensors -> (pscore's backend, torch's backend)
CUDA_PEERS = {"nccl-torch": ("nccl", "nccl"), "gloo-torch": ("tcp", "gloo")}


def _fail(args, message: str) -> int:
    print(f"python -m pscore.bench {args.collective}: {message}", file=sys.stderr)
    return 2


def _run_cuda(args) -> int:
    """One report per --compare peer on CUDA tensors; JSON {"device": "cuda", "reports": [...]}."""
    try:
        import torch
    except ImportError:
        torch = None
    if torch is None or not torch.cuda.is_available():
        return _fail(
            args,
            "--device cuda needs a CUDA GPU and torch built with CUDA; this machine has none "
            "(torch.cuda.is_available() is False or torch is missing)",
        )
    peers = [] if args.compare == "none" else (args.compare or ",".join(CUDA_PEERS)).split(",")
    unknown = [p for p in peers if p not in CUDA_PEERS]
    if unknown or not peers:
        return _fail(args, f"--compare on CUDA takes some of {','.join(CUDA_PEERS)}, got {peers}")
    reports = []
    world = args.world
    for name in peers:
        args.backend, args.peer = CUDA_PEERS[name]
        args.world = world
        if args.backend == "nccl" and torch.cuda.device_count() < world:
            print(f"# {name}: {torch.cuda.device_count()} GPU(s) for {world} ranks: world 1")
            args.world = 1  # NCCL refuses two ranks on one device
        report = run(args)
        print_report(report)
        reports.append(report)
    write_json(args.json, {"collective": args.collective, "device": "cuda", "reports": reports})
    return 0


def main(argv: list[str]) -> int:
    args = parser(argv[0]).parse_args(argv[1:])
    args.collective = argv[0]
    if args.world < 1 or args.iters < 1 or args.rounds < 1:
        return _fail(
            args,
            f"--world, --iters and --rounds must be >= 1, got {args.world}, {args.iters}, "
            f"{args.rounds}",
        )
    if args.device == "cuda":
        return _run_cuda(args)
    if (args.compare or "gloo") not in ("gloo", "none"):
        return _fail(args, f"--compare on CPU takes gloo or none, got {args.compare}")
    args.backend, args.peer = "tcp", None if args.compare == "none" else "gloo"
    report = run(args)
    print_report(report)
    write_json(args.json, report)
    return 0
