"""Hangs are not crashes: a rank stopped with SIGSTOP makes every other rank raise a
TimeoutError naming it within the group timeout plus a little; after SIGCONT the stopped rank
fails too (its peers gave up on the group) instead of resuming silently. The same for a
parameter-server shard that stops answering."""

import os
import signal
import time

import numpy as np
import pytest
from dist_helpers import run_ranks

import pscore

TIMEOUT = 3.0
WORLD = 3
VICTIM = WORLD - 1  # the rank that rank 0 stops
SLACK = 10.0  # a hang guard on this loaded machine, not a performance bound
OPS = {
    "allreduce": lambda: pscore.all_reduce(np.ones(1 << 16, dtype=np.float32)),
    # from the stopped rank: the others cannot finish without it
    "broadcast": lambda: pscore.broadcast(np.ones(1 << 16, dtype=np.float32), src=VICTIM),
    "barrier": pscore.barrier,
}


def _wait_file(path, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.02)


def _touch(path, text=""):
    with open(path, "w") as f:
        f.write(text)


def _stop(pid, timeout=30.0):
    """SIGSTOPs `pid` and returns once every thread of it is stopped (state T in /proc)."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/stat") as f:
                states.append(f.read().rsplit(")", 1)[1].split()[0])
        if all(state in "Tt" for state in states):
            return
        time.sleep(0.01)
    raise TimeoutError(f"pid {pid} did not stop within {timeout} s")


def _until_failure(op, limit=3):
    """Runs `op` until it raises, at most `limit` times: (calls that succeeded, exception type,
    message, seconds the failing call took). A call the stopped rank had already done its part
    of (it sent its data, or reached the barrier) may succeed; the next one cannot."""
    for done in range(limit):
        start = time.monotonic()
        try:
            OPS[op]()
        except (TimeoutError, ConnectionError) as e:
            return done, type(e).__name__, str(e), time.monotonic() - start
    return limit, "no error", "", 0.0


def stopped_rank(rank, _world, op, where, tmp):
    """VICTIM is stopped (by rank 0) inside `op` (`where` == "inside") or between calls
    ("between"); the others run `op` and must time out; the victim is resumed once they have."""
    victim = VICTIM
    _touch(f"{tmp}/pid-{rank}", str(os.getpid()))
    OPS[op]()  # connected and warm
    if rank == victim:
        _touch(f"{tmp}/victim-ready")
        if where == "between":
            _wait_file(f"{tmp}/resumed")  # stopped while it waits here
        result = _until_failure(op)  # "inside": stopped in its first call
        _touch(f"{tmp}/victim-done")
        return result
    if rank == 0:
        _wait_file(f"{tmp}/victim-ready")
        time.sleep(0.3)  # "inside": let the victim block in the collective
        with open(f"{tmp}/pid-{victim}") as f:
            victim_pid = int(f.read())
        _stop(victim_pid)
        _touch(f"{tmp}/stopped")
    _wait_file(f"{tmp}/stopped")
    first = _until_failure(op)
    again = _until_failure(op, limit=1)  # the group is broken: at once
    _touch(f"{tmp}/failed-{rank}")
    if rank == 0:
        for r in range(1, victim):
            _wait_file(f"{tmp}/failed-{r}")
        _touch(f"{tmp}/resumed")
        os.kill(victim_pid, signal.SIGCONT)
    _wait_file(f"{tmp}/victim-done")  # stay alive while the victim resumes
    return first, again


# The root of a broadcast does not wait for anyone, so it is stopped between calls only.
CASES = [("allreduce", "inside"), ("allreduce", "between"), ("barrier", "inside"),
         ("barrier", "between"), ("broadcast", "between")]  # fmt: skip


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize(("op", "where"), CASES)
def test_stopped_rank_is_named_and_fails_after_resume(tmp_path, transport, op, where):
    results = run_ranks(
        stopped_rank, WORLD, op, where, str(tmp_path), transport=transport, timeout=TIMEOUT
    )
    for rank in range(VICTIM):
        (done, kind, msg, elapsed), (_, again_kind, again_msg, again_s) = results[rank]
        print(
            f"{transport} {op} {where}: rank {rank} {kind} after {elapsed:.2f} s, next call "
            f"after {again_s * 1e3:.1f} ms: {msg}"
        )
        assert kind == "TimeoutError", (rank, kind, msg)
        assert f"rank {VICTIM}" in msg and op in msg, msg
        assert elapsed < TIMEOUT + SLACK, (rank, elapsed, msg)
        assert again_kind != "no error" and "broken" in again_msg, (again_kind, again_msg)
        assert again_s < 0.5, again_s  # no second wait for the accounts (0.75 s)
    done, kind, msg, elapsed = results[VICTIM]
    print(f"{transport} {op} {where}: victim {kind} after {done} calls, {elapsed:.2f} s: {msg}")
    assert kind != "no error", "the resumed rank's collectives succeeded on a broken group"
    assert done <= min(results[r][0][0] for r in range(VICTIM)), "it finished a call they failed"
    assert elapsed < TIMEOUT + SLACK, (elapsed, msg)


PS_TIMEOUT = 3.0
DENSE = 32768  # 128 KB: split over both shards
TIMED_OUT_DELTA = (1000, 10000)  # by worker; sums of any subset tell each apart


def _push(client, delta):
    client.push("w", np.full(DENSE, -delta, np.float32))  # SGD(lr=1) adds delta


def _timed_out(call):
    start = time.monotonic()
    try:
        call()
    except TimeoutError as e:
        return type(e), str(e), time.monotonic() - start
    return None, "", time.monotonic() - start


def test_stopped_pserver_shard_times_out_then_serves():
    from test_ps_support import address_from_banner, pserver_process

    from pscore.ps import SGD, PSClient

    procs = [
        pserver_process("--port", "0", "--shard", str(s), "--num-shards", "2", "--num-workers", "2")
        for s in range(2)
    ]
    addrs = [address_from_banner(p.banner) for p in procs]
    clients = []
    try:
        clients = [PSClient(addrs, worker_id=w, timeout=PS_TIMEOUT) for w in range(2)]
        for c in clients:
            c.create_dense("w", (DENSE,), initializer="zeros", optimizer=SGD(lr=1.0))
        acked = 0
        for step in range(5):
            for c in clients:
                _push(c, step + 1)
                acked += step + 1
        _stop(procs[1].pid)
        pushes = [
            _timed_out(lambda c=c, w=w: _push(c, TIMED_OUT_DELTA[w])) for w, c in enumerate(clients)
        ]
        pulls = [_timed_out(lambda c=c: c.pull("w")) for c in clients]
        os.kill(procs[1].pid, signal.SIGCONT)
        for kind, msg, elapsed in pushes + pulls:
            print(f"stopped shard: {kind.__name__ if kind else None} after {elapsed:.2f} s: {msg}")
            assert kind is pscore.TimeoutError, msg
            assert "shard 1" in msg and addrs[1] in msg, msg
            assert elapsed < PS_TIMEOUT + SLACK, (elapsed, msg)
        # resumed: the old connections and a new one are served, and each acknowledged push
        # counts once; a timed-out one counts at most once on each shard
        for c in clients:
            _push(c, 1)
            acked += 1
        with PSClient(addrs, worker_id=-1, timeout=30) as fresh:
            values = fresh.pull("w")
        subsets = {0, TIMED_OUT_DELTA[0], TIMED_OUT_DELTA[1], sum(TIMED_OUT_DELTA)}
        got = {int(v) for v in np.unique(values)}
        print(f"acknowledged sum {acked}, values {sorted(got)}")
        assert np.all(values == np.round(values)) and all(v - acked in subsets for v in got), got
        assert np.array_equal(clients[0].pull("w"), values)
    finally:
        for c in clients:
            c.close()
        for p in procs:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
