"""The getting-started page's two programs run as the page says and print what it shows:
examples/quickstart_collective.py under pscore-run, and examples/quickstart_ps.py against a
pscore-store and a pserver started from the shell."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
from train_ps_helpers import ROOT, environment, launch

EXAMPLES = os.path.join(ROOT, "examples")


def _launch(script: str, **extra: str) -> list[str]:
    """`pscore-run -n 2 examples/SCRIPT`: its lines without the rank prefixes, sorted."""
    run = launch(["-n", "2", os.path.join(EXAMPLES, script)], ROOT, **extra)
    assert run.returncode == 0, run.stderr
    return sorted(re.sub(r"^\[rank\d\]: ", "", line) for line in run.stdout.splitlines())


def _start(module: str, *args: str, env: dict, ready: str) -> tuple[subprocess.Popen, str]:
    """Starts `python -m MODULE ARGS` and returns it with its first line, which holds `ready`."""
    proc = subprocess.Popen(
        [sys.executable, "-m", module, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    line = proc.stdout.readline()
    if ready not in line:
        proc.kill()
        pytest.fail(f"{module} did not start: {line!r} {proc.communicate(timeout=30)[1]}")
    return proc, line


def _stop(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=60)
    finally:
        proc.kill()


def test_first_collective_sums_the_ranks():
    assert _launch("quickstart_collective.py") == [
        "rank 0 of 2: [3. 3. 3. 3.]",
        "rank 1 of 2: [3. 3. 3. 3.]",
    ]


def test_first_ps_job_applies_the_mean_gradient():
    store, line = _start("pscore.store.server", "--port", "0", env=environment(), ready="serving")
    try:
        url = line.split("serving ", 1)[1].strip()
        env = environment(PSCORE_STORE=url)
        server, _ = _start(
            "pscore.ps.pserver",
            "--shard",
            "0",
            "--num-shards",
            "1",
            "--num-workers",
            "2",
            env=env,
            ready="serving on",
        )
        try:
            lines = _launch("quickstart_ps.py", PSCORE_STORE=url)
        finally:
            assert _stop(server) == 0
    finally:
        assert _stop(store) == 0
    # Each step a round applies SGD(lr=0.1) to the mean of the gradients 1 and 2.
    steps = [re.fullmatch(r"worker (\d), step (\d): w = \[(.*)\]", line) for line in lines]
    assert all(steps), lines
    assert sorted((int(m[1]), int(m[2])) for m in steps) == [
        (w, s) for w in (0, 1) for s in (0, 1, 2)
    ]
    for m in steps:
        assert [float(v) for v in m[3].split()] == pytest.approx([-0.15 * (int(m[2]) + 1)] * 4)
