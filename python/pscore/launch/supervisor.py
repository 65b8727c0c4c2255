"""``pscore-run``'s watch over the ranks of one node: waits for them, stops the rest when one
fails or a signal arrives (SIGTERM, then SIGKILL after a grace period), and describes the first
failure at the end of the run. With ``--max-restarts K`` a worker that fails is started again
(up to K restarts in all, for an elastic Trainer job to go on). With parameter-server tasks
(``--servers``) the run's status is the workers': once every worker exited 0 the ps tasks
should exit on their own, and those still running a grace period later are stopped."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import threading
import time

from .. import errors

__all__ = ["Rank", "Supervisor", "describe", "exit_code", "failure_summary"]


def exit_code(returncode: int) -> int:
    """The launcher's exit status for a rank's return code (128 + N for signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def describe(returncode: int) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"was killed by {name}"
    return f"exited with code {returncode}"


@dataclasses.dataclass
class Rank:
    """One started rank: its place in the job, its process and (once reaped) how it ended."""

    rank: int
    local_rank: int
    proc: object  # subprocess.Popen
    returncode: int | None = None
    ended_at: float = 0.0  # time.time() when reaped
    role: str = "worker"  # "ps": a parameter-server task; `rank` is then its shard

    @property
    def label(self) -> str:
        """How messages name it: "rank 3", "ps 0"."""
        return f"{'ps' if self.role == 'ps' else 'rank'} {self.rank}"


class Supervisor:
    """Waits for the ranks; stops the rest when one fails or a signal arrives."""

    def __init__(self, grace_s: float, announce, node_note: str = "", max_restarts: int = 0):
        self.ranks: dict[int, Rank] = {}  # by pid, filled as ranks start
        self.live: set[int] = set()  # pids
        self.grace_s = grace_s
        self.announce = announce  # prints one launcher message
        self.node_note = node_note  # e.g. " on this node", for multi-node runs
        self.lock = threading.Lock()
        self.killer: threading.Timer | None = None
        self.signalled: int | None = None
        self.failure: Rank | None = None
        self.workers_succeeded = False  # every worker exited 0: ps tasks may now end as they do
        self.server_stopper: threading.Timer | None = None
        self.max_restarts, self.restarts = max_restarts, 0
        self.restart = None  # starts a failed worker again: (Rank, restart number) -> None
        self.mark_gone = None  # --elastic: tells the job a worker is gone for good: Rank -> None
        self.gone: list[Rank] = []

    def add(self, rank: Rank) -> None:
        with self.lock:
            self.ranks[rank.proc.pid] = rank
            self.live.add(rank.proc.pid)

    def _signal_live(self, sig: int) -> None:
        with self.lock:
            targets = list(self.live)
        for pid in targets:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, sig)

    def stop_all(self, sig: int = signal.SIGTERM) -> None:
        self._signal_live(sig)
        if self.killer is None:
            self.killer = threading.Timer(self.grace_s, self._signal_live, args=(signal.SIGKILL,))
            self.killer.daemon = True
            self.killer.start()

    def _live_roles(self, role: str) -> list[Rank]:
        with self.lock:
            return [self.ranks[pid] for pid in self.live if self.ranks[pid].role == role]

    def _stop_late_servers(self) -> None:
        late = self._live_roles("ps")
        if late:
            names = ", ".join(r.label for r in late)
            self.announce(
                f"pscore-run: the workers finished {self.grace_s:g} s ago and {names} still "
                "run(s); stopping them"
            )
            self.stop_all()

    def _workers_all_succeeded(self, reaped: Rank) -> bool:
        """After reaping `reaped` (which exited 0): was it the last worker, with no failure?"""
        if reaped.role == "ps" or self.failure is not None or self.signalled is not None:
            return False
        return not self._live_roles("worker")

    def _after_workers(self) -> None:
        """Every worker exited 0: the ps tasks get a grace period to exit on their own."""
        self.workers_succeeded = True
        if self._live_roles("ps"):
            self.server_stopper = threading.Timer(self.grace_s, self._stop_late_servers)
            self.server_stopper.daemon = True
            self.server_stopper.start()

    def on_signal(self, signum: int, _frame) -> None:
        if self.signalled is None:
            self.signalled = signum
        self.stop_all(signum)

    def _restarted(self, rank: Rank) -> bool:
        """Starts the failed worker `rank` again when restarts are left; whether it did."""
        if (
            rank.role == "ps"
            or self.restart is None
            or self.restarts >= self.max_restarts
            or self.failure is not None
            or self.signalled is not None
        ):
            return False
        self.restarts += 1
        self.announce(
            f"pscore-run: {rank.label} (pid {rank.proc.pid}) {describe(rank.returncode)}; "
            f"restarting it (restart {self.restarts} of {self.max_restarts})"
        )
        try:
            self.restart(rank, self.restarts)
        except OSError as e:
            self.announce(f"pscore-run: cannot restart {rank.label}: {e}")
            return False
        return True

    def _left_job(self, rank: Rank) -> bool:
        """--elastic: a failed worker with no restart left leaves the job, which goes on;
        whether it did. The last worker does not leave when none succeeded: the job failed."""
        if (
            rank.role == "ps"
            or self.mark_gone is None
            or self.failure is not None
            or self.signalled is not None
        ):
            return False
        workers = [r for r in self.ranks.values() if r.role == "worker"]
        if not self._live_roles("worker") and not any(r.returncode == 0 for r in workers):
            return False
        try:
            self.mark_gone(rank)
        except (OSError, errors.Error) as e:
            self.announce(f"pscore-run: cannot mark {rank.label} gone in the job's store: {e}")
            return False
        self.gone.append(rank)
        self.announce(
            f"pscore-run: {rank.label} (pid {rank.proc.pid}) {describe(rank.returncode)}; no "
            f"restart left ({self.restarts} of {self.max_restarts} used): the elastic job goes "
            "on without it"
        )
        return True

    def run(self) -> int:
        """Reaps every rank; returns the launcher's exit status."""
        while self.live:
            try:
                pid, status = os.waitpid(-1, 0)
            except ChildProcessError:
                break
            rank = self.ranks.get(pid)
            if rank is None:
                continue
            rank.returncode = os.waitstatus_to_exitcode(status)
            rank.ended_at = time.time()
            rank.proc.returncode = rank.returncode
            with self.lock:
                self.live.discard(pid)
            if self.workers_succeeded:
                continue  # a ps task ending after the workers' success: the run succeeded
            if rank.returncode != 0 and (self._restarted(rank) or self._left_job(rank)):
                if self._workers_all_succeeded(rank):  # the last worker left: ps tasks end
                    self._after_workers()
                continue
            if rank.returncode != 0 and self.failure is None and self.signalled is None:
                self.failure = rank
                self.announce(
                    f"pscore-run: {rank.label} (pid {pid}) {describe(rank.returncode)}; "
                    f"stopping the other {len(self.live)} rank(s){self.node_note}"
                )
                self.stop_all()
            elif self._workers_all_succeeded(rank):
                self._after_workers()
        for timer in (self.killer, self.server_stopper):
            if timer is not None:
                timer.cancel()
        if self.signalled is not None:
            return 128 + self.signalled
        return exit_code(self.failure.returncode) if self.failure else 0


def failure_summary(target: str, failure: Rank, others: list, node_rank: int, tail: list) -> str:
    """A few lines on the first failure: which rank, where, when, how, and its last stderr."""
    when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(failure.ended_at))
    where = f"node {node_rank}, host {socket.gethostname()}"
    if failure.role != "ps":
        where = f"local rank {failure.local_rank}, {where}"
    lines = [
        f"pscore-run: {target} FAILED",
        f"  first failure: {failure.label} ({where}, pid {failure.proc.pid})",
        f"  {describe(failure.returncode)} at {when}",
    ]
    ends = [f"{r.label} {describe(r.returncode)}" for r in others if r.returncode]
    if ends:
        lines.append("  other ranks: " + ", ".join(ends))
    if tail:
        lines.append("  last lines of its stderr:")
        lines += ["    " + line for line in tail]
    else:
        lines.append("  its stderr was empty")
    return "\n".join(lines)
