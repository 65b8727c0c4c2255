"""Runs a command in a fresh process (real launchers, real interpreter exit) and checks that it
ended cleanly: exit code 0 and no C++ abort at exit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pscore

PYTHON_PATH = os.path.dirname(os.path.dirname(os.path.abspath(pscore.__file__)))
ABORT_AT_EXIT = "terminate called"


def child_env(**extra: str) -> dict:
    """This environment, with pscore importable and no pscore/torchrun variables of our own."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PSCORE_", "TORCHELASTIC_"))
        and k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    }
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PYTHON_PATH, env.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def write_script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def run_clean(args: list[str], cwd, timeout: float = 120, **env: str) -> str:
    """Runs args; fails the test unless it exits 0 with no abort. Returns its output."""
    proc = subprocess.run(
        args,
        cwd=cwd,
        env=child_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{args} exited {proc.returncode}:\n{output[-6000:]}"
    assert ABORT_AT_EXIT not in output, f"{args} aborted at exit:\n{output[-6000:]}"
    return output


def pscore_run(script: str, nproc: int, cwd, *args: str, timeout: float = 120) -> str:
    """The script under pscore-run with nproc ranks; checked by run_clean."""
    launcher = [sys.executable, "-m", "pscore.launch", "-n", str(nproc), script, *args]
    return run_clean(launcher, cwd, timeout)
