"""Open MPI as a peer of the collective benchmarks (`--compare mpi`): checks that `mpirun` and
mpi4py are there, starts `mpirun` on pscore.bench.mpi_peer beside pscore's ranks, takes turns
with it round by round, watches it (a failing or hung mpirun ends the run with an error naming
it) and prints its table with the ratios. Installs nothing."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys

from ..errors import TimeoutError as StoreTimeoutError
from .report import human_bytes, p50, print_table

__all__ = [
    "MpiPeer",
    "MpiTurns",
    "add_arguments",
    "done_key",
    "go_key",
    "missing_dependencies",
    "mpirun_command",
    "print_mpi_table",
    "ratios",
]

INSTALL = "install them: `apt-get install openmpi-bin libopenmpi-dev` and `pip install mpi4py`"


def go_key(size_index: int, round_index: int) -> str:
    """Set by pscore's rank 0 when the MPI ranks may time this round."""
    return f"bench/mpi/go/{size_index}/{round_index}"


def done_key(size_index: int, round_index: int) -> str:
    """Set by the MPI rank 0 when every MPI rank has timed this round."""
    return f"bench/mpi/done/{size_index}/{round_index}"


def missing_dependencies() -> str | None:
    """Why `--compare mpi` cannot run here (naming what to install), or None."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        return f"--compare mpi needs Open MPI's mpirun, which is not on PATH; {INSTALL}"
    if importlib.util.find_spec("mpi4py") is None:
        return f"--compare mpi needs mpi4py in {sys.executable}, which lacks it; {INSTALL}"
    try:
        version = subprocess.run(
            [mpirun, "--version"], capture_output=True, text=True, timeout=60, check=False
        ).stdout
    except subprocess.TimeoutExpired:
        return f"--compare mpi: `{mpirun} --version` did not answer within 60 s"
    if "Open MPI" not in version:
        said = (version.strip().splitlines() or ["nothing"])[0]
        return f"--compare mpi needs Open MPI; {mpirun} --version says {said!r}; {INSTALL}"
    return None


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--mpi-timeout",
        type=float,
        default=300.0,
        help="with --compare mpi: seconds to wait for mpirun's start and each of its rounds, "
        "and for its exit, before the run ends with an error (default %(default)s)",
    )


class MpiTurns:
    """pscore's side of the alternation: after each pscore round the pscore ranks meet, rank 0
    lets the MPI ranks time theirs, and every pscore rank sleeps on the store until it is done."""

    def __init__(self, store, rank: int, barrier, timeout_s: float):
        self._store, self._rank, self._barrier, self._timeout_s = store, rank, barrier, timeout_s

    def take(self, size_index: int, round_index: int, what: str) -> None:
        self._barrier()
        if self._rank == 0:
            self._store.set(go_key(size_index, round_index), b"1")
        try:
            self._store.wait([done_key(size_index, round_index)], timeout=self._timeout_s)
        except StoreTimeoutError as e:
            raise StoreTimeoutError(
                f"mpirun (the Open MPI peer) did not finish its round {round_index} of {what} "
                f"within {self._timeout_s:g} s (--mpi-timeout)"
            ) from e


def _btl(transport: str) -> str:
    return "tcp,self" if transport == "tcp" else "vader,self"


def mpirun_command(args, port: int, out_path: str, iters: list[int]) -> list[str]:
    """`mpirun` on pscore.bench.mpi_peer with the btl matching pscore's --transport."""
    config = {
        "collective": args.collective,
        "sizes": args.sizes,
        "iters": iters,
        "rounds": args.rounds,
        "buffers": args.buffers,
        "port": port,
        "out": out_path,
    }
    cmd = [shutil.which("mpirun") or "mpirun", "-n", str(args.world)]
    if args.world > len(os.sched_getaffinity(0)):
        cmd += ["--oversubscribe", "--bind-to", "none"]
    else:  # as pscore's ranks bind (launch/affinity.py); Open MPI's own default above 2 ranks
        cmd += ["--bind-to", "core"]  # is a socket
    cmd += ["--mca", "pml", "ob1", "--mca", "btl", _btl(args.transport)]
    if args.transport == "tcp":
        cmd += ["--mca", "btl_tcp_if_include", "lo"]
    return [*cmd, sys.executable, "-m", "pscore.bench.mpi_peer", json.dumps(config)]


def _child_env() -> dict:
    import pscore

    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    here = os.path.dirname(os.path.dirname(pscore.__file__))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (here, env.get("PYTHONPATH")) if p)
    return env


class MpiPeer:
    """The running `mpirun` job (a session of its own, so closing it ends every rank)."""

    def __init__(self, args, port: int, tmpdir: str, iters: list[int]):
        self._timeout_s = args.mpi_timeout
        self._out = os.path.join(tmpdir, "mpi.json")
        self._log = open(os.path.join(tmpdir, "mpirun.log"), "w+")  # noqa: SIM115 - closed in close()
        self.command = mpirun_command(args, port, self._out, iters)
        self._proc = subprocess.Popen(
            self.command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=_child_env(),
            start_new_session=True,
        )
        self.library = ""
        self._btl = _btl(args.transport)

    def _log_tail(self) -> str:
        self._log.flush()
        self._log.seek(0)
        return "".join(self._log.readlines()[-15:]).strip() or "(no output)"

    def check(self) -> None:
        """Raises if mpirun has ended with an error."""
        code = self._proc.poll()
        if code not in (None, 0):
            raise RuntimeError(f"mpirun exited with code {code}:\n{self._log_tail()}")

    def finish(self) -> list[list[float]]:
        """Waits for mpirun's exit; per size, the samples of the slowest MPI rank."""
        try:
            self._proc.wait(timeout=self._timeout_s)
        except subprocess.TimeoutExpired:
            raise RuntimeError(
                f"mpirun did not exit within {self._timeout_s:g} s of pscore's last round "
                f"(--mpi-timeout):\n{self._log_tail()}"
            ) from None
        self.check()
        with open(self._out) as f:
            result = json.load(f)
        self.library = result["library"]
        by_rank = result["samples"]
        return [max((r[i] for r in by_rank), key=p50) for i in range(len(by_rank[0]))]

    def describe(self) -> dict:
        """What the report says about the peer (after finish())."""
        return {"library": self.library, "btl": self._btl, "command": self.command}

    def close(self) -> None:
        if self._proc.poll() is None:
            os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        self._log.close()


def ratios(entry: dict, main_key: str) -> dict:
    """pscore's main row (its own call, or the torch API's when that ran alone) over MPI's."""
    ours, theirs = entry[main_key], entry["mpi"]
    busbw = ours["busbw_GBps"] / theirs["busbw_GBps"] if theirs["busbw_GBps"] else 0.0
    return {"mpi_time_ratio": ours["p50_us"] / theirs["p50_us"], "mpi_busbw_ratio": busbw}


def print_mpi_table(report: dict, main_key: str) -> None:
    cols = ["bytes", "mpi p50 us", "mpi algbw", "mpi busbw", "pscore p50", "busbw x mpi"]
    cols.append("time / mpi")
    rows = [
        [
            human_bytes(r["bytes"]),
            r["mpi"]["p50_us"],
            r["mpi"]["algbw_GBps"],
            r["mpi"]["busbw_GBps"],
            r[main_key]["p50_us"],
            r["mpi_busbw_ratio"],
            r["mpi_time_ratio"],
        ]
        for r in report["results"]
        if "mpi" in r
    ]
    mpi = report["mpi"]
    library = mpi["library"].split(",")[0]
    title = f"{report['collective']} world={report['world']} {library} btl={mpi['btl']}"
    print_table(title, cols, rows, [10, 12, 12, 12, 12, 13, 12])
