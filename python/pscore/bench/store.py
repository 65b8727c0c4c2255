"""Store benchmark: pscore's TCPStore against torch.distributed.TCPStore, in one run.

    python -m pscore.bench store [--iters 2000] [--clients 4] [--json out.json]

Per-op latency (p50 over --iters calls from a client connected to a master in this process),
the wake-up latency of a parked wait (a set in one thread to the return of a wait in another),
and the add throughput of --clients client threads. Ratios are torch time / pscore time (above 1:
pscore is faster) and pscore ops/s / torch ops/s.
"""

from __future__ import annotations

import argparse
import datetime
import threading
import time
import uuid

from pscore.bench.report import p50, print_table, write_json
from pscore.store import TCPStore

__all__ = ["main"]


def _pscore_pair(timeout_s: float):
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=timeout_s)
    return master, lambda: TCPStore("127.0.0.1", master.port, timeout=timeout_s)


def _torch_pair(timeout_s: float):
    import torch.distributed as dist

    td = datetime.timedelta(seconds=timeout_s)
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=td, wait_for_workers=False)
    port = master.port
    return master, lambda: dist.TCPStore("127.0.0.1", port, is_master=False, timeout=td)


def _op_latencies(client, iters: int, value: bytes) -> dict:
    client.set("existing", value)
    ops = {
        "set": lambda i: client.set(f"k{i % 64}", value),
        "get": lambda _i: client.get("existing"),
        "add": lambda _i: client.add("counter", 1),
        "check": lambda _i: client.check(["existing"]),
        "wait(existing)": lambda _i: client.wait(["existing"]),
        "compare_set": lambda _i: client.compare_set("cas", b"", value),
    }
    out = {}
    for name, op in ops.items():
        for i in range(min(100, iters)):  # warm-up
            op(i)
        samples = []
        for i in range(iters):
            t0 = time.perf_counter()
            op(i)
            samples.append(time.perf_counter() - t0)
        out[name] = p50(samples) * 1e6
    return out


def _wakeup_latency(master, client, iters: int) -> float:
    """A waiter parks on a fresh key; the master sets it; p50 from the set to the wake-up."""
    samples = []
    for _i in range(iters):
        key = f"wake/{uuid.uuid4().hex}"
        woke: list = []

        def waiter(key=key, woke=woke):
            client.wait([key])
            woke.append(time.perf_counter())

        t = threading.Thread(target=waiter)
        t.start()
        time.sleep(0.002)  # let the waiter park
        t0 = time.perf_counter()
        master.set(key, b"1")
        t.join()
        samples.append(woke[0] - t0)
    return p50(samples) * 1e6


def _add_throughput(open_client, clients: int, iters: int) -> float:
    stores = [open_client() for _ in range(clients)]
    barrier = threading.Barrier(clients + 1)

    def run(s):
        barrier.wait()
        for _ in range(iters):
            s.add("throughput", 1)

    threads = [threading.Thread(target=run, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    barrier.wait()
    t0 = time.perf_counter()
    for t in threads:
        t.join()
    return clients * iters / (time.perf_counter() - t0)


def _measure(pair, args) -> dict:
    master, open_client = pair(30.0)
    client = open_client()
    result = _op_latencies(client, args.iters, b"v" * args.value_bytes)
    result["wake-up"] = _wakeup_latency(master, open_client(), max(20, args.iters // 20))
    result["add ops/s"] = _add_throughput(open_client, args.clients, args.iters)
    return result


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m pscore.bench store")
    p.add_argument("name", nargs="?", default="store")
    p.add_argument("--iters", type=int, default=2000)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--value-bytes", type=int, default=64)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    ours = _measure(_pscore_pair, args)
    try:
        theirs = _measure(_torch_pair, args)
    except ImportError:
        theirs = None
        print("# torch is not installed: no peer to compare with")
    rows = []
    for op, value in ours.items():
        peer = theirs[op] if theirs else float("nan")
        throughput = op.endswith("ops/s")
        ratio = (value / peer if throughput else peer / value) if theirs else float("nan")
        rows.append([op, value, peer, ratio])
    print_table(
        "TCPStore: latency p50 in us (add: ops/s); ratio > 1 means pscore is faster",
        ["op", "pscore", "torch", "ratio"],
        rows,
        [18, 14, 14, 10],
    )
    write_json(
        args.json, {"benchmark": "store", "args": vars(args), "pscore": ours, "torch": theirs}
    )
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
