"""`python -m pscore.bench.ctr`: a short real run of hybrid (with a real pserver) against both
DDP-on-gloo peers, its table and JSON (the numbers are not judged: benchmarks never fail on
them), and its refusal of an unknown peer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pscore

# The package under test (the installed one in CI, the source tree with a dev build).
PYTHON = str(Path(pscore.__file__).resolve().parents[1])


def run_ctr(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([PYTHON, os.environ.get("PYTHONPATH", "")]))
    return subprocess.run(
        [sys.executable, "-m", "pscore.bench.ctr", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def test_a_short_run_prints_every_system_and_writes_json(tmp_path):
    out = tmp_path / "ctr.json"
    small = ["--rows", "2000", "--samples", "4000", "--batch", "64", "--steps", "3"]
    done = run_ctr(*small, "--warmup", "1", "--phases", "1", "--json", str(out))
    assert done.returncode == 0, done.stdout + done.stderr
    for label in ("pscore hybrid, 1 server", "DDP gloo, dense grads", "DDP gloo, sparse grads"):
        assert label in done.stdout
    result = json.loads(out.read_text())
    assert set(result["ratio"]) == {"ddp-gloo", "ddp-gloo-sparse"}
    assert all(len(t) == 3 and min(t) > 0 for t in result["step_seconds"].values())


def test_an_unknown_peer_is_named():
    done = run_ctr("--compare", "ddp-nccl")
    assert done.returncode != 0
    assert "no peer ddp-nccl" in done.stderr
