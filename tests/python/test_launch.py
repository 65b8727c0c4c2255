"""pscore-run: the environment each rank sees, rendezvous through it, failing fast, signals."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import pscore.errors

PYTHON_PATH = os.path.dirname(os.path.dirname(os.path.abspath(pscore.errors.__file__)))


def launcher_env(extra_path: str = "") -> dict:
    paths = [PYTHON_PATH, extra_path, os.environ.get("PYTHONPATH", "")]
    return dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))


def write_script(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def run_launcher(args, tmp_path, timeout=60, extra_path=""):
    return subprocess.run(
        [sys.executable, "-m", "pscore.launch", *args],
        env=launcher_env(extra_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


REPORT = """
    import json, os, sys
    names = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT", "PSCORE_RANK", "PSCORE_WORLD_SIZE", "PSCORE_MASTER_PORT",
             "PSCORE_JOB_ID", "OMP_NUM_THREADS"]
    info = {n: os.environ.get(n) for n in names}
    info["argv"] = sys.argv[1:]
    with open(f"rank{os.environ['RANK']}.json", "w") as f:
        json.dump(info, f)
"""


def test_ranks_get_the_environment(tmp_path):
    script = write_script(tmp_path, "report.py", REPORT)
    result = run_launcher(["-n", "3", script, "--lr", "0.1"], tmp_path)
    assert result.returncode == 0, result.stderr
    infos = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(3)]
    ports = {i["MASTER_PORT"] for i in infos}
    assert len(ports) == 1 and int(ports.pop()) > 0
    assert len({i["PSCORE_JOB_ID"] for i in infos}) == 1
    for r, info in enumerate(infos):
        assert info["RANK"] == info["PSCORE_RANK"] == info["LOCAL_RANK"] == str(r)
        assert info["WORLD_SIZE"] == info["LOCAL_WORLD_SIZE"] == info["PSCORE_WORLD_SIZE"] == "3"
        assert info["MASTER_ADDR"] == "127.0.0.1"
        assert info["PSCORE_MASTER_PORT"] == info["MASTER_PORT"]
        assert info["OMP_NUM_THREADS"] == "1"
        assert info["argv"] == ["--lr", "0.1"]


def test_module_form_and_fixed_port(tmp_path):
    write_script(tmp_path, "report_mod.py", REPORT)
    result = run_launcher(
        ["-n", "2", "--master-port", "23456", "-m", "report_mod", "x"],
        tmp_path,
        extra_path=str(tmp_path),
    )
    assert result.returncode == 0, result.stderr
    for r in range(2):
        info = json.loads((tmp_path / f"rank{r}.json").read_text())
        assert info["MASTER_PORT"] == "23456" and info["argv"] == ["x"]


def test_ranks_rendezvous_through_env(tmp_path):
    """Each rank discovers the job from the environment and meets the others via env://."""
    script = write_script(
        tmp_path,
        "meet.py",
        """
        from pscore.cluster import discover
        from pscore.store import create_store
        env = discover()
        assert env.source == "pscore", env
        store = create_store("env://", timeout=30)
        store.set(f"hello/{env.rank}", str(env.rank))
        store.wait([f"hello/{r}" for r in range(env.world_size)])
        store.add("done", 1)
        if env.rank == 0:  # the master's store must outlive the others' last calls
            store.wait([f"bye/{r}" for r in range(1, env.world_size)])
            assert store.get("done") == str(env.world_size).encode()
        else:
            store.set(f"bye/{env.rank}", "")
        """,
    )
    result = run_launcher(["-n", "3", script], tmp_path)
    assert result.returncode == 0, result.stderr


def test_a_failing_rank_stops_the_others_and_sets_the_exit_code(tmp_path):
    script = write_script(
        tmp_path,
        "fail.py",
        """
        import os, sys, time
        rank = int(os.environ["RANK"])
        with open(f"pid{rank}", "w") as f:
            f.write(str(os.getpid()))
        if rank == 1:
            while not all(os.path.exists(f"pid{r}") for r in range(3)):
                time.sleep(0.01)
            sys.exit(7)
        time.sleep(120)
        """,
    )
    result = run_launcher(["-n", "3", script], tmp_path, timeout=60)
    assert result.returncode == 7
    assert "rank 1 (pid" in result.stderr and "exited with code 7" in result.stderr
    assert "stopping the other 2 rank(s)" in result.stderr
    for r in (0, 2):
        assert not pid_alive(int((tmp_path / f"pid{r}").read_text()))


def test_a_rank_killed_by_a_signal(tmp_path):
    script = write_script(
        tmp_path,
        "kill.py",
        """
        import os, signal, time
        if os.environ["RANK"] == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(120)
        """,
    )
    result = run_launcher(["-n", "2", script], tmp_path)
    assert result.returncode == 128 + signal.SIGKILL
    assert "rank 0" in result.stderr and "was killed by SIGKILL" in result.stderr


def test_a_rank_ignoring_sigterm_is_killed_after_the_grace_period(tmp_path):
    script = write_script(
        tmp_path,
        "stubborn.py",
        """
        import os, signal, sys, time
        rank = int(os.environ["RANK"])
        if rank == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            with open("pid0", "w") as f:
                f.write(str(os.getpid()))
            time.sleep(120)
        while not os.path.exists("pid0"):
            time.sleep(0.01)
        sys.exit(3)
        """,
    )
    result = run_launcher(["-n", "2", "--grace-period", "0.3", script], tmp_path)
    assert result.returncode == 3
    assert not pid_alive(int((tmp_path / "pid0").read_text()))


def test_sigterm_to_the_launcher_is_forwarded(tmp_path):
    script = write_script(
        tmp_path,
        "sleep.py",
        """
        import os, time
        with open(f"pid{os.environ['RANK']}", "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
        """,
    )
    launcher = subprocess.Popen(
        [sys.executable, "-m", "pscore.launch", "-n", "2", script],
        env=launcher_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"pid{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and launcher.poll() is None
        time.sleep(0.02)
    launcher.send_signal(signal.SIGTERM)
    _, err = launcher.communicate(timeout=30)
    assert launcher.returncode == 128 + signal.SIGTERM
    assert "rank" not in err  # ranks stopped on request are not reported as failures
    for r in range(2):
        assert not pid_alive(int((tmp_path / f"pid{r}").read_text()))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "0", "x.py"], "-n must be >= 1"),
        (["-n", "2", "--master-port", "-4", "x.py"], "out of range"),
    ],
)
def test_bad_arguments(tmp_path, args, message):
    result = run_launcher(args, tmp_path)
    assert result.returncode == 2 and message in result.stderr


def test_missing_script_fails_with_pythons_code(tmp_path):
    result = run_launcher(["-n", "2", "does_not_exist.py"], tmp_path)
    assert result.returncode == 2
    assert "can't open file" in result.stderr and "rank " in result.stderr
