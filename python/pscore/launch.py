"""``pscore-run``: starts N local ranks of a script, like ``torchrun --standalone``.

    pscore-run -n 4 train.py --lr 0.1
    pscore-run -n 2 -m mypackage.train
    python -m pscore.launch -n 2 train.py

Each rank gets PSCORE_RANK / PSCORE_WORLD_SIZE / PSCORE_LOCAL_RANK / PSCORE_LOCAL_WORLD_SIZE /
PSCORE_MASTER_ADDR / PSCORE_MASTER_PORT, torchrun's RANK / WORLD_SIZE / LOCAL_RANK /
LOCAL_WORLD_SIZE / MASTER_ADDR / MASTER_PORT, a PSCORE_JOB_ID shared by the run, and
OMP_NUM_THREADS=1 unless already set. Ranks run in their own process groups; SIGINT, SIGTERM
and SIGHUP sent to the launcher are forwarded to them. When a rank fails, the launcher says
which, sends SIGTERM to the others (SIGKILL after the grace period) and exits with the failing
rank's code (128 + N for a rank killed by signal N).
"""

from __future__ import annotations

import argparse
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import uuid

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_PR_SET_PDEATHSIG = 1


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pscore-run",
        description="Start N local ranks of a training script with the rendezvous environment "
        "set (like torchrun --standalone).",
    )
    p.add_argument(
        "-n",
        "--nproc-per-node",
        "--nproc_per_node",
        dest="nproc",
        type=int,
        required=True,
        help="number of ranks to start on this machine",
    )
    p.add_argument("--master-addr", "--master_addr", default="127.0.0.1", help="rank 0's address")
    p.add_argument(
        "--master-port",
        "--master_port",
        type=int,
        default=0,
        help="rank 0's store port (default: a free port)",
    )
    p.add_argument(
        "--grace-period",
        type=float,
        default=5.0,
        help="seconds between SIGTERM and SIGKILL when stopping ranks (default 5)",
    )
    p.add_argument(
        "-m", "--module", action="store_true", help="run the target as a module (python -m)"
    )
    p.add_argument("target", help="the script (or, with -m, the module) to run")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to every rank")
    return p


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on right now (bound and released; the OS may hand it out again)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rank_environment(
    base: dict, rank: int, world: int, master_addr: str, master_port: int, job_id: str
) -> dict:
    """The environment of one local rank (a copy of ``base`` with the rendezvous variables)."""
    env = dict(base)
    values = {
        "RANK": rank,
        "WORLD_SIZE": world,
        "LOCAL_RANK": rank,
        "LOCAL_WORLD_SIZE": world,
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port,
    }
    for name, value in values.items():
        env[name] = str(value)
        env["PSCORE_" + name] = str(value)
    env["GROUP_RANK"] = "0"
    env.setdefault("PSCORE_JOB_ID", job_id)
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when the launcher dies (Linux), so ranks of a
    launcher killed with SIGKILL do not linger."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: no such guard, the launcher's signal forwarding still applies


def _exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def _describe(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


class _Supervisor:
    """Waits for the ranks; stops the rest when one fails or a signal arrives."""

    def __init__(self, procs: list, grace_s: float):
        self.procs = procs
        self.by_pid: dict = {}  # filled as ranks start
        self.live: set = set()
        self.grace_s = grace_s
        self.lock = threading.Lock()
        self.killer: threading.Timer | None = None
        self.signalled: int | None = None

    def _signal_live(self, sig: int) -> None:
        with self.lock:
            targets = [self.procs[r].pid for r in self.live]
        for pid in targets:
            try:
                os.killpg(pid, sig)
            except (ProcessLookupError, PermissionError):
                pass

    def stop_all(self, sig: int = signal.SIGTERM) -> None:
        self._signal_live(sig)
        if self.killer is None:
            self.killer = threading.Timer(self.grace_s, self._signal_live, args=(signal.SIGKILL,))
            self.killer.daemon = True
            self.killer.start()

    def on_signal(self, signum: int, frame) -> None:
        if self.signalled is None:
            self.signalled = signum
        self.stop_all(signum)

    def run(self) -> int:
        failure: tuple | None = None
        while self.live:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            rank = self.by_pid.get(pid)
            if rank is None:
                continue
            code = os.waitstatus_to_exitcode(status)
            self.procs[rank].returncode = code
            with self.lock:
                self.live.discard(rank)
            if code != 0 and failure is None and self.signalled is None:
                failure = (rank, code)
                print(
                    f"pscore-run: rank {rank} (pid {pid}) {_describe(code)}; "
                    f"stopping the other {len(self.live)} rank(s)",
                    file=sys.stderr,
                    flush=True,
                )
                self.stop_all()
        if self.killer is not None:
            self.killer.cancel()
        if self.signalled is not None:
            return 128 + self.signalled
        return _exit_code(failure[1]) if failure else 0


def main(argv: list | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.nproc < 1:
        print(f"pscore-run: -n must be >= 1, got {args.nproc}", file=sys.stderr)
        return 2
    if not 0 <= args.master_port <= 65535:
        print(f"pscore-run: --master-port {args.master_port} is out of range", file=sys.stderr)
        return 2
    port = args.master_port or free_port(args.master_addr)
    job_id = uuid.uuid4().hex[:16]
    command = [sys.executable] + (["-m"] if args.module else []) + [args.target, *args.args]
    procs: list = []
    supervisor = _Supervisor(procs, args.grace_period)
    previous = {sig: signal.signal(sig, supervisor.on_signal) for sig in _FORWARDED}
    try:
        for rank in range(args.nproc):
            if supervisor.signalled is not None:
                break
            env = rank_environment(os.environ, rank, args.nproc, args.master_addr, port, job_id)
            try:
                # preexec_fn runs before any thread of ours exists (the kill timer starts later).
                proc = subprocess.Popen(
                    command,
                    env=env,
                    start_new_session=True,
                    preexec_fn=_die_with_parent,  # noqa: PLW1509
                )
            except OSError as e:
                print(f"pscore-run: cannot start rank {rank}: {e}", file=sys.stderr)
                supervisor.stop_all()
                supervisor.run()
                return 1
            procs.append(proc)
            supervisor.by_pid[proc.pid] = rank
            supervisor.live.add(rank)
        return supervisor.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
