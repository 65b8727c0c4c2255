"""Profiles rank 0 of a loop of in-place float32 allreduces, pscore or Open MPI (mpi4py): `perf
stat` counts (context switches, migrations, task clock, syscalls by kind) and the kernel's
schedstat (on-CPU time, time runnable but waiting for a CPU, voluntary and involuntary switches),
both over the timed loop only, per call. Needs perf, and mpirun + mpi4py for `mpi`.

  python benchmarks/profile_rank.py pscore --world 2 --bytes 4096 --iters 20000 [--pin]
  python benchmarks/profile_rank.py mpi --world 4 --bytes 4096 --transport tcp
  python benchmarks/profile_rank.py pscore --iters 2000 --pause-ms 200   # settling after idling

--pin binds pscore rank r to core r % cores (Open MPI binds one rank per core by default when
the ranks fit on the cores, and leaves them unbound when oversubscribed)."""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time

EVENTS = ["context-switches", "cpu-migrations", "task-clock", "raw_syscalls:sys_enter"] + [
    f"syscalls:sys_enter_{name}"
    for name in (
        "futex",
        "sched_yield",
        "poll",
        "ppoll",
        "epoll_wait",
        "recvfrom",
        "sendto",
        "sendmsg",
        "recvmsg",
        "process_vm_readv",
    )
]


def _sched() -> list[int]:
    """This process's threads summed: on-CPU ns, runnable-waiting ns, voluntary and involuntary
    context switches (/proc/self/task/*/schedstat and status)."""
    total = [0, 0, 0, 0]
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/schedstat") as f:
                on_cpu, waiting, _ = map(int, f.read().split())
            with open(f"/proc/self/task/{tid}/status") as f:
                switches = [int(line.split()[1]) for line in f if "ctxt_switches" in line]
        except OSError:  # the thread ended meanwhile
            continue
        for i, value in enumerate([on_cpu, waiting, *switches]):
            total[i] += value
    return total


def _perf(rank: int, command: str) -> None:
    """enable/disable perf's counters (perf stat --control) from rank 0, which runs under it."""
    ctl = os.environ.get("PROFILE_PERF_CTL")
    if ctl and rank == 0:
        with open(ctl, "w") as f:
            f.write(command + "\n")
        with open(os.environ["PROFILE_PERF_ACK"]) as f:
            f.read(3)


def loop(args) -> None:
    """One rank: warm up, then time `iters` calls; rank 0 prints p50, mean and schedstat."""
    import numpy as np

    x = np.ones(args.bytes // 4, np.float32)
    if args.kind == "pscore":
        import pscore

        pscore.init_process_group(
            init_method=f"tcp://127.0.0.1:{args.port}", rank=args.rank, world_size=args.world
        )
        rank, call, barrier = args.rank, (lambda: pscore.all_reduce(x)), pscore.barrier
    else:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
        rank, barrier = comm.Get_rank(), comm.Barrier
        call = lambda: comm.Allreduce(MPI.IN_PLACE, x)  # noqa: E731
    for _ in range(args.warmup):
        call()
    barrier()
    time.sleep(args.pause_ms / 1000)  # every rank idle, as between a training step's collectives
    before = _sched()
    _perf(rank, "enable")
    samples = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        call()
        samples.append(time.perf_counter() - t0)
    _perf(rank, "disable")
    per_call = [(b - a) / args.iters for a, b in zip(before, _sched())]
    if rank == 0 and args.pause_ms:
        blocks = [samples[i : i + 100] for i in range(0, len(samples), 100)]
        print(
            "p50 us per 100 calls:", " ".join(f"{statistics.median(b) * 1e6:.1f}" for b in blocks)
        )
    if rank == 0:
        samples.sort()
        p50_us, mean_us = samples[len(samples) // 2] * 1e6, sum(samples) / len(samples) * 1e6
        print(
            f"{args.kind} world={args.world} {args.bytes} B: p50 {p50_us:.2f} us, mean "
            f"{mean_us:.2f} us; per call: on-CPU {per_call[0] / 1e3:.2f} us, runnable-waiting "
            f"{per_call[1] / 1e3:.2f} us, voluntary cs {per_call[2]:.3f}, involuntary cs "
            f"{per_call[3]:.3f}",
            flush=True,
        )
    barrier()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _print_perf(path: str, iters: int) -> None:
    counts = []
    with open(path) as f:
        for line in f:
            fields = line.strip().split(",")
            if len(fields) > 2 and fields[0].replace(".", "").isdigit() and float(fields[0]):
                name = fields[2].replace("syscalls:sys_enter_", "").replace("raw_syscalls:", "")
                counts.append(f"{name} {float(fields[0]) / iters:.3g}")
    print("  perf per call: " + ", ".join(counts) + " (task-clock in ms)")


def profile(args) -> None:
    """Starts the ranks, rank 0 under perf stat with its counters enabled around the loop."""
    me = [sys.executable, os.path.abspath(__file__), "_loop", args.kind]
    common = ["--world", str(args.world), "--bytes", str(args.bytes), "--iters", str(args.iters)]
    common += ["--pause-ms", str(args.pause_ms), "--warmup", str(args.warmup)]
    cores = len(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory() as tmp:
        ctl, ack, out = f"{tmp}/ctl", f"{tmp}/ack", f"{tmp}/perf.csv"
        os.mkfifo(ctl)
        os.mkfifo(ack)
        perf = ["perf", "stat", "-x,", "-o", out, "-D", "-1", "--control", f"fifo:{ctl},{ack}"]
        perf += ["-e", ",".join(EVENTS)]
        env = dict(os.environ, PROFILE_PERF_CTL=ctl, PROFILE_PERF_ACK=ack, OMP_NUM_THREADS="1")
        if args.kind == "pscore":
            env["PSCORE_TRANSPORT"] = args.transport
            port = str(_free_port())
            procs = []
            for r in range(args.world):
                pin = ["taskset", "-c", str(r % cores)] if args.pin else []
                cmd = [*pin, *(perf if r == 0 else []), *me, *common, "--rank", str(r)]
                procs.append(subprocess.Popen([*cmd, "--port", port], env=env))
            codes = [p.wait(timeout=600) for p in procs]
        else:
            env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
            btl = "tcp,self" if args.transport == "tcp" else "vader,self"
            cmd = ["mpirun", "--mca", "pml", "ob1", "--mca", "btl", btl]
            cmd += ["--oversubscribe"] if args.world > cores else []
            cmd += ["-n", "1", *perf, *me, *common]
            cmd += [":", "-n", str(args.world - 1), *me, *common] if args.world > 1 else []
            codes = [subprocess.run(cmd, env=env, timeout=600, check=False).returncode]
        if any(codes):
            sys.exit(f"profile_rank: a rank exited with {codes}")
        _print_perf(out, args.iters)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", choices=["_loop"], help=argparse.SUPPRESS)
    p.add_argument("kind", choices=["pscore", "mpi"])
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--bytes", type=int, default=4096)
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--warmup", type=int, default=500, help="untimed calls before the loop")
    p.add_argument("--transport", choices=["shm", "tcp"], default="shm")
    p.add_argument("--pin", action="store_true", help="pscore: rank r on core r %% cores")
    p.add_argument(
        "--pause-ms",
        type=int,
        default=0,
        help="every rank sleeps this long before the timed loop; then rank 0 also prints the "
        "p50 of each 100 calls (how long the calls take to settle after an idle spell)",
    )
    p.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    (loop if args.mode == "_loop" else profile)(args)


if __name__ == "__main__":
    main()
