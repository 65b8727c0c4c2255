"""The soak driver (benchmarks/soak.sh): a pscore-store, 2 `pserver --recover` shards and 4
soak workers (soak_worker.py); every ~20 s one of the 6, drawn at random, gets SIGKILL and is
started again. At the end the workers are stopped, the tables pulled and compared with the
pushes the workers logged as acknowledged:

- sparse rows: each step has its own rows; an acknowledged step's rows must hold exactly its
  delta (0 = lost, 2 x delta = applied twice); a step in flight when its worker was killed may
  hold 0 or delta, never more;
- the dense table: each shard's part must equal the sum of the acknowledged deltas plus the
  deltas of some of the steps in flight at a worker kill.

A worker that acknowledges nothing for --hang-s seconds, or does not exit within --hang-s of
the stop, counts as a hang; one that exits on its own, as an unexpected exit (both restarted).
Prints a JSON summary; exit status 1 on a mismatch, a hang or an unexpected exit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np

from pscore.ps import PSClient

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from soak_worker import DENSE_NUMEL, row_ids

__all__ = ["main"]

HERE = os.path.dirname(os.path.abspath(__file__))
NUM_SHARDS = 2
NUM_WORKERS = 4


def _start_store(workdir: str) -> tuple[subprocess.Popen, str]:
    path = os.path.join(workdir, "store.out")
    with open(path, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "pscore.store.server", "--port", "0"], stdout=out, stderr=out
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with open(path) as out:
            for line in out:
                if "serving " in line:
                    return proc, line.split("serving ")[1].strip()
        time.sleep(0.1)
    raise TimeoutError("pscore-store did not print its URL within 60 s")


class Soak:
    def __init__(self, workdir: str, store: str, interval: float):
        self.workdir, self.store, self.interval = workdir, store, interval
        self.stop_file = os.path.join(workdir, "stop")
        self.procs: dict[str, subprocess.Popen] = {}
        self.kills = {"server": 0, "worker": 0}
        self.hangs: list[str] = []  # workers that stopped acknowledging, or did not stop
        self.exits: list[str] = []  # workers that exited on their own (an error)

    def _log(self, name: str) -> str:
        return os.path.join(self.workdir, f"{name}.log")

    def start(self, name: str) -> None:
        kind, index = name.split("-")
        if kind == "server":
            cmd = [sys.executable, "-m", "pscore.ps.pserver", "--port", "0", "--shard", index,
                   "--num-shards", str(NUM_SHARDS), "--num-workers", str(NUM_WORKERS),
                   "--store", self.store, "--recover", os.path.join(self.workdir, "recover"),
                   "--checkpoint-every", "10", "--snapshot-log-mb", "16"]  # fmt: skip
        else:
            cmd = [sys.executable, os.path.join(HERE, "soak_worker.py"), "--store", self.store,
                   "--worker", index, "--log", self._log(name), "--stop-file", self.stop_file,
                   "--interval", str(self.interval)]  # fmt: skip
        with open(os.path.join(self.workdir, f"{name}.err"), "a") as err:
            self.procs[name] = subprocess.Popen(cmd, stdout=err, stderr=err)

    def kill_one(self, rng: random.Random) -> str:
        name = rng.choice(sorted(self.procs))
        proc = self.procs[name]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        self.kills[name.split("-")[0]] += 1
        self.start(name)
        return name

    def check_alive(self, hang_s: float) -> None:
        """Restarts a worker that exited on its own (an error: counted) or stopped acking."""
        now = time.time()
        for name, proc in self.procs.items():
            if not name.startswith("worker"):
                continue
            log = self._log(name)
            stale = os.path.exists(log) and now - os.path.getmtime(log) > hang_s
            if proc.poll() is not None or stale:
                if stale:
                    self.hangs.append(f"{name}: no acknowledged push for {hang_s:.0f} s")
                else:
                    self.exits.append(f"{name}: exit status {proc.returncode}")
                proc.kill()
                proc.wait()
                self.start(name)

    def stop_workers(self, hang_s: float) -> None:
        open(self.stop_file, "w").close()
        deadline = time.monotonic() + hang_s
        for name, proc in self.procs.items():
            if name.startswith("worker"):
                try:
                    proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self.hangs.append(f"{name}: did not stop")
                    proc.kill()
                if proc.returncode not in (0, -signal.SIGKILL):
                    self.exits.append(f"{name}: exit status {proc.returncode} at stop")


def _read_log(path: str) -> tuple[dict[int, int], dict[int, int]]:
    """(acknowledged steps, steps in flight when the worker was killed): step -> delta."""
    pushed, acked = {}, set()
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[0] == "P":
                pushed[int(parts[1])] = int(parts[2])
            elif len(parts) == 2 and parts[0] == "A":
                acked.add(int(parts[1]))
    ok = {s: d for s, d in pushed.items() if s in acked}
    return ok, {s: d for s, d in pushed.items() if s not in acked}


def _subset_sums(values: list[int]) -> set[int]:
    sums = {0}
    for v in values:
        sums |= {s + v for s in sums}
    return sums


def verify(workdir: str, store: str) -> dict:
    client = PSClient(store=store, worker_id=-1, timeout=60, retry_timeout=60)
    acked_total, pending_all = 0, []
    report = {"acked_steps": 0, "in_flight_at_kill": 0, "in_flight_applied": 0,
              "lost": 0, "duplicated": 0, "dense_mismatch_parts": 0}  # fmt: skip
    for w in range(NUM_WORKERS):
        acked, pending = _read_log(os.path.join(workdir, f"worker-{w}.log"))
        report["acked_steps"] += len(acked)
        report["in_flight_at_kill"] += len(pending)
        acked_total += sum(acked.values())
        pending_all += list(pending.values())
        for steps, is_acked in ((acked, True), (pending, False)):
            if not steps:
                continue
            ids = np.concatenate([row_ids(w, s) for s in steps])
            rows = client.pull_sparse("rows", ids).reshape(len(steps), -1)
            times = rows / np.array(list(steps.values()), np.float32)[:, None]  # applications
            twice = np.any(times > 1, axis=1)
            report["duplicated"] += int(np.sum(twice))
            if is_acked:
                report["lost"] += int(np.sum(np.any(times != 1, axis=1) & ~twice))
            else:
                report["in_flight_applied"] += int(np.sum(np.all(times == 1, axis=1)))
    dense = client.pull("total")
    possible = {acked_total + s for s in _subset_sums(pending_all)}
    half = DENSE_NUMEL // NUM_SHARDS
    for part in (dense[:half], dense[half:]):
        if not (np.all(part == part[0]) and int(part[0]) in possible):
            report["dense_mismatch_parts"] += 1
    report["acked_delta_sum"] = acked_total
    report["dense_values"] = sorted({int(v) for v in np.unique(dense)})
    client.close()
    return report


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--seconds", type=float, default=600)
    p.add_argument("--kill-every", type=float, default=20)
    p.add_argument("--interval", type=float, default=0.05, help="a worker's pause between steps")
    p.add_argument("--hang-s", type=float, default=150)
    p.add_argument("--workdir", required=True)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    rng = random.Random(args.seed)
    store_proc, store = _start_store(args.workdir)
    soak = Soak(args.workdir, store, args.interval)
    t0 = time.monotonic()
    try:
        for name in [f"server-{i}" for i in range(NUM_SHARDS)] + [
            f"worker-{i}" for i in range(NUM_WORKERS)
        ]:
            soak.start(name)
        next_kill = t0 + rng.uniform(0.5, 1.5) * args.kill_every
        while time.monotonic() - t0 < args.seconds:
            time.sleep(1)
            soak.check_alive(args.hang_s)
            if time.monotonic() >= next_kill:
                name = soak.kill_one(rng)
                print(f"{time.monotonic() - t0:7.1f} s  SIGKILL {name}", flush=True)
                next_kill += rng.uniform(0.5, 1.5) * args.kill_every
        soak.stop_workers(args.hang_s)
        report = {"seconds": round(time.monotonic() - t0, 1), "kills": soak.kills}
        report.update(verify(args.workdir, store))
    finally:
        for proc in [*soak.procs.values(), store_proc]:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    soak.hangs.append(f"pid {proc.pid}: did not exit on SIGTERM")
                    proc.kill()
    report["hangs"], report["unexpected_exits"] = soak.hangs, soak.exits
    print(json.dumps(report, indent=1))
    bad = report["lost"] + report["duplicated"] + report["dense_mismatch_parts"]
    bad += len(soak.hangs) + len(soak.exits)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
