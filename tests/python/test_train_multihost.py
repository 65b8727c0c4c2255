"""A whole Trainer job on three hosts: network namespaces with their own addresses on one link
(netns_helpers; skipped where namespaces cannot be made), run as docs/train.md ("Roles and
clusters") tells a user to on three machines, with a token on every process:

- the servers' host (10.78.0.1) serves the job's store (`pscore-store`) and runs the ps task
  (the same `examples/train_digits.py` with PSCORE_ROLE=ps), which must bind that address;
- each workers' host (10.78.0.2, 10.78.0.3) runs `pscore-run --nnodes 2 --node-rank i` with
  PSCORE_STORE and PSCORE_NUM_SERVERS.

Every process exits 0. ps-sync must end with the weights of the same job on one host
(`pscore-run --workers 2 --servers 1`, run beside it); before its workers start, a worker and a
PSClient with a wrong token are refused at once with errors naming the store or the shard, and
the servers log the refusals and serve the job all the same. ps-async must pass docs/train.md's
bound."""

from __future__ import annotations

import functools
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import netns_helpers
import pytest
from exit_helpers import ABORT_AT_EXIT, child_env

pytest.importorskip("torch")  # the example's
pytest.importorskip("sklearn")

three_hosts = netns_helpers.hosts_fixture(3, subnet="10.78.0")

TOKEN = "multihost-train-secret"
CONNECT_TIMEOUT_S = 60  # the Trainer's wait for the servers (strategy_args connect_timeout)
HANG_GUARD_S = 180  # a hang guard only: the job takes seconds
STORE_PORT, MASTER_PORT = 29400, 29500  # each host is a fresh namespace: every port is free
EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "train_digits.py")
ACCURACY = re.compile(r"test accuracy ([0-9.]+)")
DIGEST = re.compile(r"worker (\d+) weights ([0-9a-f]{64})")


class Task:
    """A process whose output is collected on threads, so that a line can be awaited with a
    deadline and a dead process is never read from forever."""

    def __init__(self, name: str, argv: list[str], env: dict):
        self.name = name
        self.proc = subprocess.Popen(
            argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [
            threading.Thread(target=self._pump, args=(s, lines), daemon=True)
            for s, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))
        ]
        for r in self._readers:
            r.start()

    @staticmethod
    def _pump(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    def text(self) -> str:
        return "".join(self.out) + "".join(self.err)

    def wait_for(self, pattern: str) -> re.Match:
        deadline = time.monotonic() + HANG_GUARD_S
        while time.monotonic() < deadline:
            found = re.search(pattern, "".join(self.out))
            if found:
                return found
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        pytest.fail(f"{self.name} never printed {pattern!r}:\n{self.text()[-3000:]}")

    def finish(self) -> int:
        try:
            self.proc.wait(HANG_GUARD_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"{self.name} hung past {HANG_GUARD_S} s:\n{self.text()[-3000:]}")
        for r in self._readers:
            r.join(10)
        return self.proc.returncode


def _accuracy(task: Task) -> float:
    found = ACCURACY.search("".join(task.out))
    assert found, task.text()[-3000:]
    return float(found.group(1))


def _digests(tasks: list[Task]) -> dict[int, str]:
    """Each worker's SHA-256 of its final weights (the example's --digest)."""
    return {int(r): d for t in tasks for r, d in DIGEST.findall("".join(t.out))}


def _single_host(job_args: list[str]) -> Task:
    """The same job on this host over loopback: pscore-run serves the store and the ps task."""
    launcher = [sys.executable, "-m", "pscore.launch", "--workers", "2", "--servers", "1"]
    return Task("single-host run", [*launcher, EXAMPLE, *job_args], child_env())


def _wrong_token_attempts(worker_host, job_env: dict, shard: str, job_args: list) -> None:
    """A worker (the example under pscore-run) and a bare PSClient on a worker host, both with
    a wrong token: each fails at once (not after the Trainer's connect timeout), naming the
    server it tried and the token (the worker: "authentication with store at ... failed")."""
    wrong = {"PSCORE_AUTH_TOKEN": "not-the-job-token", "PSCORE_WORKER_GROUPS": "1"}  # 1 worker
    env = dict(job_env, **wrong)
    launcher = [sys.executable, "-m", "pscore.launch", "-n", "1"]
    started = time.monotonic()
    worker = Task("wrong-token worker", worker_host.command(*launcher, EXAMPLE, *job_args), env)
    client_code = (
        "import pscore\n"
        "try:\n"
        f"    pscore.PSClient(servers=[{shard!r}], connect_timeout=5)\n"
        "except Exception as e:\n"
        "    print(type(e).__name__, e)\n"
    )
    client = Task("wrong-token client", worker_host.command(sys.executable, "-c", client_code), env)
    assert client.finish() == 0, client.text()
    refused = f"Error shard 0 ({shard}) could not prove it knows this process's token (wrong "
    assert refused + "PSCORE_AUTH_TOKEN?)" in client.text(), client.text()
    assert worker.finish() != 0, worker.text()[-3000:]
    assert time.monotonic() - started < CONNECT_TIMEOUT_S, "the refusal was waited out"
    store = job_env["PSCORE_STORE"].removeprefix("tcp://")
    store = f"authentication with store at {store} failed (wrong PSCORE_AUTH_TOKEN?)"
    assert store in worker.text(), worker.text()[-3000:]


def _servers_host(host, job_env: dict, job_args: list[str]) -> tuple[Task, Task]:
    """The job's store and its one ps task (the example with PSCORE_ROLE=ps) on `host`."""
    serve = ["-m", "pscore.store.server", "--host", host.addr, "--port", str(STORE_PORT)]
    store = Task("pscore-store", host.command(sys.executable, *serve), job_env)
    ps_env = dict(job_env, PSCORE_ROLE="ps", PSCORE_SHARD="0", PSCORE_NUM_WORKERS="2")
    ps = Task("ps task", host.command(sys.executable, EXAMPLE, *job_args), ps_env)
    return store, ps


def _worker_hosts(hosts: list, job_env: dict, job_args: list[str]) -> list[Task]:
    """pscore-run on each worker host as one node of the workers, the first host's the master."""
    launcher = [sys.executable, "-m", "pscore.launch", "--nnodes", str(len(hosts)), "-n", "1"]
    master = ["--master-addr", hosts[0].addr, "--master-port", str(MASTER_PORT)]
    return [
        Task(
            f"worker host {i}",
            host.command(*launcher, *master, "--node-rank", str(i), EXAMPLE, *job_args),
            job_env,
        )
        for i, host in enumerate(hosts)
    ]


def _three_host_job(hosts: list, job_args: list, groups: int, before_workers=None) -> list:
    """Runs the job on `hosts` (servers' host first) to its end; `before_workers(job_env,
    shard address)` runs once the servers serve. Every process must exit 0. Returns the
    store's, the ps task's and the workers' Tasks."""
    servers_host, *worker_hosts = hosts
    store_url = f"tcp://{servers_host.addr}:{STORE_PORT}"
    job_env = child_env(
        PSCORE_AUTH_TOKEN=TOKEN,
        PSCORE_JOB_ID=f"multihost-{uuid.uuid4().hex[:8]}",
        PSCORE_STORE=store_url,
        PSCORE_NUM_SERVERS="1",
        PSCORE_WORKER_GROUPS=str(groups),
        PSCORE_TRANSPORT="tcp",  # the namespaces share /dev/shm; make the workers use the link
    )
    store, ps = _servers_host(servers_host, job_env, job_args)
    workers = []
    try:
        store.wait_for(re.escape(f"serving {store_url}"))
        shard = ps.wait_for(rf"serving on ({re.escape(servers_host.addr)}:\d+)").group(1)
        if before_workers is not None:
            before_workers(job_env, shard)
        workers = _worker_hosts(worker_hosts, job_env, job_args)
        for task in (*workers, ps):
            assert task.finish() == 0, (task.name, task.text()[-3000:])
    finally:
        for task in (*workers, ps):
            if task.proc.poll() is None:
                task.proc.kill()
        store.proc.send_signal(signal.SIGTERM)
    assert store.finish() == 0, store.text()[-3000:]
    tasks = [store, ps, *workers]
    assert not [t.name for t in tasks if ABORT_AT_EXIT in t.text()], [t.text() for t in tasks]
    # Both workers pulled the servers' final weights.
    digests = _digests(workers)
    assert sorted(digests) == [0, 1] and len(set(digests.values())) == 1, digests
    return tasks


def test_ps_sync_on_three_hosts_ends_as_on_one_and_refuses_a_wrong_token(three_hosts):
    job_args = ["--strategy", "ps-sync", "--digest"]
    single = _single_host(job_args)
    try:
        refusals = functools.partial(_wrong_token_attempts, three_hosts[2], job_args=job_args)
        store, ps, *workers = _three_host_job(three_hosts, job_args, 1, refusals)
        assert single.finish() == 0, single.text()[-3000:]
    finally:
        if single.proc.poll() is None:
            single.proc.kill()
    # ps-sync is deterministic: the servers apply the mean of the same two gradients each round,
    # so three hosts end with one host's weights, bit for bit.
    assert _accuracy(workers[0]) == _accuracy(single) >= 0.95, (workers[0].out, single.out)
    assert _digests(workers) == _digests([single]), (workers[0].out, single.out)
    # The servers logged the refused connections, naming the host they came from.
    refused = rf"dropped connection from {re.escape(three_hosts[2].addr)}:\d+: .*PSCORE_AUTH_TOKEN"
    assert re.search(rf"TCPStore server on port {STORE_PORT}: {refused}", store.text()), (
        store.text()
    )
    assert re.search(rf"parameter server shard 0 on port \d+: {refused}", ps.text()), ps.text()


def test_ps_async_on_three_hosts(three_hosts):
    """Every worker its own group; asynchronous, so docs/train.md's bound rather than one
    host's figure."""
    job_args = ["--strategy", "ps-async", "--epochs", "20", "--digest"]
    _, _, chief, _ = _three_host_job(three_hosts, job_args, groups=2)
    assert _accuracy(chief) >= 0.95, chief.text()[-3000:]
