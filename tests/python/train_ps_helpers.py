"""Helpers of the Trainer's parameter-server tests: a clean environment (no PSCORE_* or
TF_CONFIG of the caller's) and pscore-run on real processes."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pscore

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The package under test (the installed one in CI, the source tree with a dev build).
PYTHON_PATH = os.path.dirname(os.path.dirname(os.path.abspath(pscore.__file__)))
HANG_GUARD_S = 120


def environment(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PSCORE_", "TF_CONFIG"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PYTHON_PATH, os.environ.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def launch(args: list, cwd, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pscore.launch", *args],
        env=environment(**extra),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )


def write(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)
