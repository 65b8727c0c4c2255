"""One process of test_leak_cycles: runs `cycles` create/use/close cycles of one pscore object and
prints, as one JSON line, this process's open fds, threads and RSS after the first `warmup`
cycles and after the last (and, with --watch-pid, another process's: the pserver's).

  leak_cycles_probe.py group RANK WORLD STORE_PORT CYCLES WARMUP
  leak_cycles_probe.py client SERVER_ADDRESS SERVER_PID CYCLES WARMUP
  leak_cycles_probe.py table CYCLES WARMUP
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time

import numpy as np

import pscore
from pscore.hogwild import SharedTable
from pscore.store import PrefixStore, TCPStore

PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
SETTLE_S = 30.0  # hang guard: how long a watched process may take to close what a cycle dropped


def fd_targets(pid: int | str) -> list[str]:
    """What `pid`'s open fds point at ("socket:[123]", "/dev/shm/x", ...), for the report."""
    targets = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            targets.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:  # closed meanwhile (listdir's own fd)
            continue
    return sorted(targets)


def sockets_to_port(pid: int | str, port: int) -> int:
    """How many of `pid`'s TCP connections go to `port` on this host (/proc/PID/net/tcp)."""
    mine = {t[len("socket:[") : -1] for t in fd_targets(pid) if t.startswith("socket:[")}
    count = 0
    for table in ("tcp", "tcp6"):
        with open(f"/proc/{pid}/net/{table}") as f:
            next(f)  # the header; read line by line: TIME_WAIT entries make the table long
            for line in f:
                fields = line.split()
                remote_port = int(fields[2].rsplit(":", 1)[1], 16)
                count += remote_port == port and fields[9] in mine
    return count


def usage(pid: int | str = "self", store_port: int | None = None) -> dict:
    """Open fds (and their targets), threads and resident bytes of process `pid` from /proc.
    With `store_port`, "fds" leaves out the connections to the store: the TCPStore client keeps
    a bounded pool of them (one per thread that used the store at once), counted apart."""
    with open(f"/proc/{pid}/statm") as f:
        rss_pages = int(f.read().split()[1])
    targets = fd_targets(pid)
    store_sockets = 0 if store_port is None else sockets_to_port(pid, store_port)
    return {
        "fds": len(targets) - store_sockets,
        "store_sockets": store_sockets,
        "fd_targets": targets,
        "threads": len(os.listdir(f"/proc/{pid}/task")),
        "rss": rss_pages * PAGE_BYTES,
    }


def settled_usage(pid: int, expected: dict | None) -> dict:
    """`pid`'s usage once its fds and threads are back at `expected` (a server closes a dropped
    connection when it next reads it), or as it stands after SETTLE_S."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        now = usage(pid)
        if expected is None or time.monotonic() > deadline:
            return now
        if (now["fds"], now["threads"]) == (expected["fds"], expected["threads"]):
            return now
        time.sleep(0.05)


def group_cycle(i: int, store, rank: int, world: int) -> None:
    """One init_process_group / all_reduce / destroy_process_group cycle on a fresh prefix of the
    same store, as torchrun's elastic agent gives each restart round its own prefix."""
    pscore.init_process_group(
        store=PrefixStore(f"cycle{i}", store), rank=rank, world_size=world, timeout=60
    )
    x = np.full(256, rank + i, dtype=np.float32)
    pscore.all_reduce(x)
    expected = sum(r + i for r in range(world))
    if x[0] != expected:
        raise AssertionError(f"cycle {i}: all_reduce gave {x[0]}, expected {expected}")
    pscore.destroy_process_group()


def client_cycle(i: int, address: str) -> None:
    client = pscore.PSClient([address], connect_timeout=60)
    out = client.pull("w")
    if out.shape != (64,):
        raise AssertionError(f"cycle {i}: pulled shape {out.shape}")
    client.push("w", np.ones(64, np.float32))
    client.close()


def table_cycle(i: int) -> None:
    table = SharedTable.create(shape=(128, 16), optimizer="adagrad")
    table.adagrad(np.arange(8), np.ones((8, 16), np.float32), lr=0.1)
    path = SharedTable.shm_path(table.name)
    table.close()
    if os.path.exists(path):
        raise AssertionError(f"cycle {i}: {path} outlived the table's only handle")


def measure(
    run_cycle, cycles: int, warmup: int, watch_pid: int | None = None, store_port: int | None = None
) -> dict:
    report: dict = {}
    for phase, first, last in (("warm", 0, warmup), ("end", warmup, cycles)):
        for i in range(first, last):
            run_cycle(i)
        gc.collect()
        report[phase] = usage(store_port=store_port)
        if watch_pid is not None:
            report[f"server_{phase}"] = settled_usage(watch_pid, report.get("server_warm"))
    return report


def main(argv: list[str]) -> None:
    kind, args = argv[0], argv[1:]
    if kind == "group":
        rank, world, port, cycles, warmup = (int(a) for a in args)
        store = TCPStore("127.0.0.1", port, is_master=False, timeout=60)
        report = measure(
            lambda i: group_cycle(i, store, rank, world), cycles, warmup, store_port=port
        )
    elif kind == "client":
        address, pid, cycles, warmup = args[0], *(int(a) for a in args[1:])
        with pscore.PSClient([address]) as setup:
            setup.create_dense("w", (64,))
        report = measure(lambda i: client_cycle(i, address), cycles, warmup, watch_pid=pid)
    elif kind == "table":
        cycles, warmup = (int(a) for a in args)
        report = measure(table_cycle, cycles, warmup)
    else:
        raise SystemExit(f"unknown cycle kind {kind!r}")
    report["pid"] = os.getpid()
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
