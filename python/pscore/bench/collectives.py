"""Collective benchmarks against torch.distributed's gloo (in the same processes) and Open MPI
(an `mpirun` job beside them, mpi_compare.py), alternating rounds in the same run:
`python -m pscore.bench allreduce --world 2 --compare gloo,mpi --json out.json`.
`--api pscore,torch` also times pscore through torch.distributed (torch_api.py).
`--device cuda --compare nccl-torch,gloo-torch` times CUDA tensors: pscore's NCCL backend against
torch's NCCL (world --world when there are that many GPUs, else 1: NCCL refuses two ranks on one
device), and pscore's staged TCP/shm path (backend tcp) against torch gloo on CUDA tensors with
--world ranks sharing the GPUs."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import tempfile
import time

from .._config import parse_bytes
from ..launch.affinity import bind_self
from . import mpi_compare
from .buffers import BUFFER_KINDS, allocator, blocks, operands
from .gather import gather_results
from .report import human_bytes, p50, print_table, write_json
from .torch_api import TORCH_ROW, init_groups, parse_apis, row_key, torch_calls

__all__ = ["default_sizes", "main", "parse_peers", "parse_sizes", "parser", "print_report", "run"]

# nccl-tests' bus bandwidth factors: what each rank's links carry relative to the message.
BUS_FACTOR = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n,
    "broadcast": lambda _n: 1.0,
    "reduce": lambda _n: 1.0,
    "scatter": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "barrier": lambda _n: 0.0,
}


def parse_sizes(text: str) -> list[int]:
    """'4K,1M' -> [4096, 1048576]; each size a positive multiple of 4 bytes (float32 elements)."""
    out = []
    for item in text.split(","):
        try:
            nbytes = parse_bytes(item)
        except ValueError:
            nbytes = 0
        if nbytes == 0 or nbytes % 4:
            raise argparse.ArgumentTypeError(
                f"{item.strip()!r} is not a size: expected a positive multiple of 4 bytes, "
                "K/M/G suffixes allowed (e.g. 4K,1M)"
            )
        out.append(nbytes)
    return out


# --compare names on CUDA tensors -> (pscore's backend, torch's backend)
CUDA_PEERS = {"nccl-torch": ("nccl", "nccl"), "gloo-torch": ("tcp", "gloo")}
CPU_PEERS = ("gloo", "mpi")


def parse_peers(text: str) -> list[str]:
    """'gloo,mpi' -> ['gloo', 'mpi']; 'none' -> []. CPU peers: gloo, mpi; CUDA peers: those of
    CUDA_PEERS (main checks which fit --device)."""
    peers = [p.strip() for p in text.split(",") if p.strip() and p.strip() != "none"]
    unknown = [p for p in peers if p not in CPU_PEERS and p not in CUDA_PEERS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown peer {unknown[0]!r}: expected gloo, mpi, gloo,mpi or none "
            f"(on --device cuda: {','.join(CUDA_PEERS)})"
        )
    return peers


def default_sizes() -> list[int]:
    return [4 << 10 << (2 * i) for i in range(8)]  # 4 KB .. 64 MB, x4 steps


def _ops(name, pscore, world, ones, empty):
    """make(nbytes) -> pscore's own call, its buffers (buffers.py) built once per size."""

    def make(nbytes):  # noqa: PLR0911 - one return per operation
        b = operands(name, nbytes, world, ones, empty)
        if name == "allreduce":
            return lambda: pscore.all_reduce(b.x)
        if name == "broadcast":
            return lambda: pscore.broadcast(b.x, 0)
        if name == "reduce":
            return lambda: pscore.reduce(b.x, 0)
        if name == "allgather":
            return lambda: pscore.all_gather_into_tensor(b.out, b.part)
        if name == "reduce_scatter":
            return lambda: pscore.reduce_scatter_tensor(b.out, b.inp)
        if name == "alltoall":
            return lambda: pscore.all_to_all_single(b.out, b.inp)
        if name in ("scatter", "gather"):
            root_list = blocks(b.whole, world) if pscore.get_rank() == 0 else None
            if name == "scatter":
                return lambda: pscore.scatter(b.part, root_list, 0)
            return lambda: pscore.gather(b.part, root_list, 0)
        if name == "barrier":
            return pscore.barrier
        raise ValueError(name)

    return make


def _no_sync() -> None:
    pass


def _time(fn, iters: int, sync=_no_sync) -> list[float]:
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


def _worker(rank, args, port, dist_file, queue):
    os.environ["PSCORE_TRANSPORT"] = args.transport
    bind_self(rank, args.world)  # as pscore-run and mpirun bind their ranks
    import torch
    import torch.distributed as dist

    import pscore
    from pscore.store import TCPStore

    torch.set_num_threads(1)
    device, sync = "cpu", _no_sync
    if args.device == "cuda":  # ranks share the GPUs when they outnumber them
        device = torch.device("cuda", rank % torch.cuda.device_count())
        torch.cuda.set_device(device)
        sync = torch.cuda.synchronize
    store = TCPStore("127.0.0.1", port, is_master=False, timeout=60)
    pscore.init_process_group(
        args.backend, store=store, rank=rank, world_size=args.world, timeout=120
    )
    peer = args.torch_peer
    groups = dict(
        zip((TORCH_ROW, peer), init_groups(dist, rank, args.world, dist_file, args.api, peer))
    )
    mpi = "mpi" in args.compare and mpi_compare.MpiTurns(
        store, rank, pscore.barrier, args.mpi_timeout
    )
    ones, empty = allocator(args.buffers, device)
    makers = {"pscore": _ops(args.collective, pscore, args.world, ones, empty)}
    makers.update(
        (key, torch_calls(args.collective, dist, g, args.world, ones, empty))
        for key, g in groups.items()
        if g is not None
    )
    wanted = [row_key(api) for api in args.api] + [peer]
    makers = {k: makers[k] for k in wanted if k in makers}
    rows = []
    for i, nbytes in enumerate(args.sizes):
        calls = {key: make(nbytes) for key, make in makers.items()}
        iters = _iters_for(nbytes, args.iters)
        samples = {key: [] for key in calls}
        for r in range(args.rounds):  # alternate so each sees the same machine weather
            for key, call in calls.items():
                _time(call, 2, sync)
                samples[key] += _time(call, iters, sync)
            if mpi:
                mpi.take(i, r, f"{args.collective} {human_bytes(nbytes)}")
        rows.append((nbytes, samples))
    used = pscore.get_backend() + ("+nccl" if args.backend == "nccl" else "")
    queue.put((rank, rows, used))
    pscore.destroy_process_group()
    if dist.is_initialized():
        dist.destroy_process_group()


def _row(name, world, nbytes, samples):
    t = p50(samples)
    algbw = nbytes / t / 1e9 if name != "barrier" else 0.0
    return {"p50_us": t * 1e6, "algbw_GBps": algbw, "busbw_GBps": algbw * BUS_FACTOR[name](world)}


def _slowest_rank(results: dict) -> list:
    """Per size and row, the samples of the rank with the highest p50: a broadcast root returns
    as soon as its bytes are queued, so the receivers' time is the operation's time (as
    nccl-tests)."""
    rows = []
    for i, (nbytes, samples) in enumerate(results[0]):
        rows.append(
            (
                nbytes,
                {key: max((results[r][i][1][key] for r in results), key=p50) for key in samples},
            )
        )
    return rows


def run(args) -> dict:
    from pscore.store import TCPStore

    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=60)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [
            ctx.Process(target=_worker, args=(r, args, master.port, f"{tmp}/dist", queue))
            for r in range(args.world)
        ]
        iters = [_iters_for(n, args.iters) for n in args.sizes]
        peer = "mpi" in args.compare and mpi_compare.MpiPeer(args, master.port, tmp, iters)
        try:
            for p in procs:
                p.start()
            got = gather_results(queue, procs, peer.check if peer else lambda: None, 3600)
            mpi_samples = peer.finish() if peer else []
            for p in procs:
                p.join()
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
            if peer:
                peer.close()
    results = {rank: rows for rank, rows, _ in got}
    backend = next(b for _, _, b in got if b)
    main_key = row_key("pscore" if "pscore" in args.api else "torch")
    out = []
    for nbytes, samples in _slowest_rank(results):
        entry = {"bytes": nbytes}
        entry.update(
            (key, _row(args.collective, args.world, nbytes, s)) for key, s in samples.items()
        )
        if args.torch_peer in entry:
            entry["time_ratio"] = entry[main_key]["p50_us"] / entry[args.torch_peer]["p50_us"]
        if len(args.api) > 1:
            entry["torch_api_ratio"] = entry[TORCH_ROW]["p50_us"] / entry["pscore"]["p50_us"]
        out.append(entry)
    for entry, samples in zip(out, mpi_samples):
        entry["mpi"] = _row(args.collective, args.world, entry["bytes"], samples)
        entry.update(mpi_compare.ratios(entry, main_key))
    report = {
        "collective": args.collective,
        "world": args.world,
        "device": args.device,
        "buffers": args.buffers,
        "backend": backend,
        "peer": args.torch_peer,
        "api": list(args.api),
        "results": out,
    }
    if peer:
        report["mpi"] = peer.describe()
    return report


def print_report(report: dict) -> None:
    """One line per size: pscore's own call (the torch API's when it ran alone), the torch API's
    p50 and its ratio to pscore's own call when both ran, and the torch peer's columns (gloo, or
    nccl on CUDA) when compared."""
    apis = report.get("api", ["pscore"])
    main_key = row_key("pscore" if "pscore" in apis else "torch")
    both = len(apis) > 1
    peer = report.get("peer")
    compare = bool(peer) and any(peer in r for r in report["results"])
    cols = ["bytes", "p50 us", "algbw GB/s", "busbw GB/s"]
    widths = [10, 12, 12, 12]
    if both:
        cols += ["torch p50 us", "torch / pscore"]
        widths += [14, 16]
    if compare:
        cols += [f"{peer} p50 us", f"{peer} busbw", f"busbw x {peer}", f"time / {peer}"]
        widths += [13, 12, 14, 13]
    rows = []
    for r in report["results"]:
        ours = r[main_key]
        row = [human_bytes(r["bytes"]), ours["p50_us"], ours["algbw_GBps"], ours["busbw_GBps"]]
        if both:
            row += [r[TORCH_ROW]["p50_us"], r["torch_api_ratio"]]
        if compare:
            g = r[peer]
            speed = ours["busbw_GBps"] / g["busbw_GBps"] if g["busbw_GBps"] else 0.0
            row += [g["p50_us"], g["busbw_GBps"], speed, r["time_ratio"]]
        rows.append(row)
    title = (
        f"{report['collective']} world={report['world']} backend={report['backend']} "
        f"api={','.join(apis)}" + ("" if report.get("device", "cpu") == "cpu" else " device=cuda")
    )
    print_table(title, cols, rows, widths)
    if "mpi" in report:
        mpi_compare.print_mpi_table(report, main_key)


def parser(name: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench " + name,
        description=f"{name}: pscore against torch.distributed gloo in the same processes and "
        "Open MPI (mpirun + mpi4py) beside them, alternating rounds in one run; nccl-tests "
        "columns (p50 of the slowest rank, algbw, busbw) and the ratios.",
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
        type=parse_peers,
        default=None,
        help="the peers timed alongside: gloo, mpi (Open MPI's mpirun with mpi4py; btl "
        "vader, or tcp when the transport is tcp), gloo,mpi or none (default gloo); on "
        f"--device cuda a comma-separated subset of {','.join(CUDA_PEERS)} (default all)",
    )
    mpi_compare.add_arguments(p)
    p.add_argument(
        "--api",
        type=parse_apis,
        default="pscore",
        help="how pscore is called: pscore (its own functions), torch (torch.distributed on "
        'init_process_group("pscore")) or pscore,torch (both rows, alternating, and their '
        "ratio; default %(default)s)",
    )
    p.add_argument(
        "--buffers",
        choices=BUFFER_KINDS,
        default="torch",
        help="whose allocator makes every library's buffers (CPU): torch's, or numpy's, which "
        "gives large ones transparent huge pages (default %(default)s)",
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
    peers = list(CUDA_PEERS) if args.compare is None else args.compare
    unknown = [p for p in peers if p not in CUDA_PEERS]
    if unknown or not peers:
        return _fail(args, f"--compare on CUDA takes some of {','.join(CUDA_PEERS)}, got {peers}")
    reports = []
    world = args.world
    for name in peers:
        args.backend, args.torch_peer = CUDA_PEERS[name]
        args.compare, args.world = [], world
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
        if args.buffers != "torch":
            return _fail(args, "--buffers numpy takes CPU buffers; --device cuda uses torch's")
        return _run_cuda(args)
    args.compare = ["gloo"] if args.compare is None else args.compare
    cuda_only = [p for p in args.compare if p not in CPU_PEERS]
    if cuda_only:
        return _fail(args, f"--compare on CPU takes gloo, mpi or none, got {cuda_only[0]}")
    missing = "mpi" in args.compare and mpi_compare.missing_dependencies()
    if missing:
        return _fail(args, missing)
    args.backend = "tcp"
    args.torch_peer = "gloo" if "gloo" in args.compare else None
    report = run(args)
    print_report(report)
    write_json(args.json, report)
    return 0
