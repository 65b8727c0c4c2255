"""GPU sparse Hogwild updates: pscore's CUDA kernels against the torch CUDA ops a user writes for
the same update, with the memory bandwidth each reaches as a fraction of the card's.

    python -m pscore.bench hogwild-cuda --batch 256,4096,65536 --json out.json

Each call updates --batch random rows (--dim floats wide, ids drawn with repeats from --rows)
of a float32 table in GPU memory. torch's SGD is w.index_add_(0, ids, g, alpha=-lr); its Adagrad
the index_add_ / index_select / sqrt / index_add_ sequence; its Adam index_select, lerp and
index_copy_ of both moments, then index_add_. Calls cycle through --pool id batches and are timed
with CUDA events over --iters calls (pscore's calls include their id check and one stream
synchronisation). GB/s counts the bytes an update must move: the gradient, and each touched row
of the table and its state read and written once, plus the ids. The card's bandwidth is measured
in the same run by a 1 GiB device-to-device copy (read + write); its peak comes from the memory
clock and bus width. DESIGN's target: pscore >= 0.7 x the card.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from .report import print_table, write_json

__all__ = [
    "OPS",
    "bytes_per_call",
    "copy_bandwidth",
    "main",
    "make_state",
    "pscore_step",
    "torch_step",
]

OPS = ("sgd", "adagrad", "adam")
LR, EPS, BETAS = 0.01, 1e-8, (0.9, 0.999)
ARRAYS_TOUCHED = {"sgd": 1, "adagrad": 2, "adam": 3}  # table + optimizer state arrays


def _parse(argv):
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench hogwild-cuda",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--batch", default="256,4096,65536,262144", help="comma-separated ids/call")
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--pool", type=int, default=8, help="distinct id batches cycled through")
    p.add_argument("--iters", type=int, default=200, help="timed calls per measurement")
    p.add_argument("--repeat", type=int, default=5, help="measurements; the median is shown")
    p.add_argument("--compare", default="torch", choices=["torch", "none"])
    p.add_argument("--device", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results here")
    a = p.parse_args(argv)
    a.batch = [int(x) for x in a.batch.split(",") if x]
    a.ops = [x for x in a.ops.split(",") if x]
    if [o for o in a.ops if o not in OPS] or not a.batch or min(a.batch) < 1 or a.rows < 1:
        p.error(f"bad --ops {a.ops}, --batch {a.batch} or --rows {a.rows}")
    return a


def bytes_per_call(op: str, batch: int, dim: int, id_bytes: int = 8) -> int:
    """Bytes an update must move: gradients read once, each touched array read and written."""
    return batch * dim * 4 * (1 + 2 * ARRAYS_TOUCHED[op]) + batch * id_bytes


def make_state(op: str, rows: int, dim: int, device):
    import torch

    w = torch.randn(rows, dim, device=device)
    return [w] + [torch.zeros_like(w) for _ in range(ARRAYS_TOUCHED[op] - 1)]


def torch_step(op: str, state: list, ids, g, step: int) -> None:
    """The update with torch ops, as a torch user writes it for sparse rows (any device)."""
    w = state[0]
    if op == "sgd":
        w.index_add_(0, ids, g, alpha=-LR)
    elif op == "adagrad":
        acc = state[1]
        acc.index_add_(0, ids, g * g)
        std = acc.index_select(0, ids).sqrt_().add_(EPS)
        w.index_add_(0, ids, g / std, alpha=-LR)
    else:
        m, v = state[1], state[2]
        m_rows = m.index_select(0, ids).lerp_(g, 1 - BETAS[0])
        v_rows = v.index_select(0, ids).mul_(BETAS[1]).addcmul_(g, g, value=1 - BETAS[1])
        m.index_copy_(0, ids, m_rows)
        v.index_copy_(0, ids, v_rows)
        step_size = LR / (1 - BETAS[0] ** step)
        denom = v_rows.sqrt_().div_((1 - BETAS[1] ** step) ** 0.5).add_(EPS)
        w.index_add_(0, ids, m_rows / denom, alpha=-step_size)


def pscore_step(op: str, state: list, ids, g, step: int) -> None:
    from pscore.hogwild import cuda

    if op == "sgd":
        cuda.sgd(state[0], ids, g, lr=LR)
    elif op == "adagrad":
        cuda.adagrad(state[0], state[1], ids, g, lr=LR, eps=EPS)
    else:
        cuda.adam(state[0], state[1], state[2], ids, g, lr=LR, betas=BETAS, eps=EPS, step=step)


def _time_calls(fn, iters: int) -> float:
    """Seconds per call, by CUDA events around `iters` calls."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for k in range(iters):
        fn(k)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / iters


def copy_bandwidth(device, nbytes: int = 1 << 30, repeat: int = 5) -> float:
    """Bytes/s of a device-to-device copy, counting the read and the write."""
    import torch

    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1)
    dst = torch.empty_like(src)
    dst.copy_(src)
    t = statistics.median(_time_calls(lambda _: dst.copy_(src), 10) for _ in range(repeat))
    return 2 * nbytes / t


def _measure(impl: str, op: str, batch: int, args, device) -> float:
    import torch

    gen = torch.Generator(device=device).manual_seed(batch)
    ids = [
        torch.randint(args.rows, (batch,), device=device, generator=gen) for _ in range(args.pool)
    ]
    grads = [torch.randn(batch, args.dim, device=device, generator=gen) for _ in range(2)]
    state = make_state(op, args.rows, args.dim, device)
    step_fn = pscore_step if impl == "pscore" else torch_step

    def call(k):
        step_fn(op, state, ids[k % args.pool], grads[k % 2], k + 1)

    _time_calls(call, 10)  # warm up: allocator, caches, clocks
    return statistics.median(_time_calls(call, args.iters) for _ in range(args.repeat))


def main(argv: list[str]) -> int:
    if argv and argv[0] == "hogwild-cuda":
        argv = argv[1:]
    args = _parse(argv)
    from pscore.hogwild import cuda

    try:
        import torch
    except ImportError:
        print("hogwild-cuda: needs torch with CUDA", file=sys.stderr)
        return 2
    if not (cuda.is_available() and torch.cuda.is_available()):
        print(
            "hogwild-cuda: needs a CUDA device and a pscore built with CUDA "
            f"(pscore kernels built: {cuda.is_built()}, torch sees a GPU: "
            f"{torch.cuda.is_available()})",
            file=sys.stderr,
        )
        return 2
    device = torch.device("cuda", args.device)
    torch.cuda.set_device(device)
    copy_bw = copy_bandwidth(device)
    peak_bw = cuda.peak_memory_bandwidth(device)
    impls = ["pscore"] + (["torch"] if args.compare == "torch" else [])
    results = []
    for op in args.ops:
        for batch in args.batch:
            moved = bytes_per_call(op, batch, args.dim)
            times = {impl: _measure(impl, op, batch, args, device) for impl in impls}
            torch.cuda.empty_cache()  # the tables of this row go before the next row's
            for impl, t in times.items():
                r = {"op": op, "impl": impl, "batch": batch, "bytes_per_call": moved}
                r.update(us_per_call=t * 1e6, gb_per_s=moved / t / 1e9, of_copy=moved / t / copy_bw)
                r["of_peak"] = moved / t / peak_bw if peak_bw else None
                if impl != "torch" and "torch" in times:
                    r["speedup_vs_torch"] = times["torch"] / t
                results.append(r)
    name = torch.cuda.get_device_name(device)
    print(
        f"# hogwild-cuda on {name}: rows={args.rows} dim={args.dim} float32, {args.iters} calls "
        f"x {args.repeat}; copy {copy_bw / 1e9:.0f} GB/s, peak {peak_bw / 1e9:.0f} GB/s"
    )
    cols = ["op", "impl", "batch", "bytes", "us/call", "GB/s", "x copy", "x peak", "vs torch"]
    rows = [
        [
            r["op"],
            r["impl"],
            r["batch"],
            r["bytes_per_call"],
            r["us_per_call"],
            r["gb_per_s"],
            r["of_copy"],
            r["of_peak"] if r["of_peak"] is not None else "-",
            f"{r['speedup_vs_torch']:.2f}x" if "speedup_vs_torch" in r else "-",
        ]
        for r in results
    ]
    print_table("sparse updates", cols, rows)
    meta = {"device": name, "copy_bytes_per_s": copy_bw, "peak_bytes_per_s": peak_bw}
    write_json(
        args.json,
        {"benchmark": "hogwild-cuda", "meta": meta, "args": vars(args), "results": results},
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
