"""`python -m pscore.bench train`: a short real run of the allreduce strategy against DDP on
gloo prints the table rows and writes them to JSON; a strategy that cannot run is an error row,
not a crash. No timing is asserted."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("sklearn")

from pscore.bench import __main__ as bench_main
from pscore.bench import train

PYTHON_PATH = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(train.__file__))))


def test_train_is_listed():
    assert bench_main.BENCHMARKS["train"][0] == "train"


def test_a_short_run_prints_and_writes_every_row(tmp_path):
    out = tmp_path / "out.json"
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([PYTHON_PATH, os.environ.get("PYTHONPATH", "")])
    )
    command = [sys.executable, "-m", "pscore.bench", "train", "--strategies", "allreduce"]
    command += ["--compare", "ddp-gloo", "--workloads", "digits", "--repeats", "1"]
    command += ["--max-epochs", "1", "--json", str(out)]
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {line.split()[0]: line.split() for line in result.stdout.splitlines() if line[:1] == " "}
    assert set(rows) == {"allreduce", "ddp-gloo"}, result.stdout
    assert "error" not in result.stdout
    report = json.loads(out.read_text())
    assert report["benchmark"] == "train" and report["workers"] == 2
    entries = {e["system"]: e for e in report["workloads"]["digits"]}
    assert set(entries) == {"allreduce", "ddp-gloo"}
    for e in entries.values():
        assert e["epochs"] == 1 and 0.5 < e["accuracy"] <= 1 and e["samples_per_s"] > 0
    assert entries["ddp-gloo"]["samples_per_s_vs_ddp_gloo"] == 1.0


def test_a_strategy_that_cannot_start_is_an_error_row(capsys):
    args = argparse.Namespace(
        strategies=["no-such-strategy"],
        compare=[],
        workloads=["digits"],
        workers=2,
        repeats=1,
        max_epochs=1,
        timeout=30,
    )
    results = train.run(args)
    error = results["digits"]["no-such-strategy"]["error"]
    assert "unknown strategy 'no-such-strategy'" in error
    entries = train._table("digits", results["digits"])
    assert entries[0]["error"] == error
    printed = capsys.readouterr().out
    assert "no-such-strategy" in printed and "error" in printed


def test_timeline_mode_runs_each_strategy_with_the_timeline_on():
    args = argparse.Namespace(strategies=["allreduce"], compare=["ddp-gloo"], timeline=True)
    assert train._systems("digits", args) == ["allreduce+timeline", "ddp-gloo"]
