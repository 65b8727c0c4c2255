"""Helpers for the parameter-server tests (no tests here): clusters of in-process shards and
worker processes started with the spawn method (children import this module by name)."""

from __future__ import annotations

import multiprocessing as mp
import os
import subprocess
import sys
import time
import traceback

import numpy as np

from pscore.ps.server import PServer

# Children import pscore from wherever this process did (the source tree or an installed wheel).
CHILD_PYTHONPATH = os.pathsep.join(p for p in sys.path if p)


def start_cluster(num_shards: int, num_workers: int = 1, **kw) -> list[PServer]:
    kw.setdefault("log_connections", False)
    return [PServer(s, num_shards, num_workers, **kw) for s in range(num_shards)]


def stop_cluster(servers) -> None:
    for s in servers:
        s.stop(0)


def addresses(servers) -> list[str]:
    return [s.address for s in servers]


def _child(fn, rank, args, queue):
    try:
        queue.put((rank, "ok", fn(rank, *args)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        queue.put((rank, "error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run_workers(fn, num: int, args: tuple = (), timeout: float = 60.0) -> list:
    """Runs fn(rank, *args) in `num` spawned processes; returns their results by rank and
    raises the first failure."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_child, args=(fn, r, args, queue), daemon=True) for r in range(num)]
    for p in procs:
        p.start()
    results: dict[int, object] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < num:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(
                    f"workers {sorted(set(range(num)) - set(results))} did not finish"
                )
            rank, status, value = queue.get(timeout=left)
            if status != "ok":
                raise AssertionError(f"worker {rank} failed: {value}")
            results[rank] = value
    finally:
        for p in procs:
            p.join(timeout=5)
            if p.is_alive():
                p.kill()
    return [results[r] for r in range(num)]


def pserver_process(*args: str, env: dict | None = None) -> subprocess.Popen:
    """Starts `python -m pscore.ps.pserver ARGS` and waits for its "serving on" line."""
    full_env = dict(os.environ, PYTHONPATH=CHILD_PYTHONPATH)
    full_env.update(env or {})
    proc = subprocess.Popen(
        [sys.executable, "-m", "pscore.ps.pserver", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=full_env,
    )
    line = proc.stdout.readline()
    if "serving on" not in line:
        proc.kill()
        raise AssertionError(f"pserver did not start: {line!r} {proc.stderr.read()}")
    proc.banner = line
    return proc


def address_from_banner(banner: str) -> str:
    return banner.split("serving on ")[1].split(",", maxsplit=1)[0].strip()


def digits_split(seed: int = 0):
    """scikit-learn's digits, standardised, split 75/25 (float32 features, int64 labels)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return train_test_split(x, y.astype(np.int64), test_size=0.25, random_state=seed, stratify=y)
