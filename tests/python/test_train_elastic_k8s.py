"""Elastic training outside pscore-run: the test starts every process itself from TF_CONFIG, as
the Kubeflow training operator's pods run (one host, loopback). A killed worker's replacement,
started with the dead worker's exact environment (same task index, no PSCORE_RESTART_COUNT, as
a restarted pod), joins the running job; with PSCORE_ELASTIC_GONE_AFTER and no replacement the
others mark it gone and the job shrinks; a worker stopped (SIGSTOP) until it was marked gone
fails with a clear error once it goes on. Every run ends with test_train_elastic.py's accuracy
and server step bounds."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
from conftest import free_port
from test_train_elastic import SCRIPT, bound, server_steps, shrunk_server_steps
from train_ps_helpers import HANG_GUARD_S, environment, write

torch = pytest.importorskip("torch")

JOB_ID = "elastic-k8s"
GONE_AFTER_S = "3"
# Regrouping, sync rounds, both (hybrid). ps-async, ssp and hogwild pass too when added (about
# 10 s each here); hogwild shares one machine's memory, so its workers are never separate pods.
STRATEGIES = ["allreduce", "ps-sync", "hybrid"]
KILL = "os.kill(os.getpid(), signal.SIGKILL)"
assert KILL in SCRIPT
# The worker stops itself with the signal the test names (SIGKILL unless told).
STOPPING_SCRIPT = SCRIPT.replace(KILL, "os.kill(os.getpid(), signal.Signals[sys.argv[6]])")


def addresses(count: int) -> list[str]:
    return [f"127.0.0.1:{free_port()}" for _ in range(count)]


def slurm_env(procid: int, tasks: int, master_port: int) -> dict:
    """What slurmd sets for task `procid` of a one-node step (block distribution)."""
    return {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_NTASKS": str(tasks),
        "SLURM_TASKS_PER_NODE": str(tasks),
        "SLURM_DISTRIBUTION": "block",
        "SLURM_PROCID": str(procid),
        "SLURM_NODEID": "0",
        "SLURM_LOCALID": str(procid),
        "MASTER_PORT": str(master_port),
    }


class Job:
    """A chief, 2 workers and (for a PS strategy) a ps task, each a process started from its
    TF_CONFIG (or, `slurm`, from Slurm's variables on one node); the chief serves the job's
    store unless PSCORE_STORE is given in `extra`."""

    def __init__(self, tmp_path, strategy: str, kill_rank: int, kill_step: int, how="SIGKILL",
                 slurm=False, **extra: str):  # fmt: skip
        self.tmp_path, self.strategy, self.slurm = tmp_path, strategy, slurm
        self.cluster = {"chief": addresses(1), "worker": addresses(2)}
        self.tasks = [("chief", 0), ("worker", 0), ("worker", 1)]  # ranks 0, 1, 2
        if strategy not in ("allreduce", "hogwild"):
            self.cluster["ps"] = addresses(1)
            self.tasks.append(("ps", 0))
            extra.setdefault("PSCORE_NUM_SERVERS", "1")
        self.master_port = free_port()
        script = write(tmp_path, "elastic.py", STOPPING_SCRIPT)
        marker = str(tmp_path / "stopped")
        self.argv = [sys.executable, script, strategy, "1", str(kill_rank), str(kill_step)]
        self.argv += [marker, how]
        groups = "3" if strategy in ("ps-async", "ssp") else "1"
        self.extra = {"PSCORE_WORKER_GROUPS": groups, "PSCORE_JOB_ID": JOB_ID, **extra}
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def env(self, task: tuple[str, int]) -> dict:
        if self.slurm:
            procid = self.tasks.index(task)
            return environment(**slurm_env(procid, len(self.tasks), self.master_port), **self.extra)
        config = {"cluster": self.cluster, "task": {"type": task[0], "index": task[1]}}
        return environment(TF_CONFIG=json.dumps(config), **self.extra)

    def start(self, task: tuple[str, int], env: dict | None = None) -> subprocess.Popen:
        log = self.tmp_path / f"{task[0]}{task[1]}-{len(self.procs)}.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(self.argv, env=env or self.env(task), stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        self.procs.append((str(log), proc))
        return proc

    def start_all(self) -> dict:
        return {task: self.start(task) for task in self.tasks}

    def wait(self, proc: subprocess.Popen) -> int:
        try:
            return proc.wait(timeout=HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"a process hung; logs:\n{self.report()}")

    def wait_for_line(self, text: str) -> None:
        """Until some process printed `text` (a hang guard, not a timing)."""
        deadline = time.monotonic() + HANG_GUARD_S
        while not any(text in self.output(log) for log, _ in self.procs):
            if time.monotonic() > deadline:
                pytest.fail(f"no process printed {text!r}; logs:\n{self.report()}")
            time.sleep(0.2)

    @staticmethod
    def output(log: str) -> str:
        with open(log) as f:
            return f.read()

    def report(self) -> str:
        return "\n".join(f"== {log}\n{self.output(log)[-3000:]}" for log, _ in self.procs)

    def stop_all(self) -> None:
        for _, proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture
def jobs():
    made: list[Job] = []
    yield made
    for job in made:
        job.stop_all()


def results(job: Job) -> dict[int, tuple[float, int]]:
    """(accuracy, server step) by the rank that printed them."""
    found = {}
    for line in job.report().splitlines():
        if line.startswith("worker ") and " accuracy " in line:
            words = line.split()
            found[int(words[1])] = float(words[3]), int(words[-1])
    return found


def drawn(what: str) -> tuple[int, int]:
    """A non-chief worker and a step (the chief serves the job's store: it must stay)."""
    draw = random.Random(f"{what} k8s")
    return draw.choice([1, 2]), draw.randrange(2, 38)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_a_replacement_with_the_dead_workers_environment_joins(tmp_path, jobs, strategy):
    kill_rank, kill_step = drawn(f"replace {strategy}")
    job = Job(tmp_path, strategy, kill_rank, kill_step)
    jobs.append(job)
    procs = job.start_all()
    victim = job.tasks[kill_rank]
    assert job.wait(procs[victim]) == -signal.SIGKILL, job.report()
    procs[victim] = job.start(victim, job.env(victim))  # what a restarted pod gets
    assert "PSCORE_RESTART_COUNT" not in job.env(victim)
    assert [job.wait(p) for p in procs.values()] == [0] * len(procs), job.report()
    text = job.report()
    assert f"killing worker {kill_rank} after its step {kill_step}" in text
    if strategy in ("allreduce", "hybrid"):  # the survivors hand the replacement their state
        assert f"worker 0 goes on in group generation 2 from global step {kill_step}" in text
    else:
        epoch, batch = divmod(kill_step, 20)
        assert f"worker {kill_rank} rejoins the job at epoch {epoch}, batch {batch}" in text
    found = results(job)
    assert sorted(found) == [0, 1, 2], text
    for accuracy, step in found.values():
        assert accuracy >= bound(strategy), text
        assert step == server_steps(strategy), text


@pytest.mark.parametrize("strategy", ["allreduce", "ps-sync"])
def test_with_gone_after_a_dead_worker_is_marked_gone_and_the_job_shrinks(tmp_path, jobs, strategy):
    """The chief serves the store and, with ps-sync, counts the gone worker at the job's end.
    allreduce's job runs from Slurm's variables."""
    kill_rank, kill_step = drawn(f"shrink {strategy}")
    slurm = strategy == "allreduce"
    job = Job(tmp_path, strategy, kill_rank, kill_step, slurm=slurm,
              PSCORE_ELASTIC_GONE_AFTER=GONE_AFTER_S)  # fmt: skip
    jobs.append(job)
    procs = job.start_all()
    rcs = {task: job.wait(p) for task, p in procs.items()}
    victim = job.tasks[kill_rank]
    assert rcs.pop(victim) == -signal.SIGKILL, job.report()
    assert set(rcs.values()) == {0}, job.report()
    text = job.report()
    assert f"elastic worker {kill_rank} sent no liveness beat for 3 s" in text
    if strategy == "allreduce":
        assert f"worker 0 goes on in group generation 2 from global step {kill_step}" in text
    else:
        assert f"ps task (shard 0): worker {kill_rank} is gone" in text
    found = results(job)
    assert sorted(found) == sorted({0, 1, 2} - {kill_rank}), text
    for accuracy, step in found.values():
        assert accuracy >= bound(strategy), text
        assert step == shrunk_server_steps(strategy, kill_rank, kill_step), text


def test_a_stopped_worker_marked_gone_fails_clearly_when_it_goes_on(tmp_path, jobs):
    """ps-sync: the ps task marks the stopped worker gone and closes its sync rounds without
    it. The store outlives the job (PSCORE_STORE, as a pscore-store would), so the worker that
    goes on after the others ended still reads that it is gone."""
    from pscore.store import TCPStore

    stop_rank, stop_step = drawn("stop ps-sync")
    store = TCPStore("127.0.0.1", 0, is_master=True, job_id=JOB_ID)
    url = f"tcp://127.0.0.1:{store.port}"
    job = Job(tmp_path, "ps-sync", stop_rank, stop_step, "SIGSTOP", PSCORE_STORE=url,
              PSCORE_ELASTIC_GONE_AFTER=GONE_AFTER_S)  # fmt: skip
    jobs.append(job)
    procs = job.start_all()
    job.wait_for_line(f"elastic worker {stop_rank} sent no liveness beat for 3 s")
    stopped = procs.pop(job.tasks[stop_rank])
    assert [job.wait(p) for p in procs.values()] == [0, 0, 0], job.report()
    os.kill(stopped.pid, signal.SIGCONT)
    assert job.wait(stopped) == 1, job.report()
    text = job.report()
    gone = f"worker {stop_rank} was marked gone from the elastic job"
    assert gone in text and "cannot rejoin it: the job went on without it" in text
    found = results(job)
    assert sorted(found) == sorted({0, 1, 2} - {stop_rank}), text
    for accuracy, step in found.values():
        assert accuracy >= bound("ps-sync"), text
        assert step == shrunk_server_steps("ps-sync", stop_rank, stop_step), text


def test_only_a_rank_whose_beat_stood_still_is_marked_gone(monkeypatch):
    """The watcher's rule on a store of this process: a beat that moves, one that never began
    (a pod not started yet) and the unset variable mark nobody; a beat that stood still for
    PSCORE_ELASTIC_GONE_AFTER marks its rank."""
    from pscore.store import TCPStore
    from pscore.train import elastic, servers

    monkeypatch.setattr(elastic, "BEAT_S", 0.05)
    store = TCPStore("127.0.0.1", 0, is_master=True)
    job = elastic.ElasticJob(servers.JobEnd(store, "unused", False), 3)
    beat = lambda rank: store.add(f"{job.prefix}/beat/{rank}", 1)  # noqa: E731
    beat(1)  # rank 1 beat once, then stopped; rank 2 never beat

    def watch_until(done, guard_s: float = 30.0) -> float:
        """Beats rank 0 and looks, until done() (a hang guard); the seconds it took."""
        start = time.monotonic()
        while not done() and time.monotonic() - start < guard_s:
            beat(0)
            job.mark_stalled([0, 1, 2])
            time.sleep(0.06)
        return time.monotonic() - start

    monkeypatch.delenv("PSCORE_ELASTIC_GONE_AFTER", raising=False)
    looks = iter(range(10))
    watch_until(lambda: next(looks, None) is None)
    assert job.gone() == set()
    monkeypatch.setenv("PSCORE_ELASTIC_GONE_AFTER", "0.3")
    took = watch_until(job.gone)
    assert job.gone() == {1}
    assert took >= 0.3
