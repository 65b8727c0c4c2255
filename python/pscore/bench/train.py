"""Training benchmark: pscore.Trainer's strategies against torch DDP on gloo and DDP on pscore's
torch backend, same workloads, same run:

    python -m pscore.bench train --compare ddp-gloo,ddp-pscore --json out.json

Workloads (python/pscore/bench/train_workloads.py): `digits`, time to 97% test accuracy and
samples/s; `mlp`, a 10.5 M-parameter MLP on synthetic data, samples/s. Every run is a fresh set
of processes: pscore strategies under pscore-run (`-n W`, or `--workers W --servers 1` for the
strategies that need parameter servers), the DDP peers as W processes with torch's environment
variables. Times are taken inside the workers (start-up, imports, data loading and the initial
broadcast excluded; python/pscore/bench/train_clock.py) and reported by the chief in a JSON
file. Systems alternate within each repeat, so all see the same drift in background load; the
table gives each system's median over the repeats and its ratio to DDP-gloo (time: below 1 is
faster; samples/s: above 1 is faster). A strategy that fails to import or run is an error row.

`--timeline` runs every strategy S as `S+timeline` instead: PSCORE_TIMELINE set (the merged
trace is written at the end, outside the timed span), and inside the run recording alternates,
on and off for every other step after 3 warm-up steps, on every worker at once. The overhead
is given twice, as fractions of the step time (medians over the steps, then over the repeats):
wall (median step time on / off - 1) and CPU (the chief's training thread: median CPU seconds
per step on - off, over the median step time off). Steps alternating in one run see the same
background load, which separate runs on a shared machine do not; the CPU figure is what the
recording itself costs, where on a loaded machine the wall figure also holds its extra waits
for the scheduler.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from pscore import _config
from pscore.bench.report import p50, print_table, write_json
from pscore.bench.train_workloads import WORKLOADS
from pscore.launch import free_port

__all__ = ["PEERS", "main", "run_system"]

PEERS = {"ddp-gloo": "gloo", "ddp-pscore": "pscore"}
TIMELINE_SUFFIX = "+timeline"  # a strategy run with the Trainer's timeline on


def _default_strategies() -> list[str]:
    from pscore.train import STRATEGIES

    return [s for s in STRATEGIES if s != "auto"]


def _env(**extra: str) -> dict:
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
        **extra,
    )


def _strategy_command(strategy: str, workers: int) -> list[str]:
    """pscore-run's command line for a strategy; raises when the strategy cannot be imported."""
    from pscore.train import strategies

    launch = [sys.executable, "-m", "pscore.launch"]
    if strategies.make(strategy, None, None).needs_servers:
        launch += ["--workers", str(workers), "--servers", "1"]
    else:
        launch += ["-n", str(workers)]
    return [*launch, "-m", "pscore.bench.train_worker", "--strategy", strategy]


def _wait(procs: list, log, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    try:
        for p in procs:
            p.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        raise RuntimeError(f"did not finish within {timeout:g} s") from None
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    failed = [p.returncode for p in procs if p.returncode != 0]
    if failed:
        log.seek(0)
        lines = [line.strip() for line in log.read().splitlines() if line.strip()]
        raise RuntimeError(f"exit status {failed[0]}: {lines[-1] if lines else 'no output'}")


def run_system(system: str, workload: str, args) -> dict:
    """One run of `system` (a strategy or a peer) on `workload`: the chief's result."""
    workers = args.workers
    with tempfile.TemporaryDirectory() as tmp, tempfile.TemporaryFile("w+") as log:
        out = os.path.join(tmp, "result.json")
        common = ["--workload", workload, "--out", out]
        if args.max_epochs is not None:
            common += ["--max-epochs", str(args.max_epochs)]
        if system in PEERS:
            port = str(free_port())
            command = [sys.executable, "-m", "pscore.bench.train_ddp", "--backend", PEERS[system]]
            procs = [
                subprocess.Popen(
                    command + common,
                    env=dict(
                        _env(),
                        RANK=str(r),
                        LOCAL_RANK=str(r),
                        WORLD_SIZE=str(workers),
                        MASTER_ADDR="127.0.0.1",
                        MASTER_PORT=port,
                    ),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
                for r in range(workers)
            ]
        else:
            strategy = system.removesuffix(TIMELINE_SUFFIX)
            command = _strategy_command(strategy, workers) + common
            extra = {}
            if system != strategy:
                extra[_config.TIMELINE.name] = os.path.join(tmp, "trace.json")
                command.append("--timeline-ab")
            env = _env(**extra)
            procs = [subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)]
        _wait(procs, log, args.timeout)
        with open(out) as f:
            return json.load(f)


def _summary(runs: list[dict]) -> dict:
    """The median of each figure over a system's successful runs."""
    ok = [r for r in runs if "error" not in r]
    if not ok:
        return {"error": runs[-1]["error"], "runs": runs}
    out: dict = {"runs": runs}
    for key in (
        "time_to_target_s",
        "samples_per_s",
        "chief_cpu_s",
        "accuracy",
        "epochs",
        "timeline_overhead",
        "timeline_cpu_overhead",
    ):
        values = [r[key] for r in ok if r.get(key) is not None]
        if key in ok[0]:
            out[key] = p50(values) if len(values) == len(ok) else None
    return out


def _ratio(value, peer) -> float | str:
    return value / peer if value is not None and peer else "-"


def _table(workload, rows: dict) -> list[dict]:
    w = WORKLOADS[workload]
    gloo = rows.get("ddp-gloo", {})
    timed = w.target_accuracy is not None
    columns = ["system", "samples/s", "sps/gloo", "chief_cpu_s"]
    if timed:
        columns[1:1] = ["time_s", "accuracy", "epochs"]
        columns.insert(-1, "time/gloo")
    lines, entries, errors = [], [], []
    for system, r in rows.items():
        entry = {"system": system, **{k: v for k, v in r.items() if k != "runs"}}
        entry["runs"] = r["runs"]
        if "error" in r:
            errors.append(f"#   {system}: {r['error']}")
            lines.append([system] + ["error"] * (len(columns) - 1))
            entries.append(entry)
            continue
        entry["samples_per_s_vs_ddp_gloo"] = _ratio(r["samples_per_s"], gloo.get("samples_per_s"))
        cpu = r["chief_cpu_s"] if r["chief_cpu_s"] is not None else "-"
        line = [system, r["samples_per_s"], entry["samples_per_s_vs_ddp_gloo"], cpu]
        if timed:
            t = r["time_to_target_s"]
            entry["time_vs_ddp_gloo"] = _ratio(t, gloo.get("time_to_target_s"))
            line[1:1] = [t if t is not None else "not reached", r["accuracy"], r["epochs"]]
            line.insert(-1, entry["time_vs_ddp_gloo"])
        lines.append(line)
        entries.append(entry)
    print_table(f"{workload}: {w.about}", columns, lines, [22] + [13] * (len(columns) - 1))
    for e in errors:
        print(e)
    return entries


def _systems(workload: str, args) -> list[str]:
    """The strategies asked for, less those the workload leaves out, then the peers (a name
    that is no strategy stays in: its run fails into an error row)."""
    only, known = WORKLOADS[workload].strategies, _default_strategies()
    chosen = [s for s in args.strategies if only is None or s in only or s not in known]
    if getattr(args, "timeline", False):
        chosen = [s + TIMELINE_SUFFIX for s in chosen]
    return chosen + args.compare


def run(args) -> dict:
    results: dict = {w: {s: [] for s in _systems(w, args)} for w in args.workloads}
    for _ in range(args.repeats):
        for workload in args.workloads:
            for system in _systems(workload, args):
                try:
                    r = run_system(system, workload, args)
                except Exception as e:  # noqa: BLE001 - any failure is this system's error row
                    r = {"error": f"{type(e).__name__}: {e}"[:300]}
                results[workload][system].append(r)
    return {w: {s: _summary(runs) for s, runs in by.items()} for w, by in results.items()}


def _print_timeline_overhead(results: dict) -> None:
    for workload, rows in results.items():
        figures = [
            f"{s} {100 * r['timeline_overhead']:+.1f}% wall, "
            f"{100 * r['timeline_cpu_overhead']:+.2f}% cpu"
            for s, r in rows.items()
            if r.get("timeline_overhead") is not None
        ]
        if figures:
            print(f"# {workload}: timeline overhead (of the step time): {'; '.join(figures)}")


def _names(text: str, known: list[str], what: str, p) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip() and n.strip() != "none"]
    unknown = [n for n in names if n not in known]
    if unknown:
        p.error(f"unknown {what} {', '.join(unknown)}; choose from {', '.join(known)}")
    return names


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench train",
        description="pscore.Trainer strategies vs torch DDP (gloo, pscore backend), same run",
    )
    strategies = _default_strategies()
    p.add_argument(
        "--strategies",
        default=",".join(strategies),
        help="pscore strategies to run (default %(default)s)",
    )
    p.add_argument(
        "--compare",
        default=",".join(PEERS),
        help="peers timed alongside, or none (default %(default)s)",
    )
    p.add_argument(
        "--workloads", default=",".join(WORKLOADS), help="workloads (default %(default)s)"
    )
    p.add_argument("--workers", type=int, default=2, help="worker processes (default %(default)s)")
    p.add_argument(
        "--repeats", type=int, default=3, help="runs per system, medians (default %(default)s)"
    )
    p.add_argument(
        "--max-epochs",
        type=int,
        default=None,
        help="cap on a time-to-accuracy run's epochs (default: the workload's)",
    )
    p.add_argument(
        "--timeout", type=float, default=300, help="seconds per run (default %(default)s)"
    )
    p.add_argument(
        "--json", default=None, help="also write the results to this JSON file (default none)"
    )
    p.add_argument(
        "--timeline",
        action="store_true",
        help="run each strategy with the Trainer's timeline, on and off by turns; its overhead",
    )
    args = p.parse_args(argv[1:])
    args.strategies = _names(args.strategies, strategies, "strategy", p)
    args.compare = _names(args.compare, list(PEERS), "peer", p)
    args.workloads = _names(args.workloads, list(WORKLOADS), "workload", p)
    if args.workers < 1 or args.repeats < 1:
        p.error("--workers and --repeats must be >= 1")

    load_before = os.getloadavg()
    results = run(args)
    load_after = os.getloadavg()
    print(f"# {args.workers} workers, {args.repeats} repeats; medians per system")
    report = {w: _table(w, rows) for w, rows in results.items()}
    _print_timeline_overhead(results)
    print(f"# load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}")
    write_json(
        args.json,
        {
            "benchmark": "train",
            "workers": args.workers,
            "repeats": args.repeats,
            "compare": args.compare,
            "workloads": report,
            "load_average": {"before": load_before, "after": load_after},
            "targets": {
                "digits_allreduce_time_vs_ddp_gloo": 0.4,
                "digits_allreduce_time_vs_ddp_pscore": 1.0,
                "mlp_allreduce_samples_per_s_vs_ddp_gloo": 1.5,
            },
        },
    )
    return 0
