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
from pscore.launch import affinity, cli, launcher
from pscore.launch.launcher import free_port

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
             "PSCORE_JOB_ID", "OMP_NUM_THREADS", "GROUP_RANK", "GROUP_WORLD_SIZE",
             "PYTHONUNBUFFERED"]
    info = {n: os.environ.get(n) for n in names}
    info["argv"] = sys.argv[1:]
    with open(f"rank{os.environ['RANK']}.json", "w") as f:
        json.dump(info, f)
"""


def test_ranks_get_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)  # conftest sets it; the launcher must
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
        assert info["OMP_NUM_THREADS"] == info["PYTHONUNBUFFERED"] == "1"
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
    launcher_proc = subprocess.Popen(
        [sys.executable, "-m", "pscore.launch", "-n", "2", script],
        env=launcher_env(),
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"pid{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and launcher_proc.poll() is None
        time.sleep(0.02)
    launcher_proc.send_signal(signal.SIGTERM)
    _, err = launcher_proc.communicate(timeout=30)
    assert launcher_proc.returncode == 128 + signal.SIGTERM
    assert "rank" not in err  # ranks stopped on request are not reported as failures
    for r in range(2):
        assert not pid_alive(int((tmp_path / f"pid{r}").read_text()))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "0", "x.py"], "-n must be >= 1"),
        (["-n", "2", "--master-port", "-4", "x.py"], "--master-port -4 is out of range"),
        (["--nnodes", "2", "-n", "1", "x.py"], "--nnodes 2 needs --master-addr"),
        (["--nnodes", "1:4", "x.py"], "pscore-run is not elastic"),
        (["--nnodes", "0", "x.py"], "--nnodes must be >= 1"),
        (["--nnodes", "two", "x.py"], "--nnodes 'two' is not a node count"),
        (["--nnodes", "2", "--node-rank", "2", "--master-addr", "h", "x.py"], "out of range"),
        (["--nnodes", "2", "--master-addr", "h", "--master-port", "0", "x.py"], "port must be"),
        (["--standalone", "--nnodes", "2", "x.py"], "cannot be combined with --nnodes"),
        (["--standalone", "--master-port", "5", "x.py"], "cannot be combined with --master-port"),
        (["--rdzv-endpoint", "h:1", "--master-addr", "h", "x.py"], "either --rdzv-endpoint"),
        (["--rdzv-endpoint", "h:port", "x.py"], "is not HOST[:PORT]"),
        (["--rdzv-backend", "etcd", "x.py"], "'etcd' is not supported"),
        (["--rdzv-endpoint", "no-such-host.invalid:0", "x.py"], "cannot pick a free port on"),
        (
            ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1", "x.py"],
            "give each node its --node-rank",
        ),
        (["--max-restarts", "-1", "x.py"], "--max-restarts must be >= 0, got -1"),
        (
            ["--nnodes", "2", "--node-rank", "0", "--master-addr", "h", "--elastic", "x.py"],
            "--elastic needs --workers N on one node",
        ),
        (["-m", "--no-python", "x"], "cannot be combined with --no-python"),
        (["--tee", "3", "x.py"], "--tee and --redirects say which streams go to --log-dir"),
        (["--log-dir", "d", "--tee", "4", "x.py"], "--tee '4': expected 0 (none)"),
        (["--log-dir", "d", "-r", "0:3,x", "x.py"], "'x' is not local_rank:value"),
        (["--log-dir", "/proc/no/such", "x.py"], "--log-dir /proc/no/such: cannot create it"),
        (["--grace-period", "-1", "x.py"], "--grace-period must be >= 0 seconds, got -1.0"),
        (["--grace-period", "nan", "x.py"], "--grace-period must be >= 0 seconds, got nan"),
        (["--grace_period", "-2", "x.py"], "--grace-period must be >= 0 seconds, got -2.0"),
    ],
)
def test_bad_arguments(args, message, capsys):
    assert launcher.main(args) == 2
    assert message in capsys.readouterr().err


def test_a_program_that_cannot_start(tmp_path):
    result = run_launcher(["-n", "2", "--no-python", "./does-not-exist"], tmp_path)
    assert result.returncode == 1
    assert "pscore-run: cannot start a rank: [Errno 2] No such file" in result.stderr


def test_missing_script_fails_with_pythons_code(tmp_path):
    result = run_launcher(["-n", "2", "does_not_exist.py"], tmp_path)
    assert result.returncode == 2
    assert "can't open file" in result.stderr and "rank " in result.stderr


def test_torchrun_spellings_and_the_node_layout(tmp_path):
    """Node 1 of 3 with 2 ranks each: global ranks 2 and 3 of 6, torchrun's underscore flags."""
    script = write_script(tmp_path, "report.py", REPORT)
    args = ["--nnodes", "3", "--node_rank", "1", "--rdzv_endpoint", "10.1.2.3", "--rdzv_id"]
    args += ["job7", "--rdzv_backend", "c10d", "--nproc_per_node", "2", script]
    result = run_launcher(args, tmp_path)
    assert result.returncode == 0, result.stderr
    for local in range(2):
        info = json.loads((tmp_path / f"rank{2 + local}.json").read_text())
        assert info["LOCAL_RANK"] == str(local) and info["LOCAL_WORLD_SIZE"] == "2"
        assert info["WORLD_SIZE"] == info["PSCORE_WORLD_SIZE"] == "6"
        assert info["GROUP_RANK"] == "1" and info["GROUP_WORLD_SIZE"] == "3"
        assert info["MASTER_ADDR"] == "10.1.2.3" and info["MASTER_PORT"] == "29400"
        assert info["PSCORE_JOB_ID"] == "job7"


@pytest.mark.parametrize(
    ("args", "environ", "job_id", "made_up"),
    [
        ([], {}, None, True),
        (["--nnodes", "2", "--master-addr", "h"], {}, "pscore-run@h:29500", True),
        (["--rdzv-id", "j7"], {"PSCORE_JOB_ID_ORIGIN": "pscore-run"}, "j7", False),
        ([], {"PSCORE_JOB_ID": "mine"}, "mine", False),
        ([], {"PSCORE_JOB_ID": "outer", "PSCORE_JOB_ID_ORIGIN": "pscore-run"}, "outer", True),
    ],
)
def test_a_made_up_job_id_is_marked_for_the_parameter_servers(args, environ, job_id, made_up):
    """PSClient() (pscore.ps.environment.job_id) ignores a job id pscore-run made up."""
    node = launcher.node_config(cli.parser().parse_args([*args, "x.py"]), environ)
    env = launcher.rank_environment(environ, node, 0)
    assert job_id is None or env["PSCORE_JOB_ID"] == job_id
    assert (env.get("PSCORE_JOB_ID_ORIGIN") == "pscore-run") == made_up


def test_standalone_picks_a_free_local_port(tmp_path):
    script = write_script(tmp_path, "report.py", REPORT)
    result = run_launcher(["--standalone", "--nproc-per-node", "2", script], tmp_path)
    assert result.returncode == 0, result.stderr
    infos = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert {i["MASTER_ADDR"] for i in infos} == {"127.0.0.1"}
    assert len({i["MASTER_PORT"] for i in infos}) == 1 and int(infos[0]["MASTER_PORT"]) > 0


NOISY = """
    import os, sys, threading
    rank = os.environ["RANK"]
    def spam(stream, name):
        for i in range(300):
            stream.write(f"{name} {rank} {i} " + rank * 3000 + " end\\n")
            stream.flush()
    threads = [threading.Thread(target=spam, args=(s, n))
               for s, n in ((sys.stdout, "out"), (sys.stderr, "err"))]
    for t in threads: t.start()
    for t in threads: t.join()
"""


def _check_prefixed(text: str, name: str, ranks: int) -> None:
    counts = {}
    for line in text.splitlines():
        if line.startswith("pscore-run:"):
            continue
        rank = line[len("[rank") : line.index("]")]
        assert line.startswith(f"[rank{rank}]: {name} {rank} "), line[:80]
        assert line.endswith(" " + rank * 3000 + " end"), line[:80]
        counts[rank] = counts.get(rank, 0) + 1
    assert counts == {str(r): 300 for r in range(ranks)}


def test_every_line_comes_out_whole_with_its_rank(tmp_path):
    """Three ranks write long lines to stdout and stderr at once: no line is cut or mixed."""
    script = write_script(tmp_path, "noisy.py", NOISY)
    for _ in range(3):
        result = run_launcher(["-n", "3", script], tmp_path)
        assert result.returncode == 0, result.stderr[-2000:]
        _check_prefixed(result.stdout, "out", 3)
        _check_prefixed(result.stderr, "err", 3)


def test_log_dir_tee_and_redirects(tmp_path):
    """--log-dir writes plain per-rank files; -r 1 keeps stdout off the console, --tee 0:2
    also files rank 0's stderr."""
    script = write_script(tmp_path, "noisy.py", NOISY)
    logs = tmp_path / "logs"
    result = run_launcher(
        ["-n", "2", "--log-dir", str(logs), "-r", "1", "--tee", "0:2", script], tmp_path
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout == ""
    _check_prefixed(result.stderr, "err", 2)
    for r in range(2):
        lines = (logs / f"rank_{r}" / "stdout.log").read_text().splitlines()
        assert len(lines) == 300 and all(line.startswith(f"out {r} ") for line in lines)
    assert len((logs / "rank_0" / "stderr.log").read_text().splitlines()) == 300
    assert not (logs / "rank_1" / "stderr.log").exists()


def test_log_dir_alone_files_and_shows_both_streams(tmp_path):
    script = write_script(tmp_path, "noisy.py", NOISY)
    logs = tmp_path / "logs"
    result = run_launcher(["-n", "1", "--log-dir", str(logs), script], tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    _check_prefixed(result.stdout, "out", 1)
    _check_prefixed(result.stderr, "err", 1)
    for name in ("stdout", "stderr"):
        assert len((logs / "rank_0" / f"{name}.log").read_text().splitlines()) == 300


def test_a_failed_run_ends_with_a_summary_of_the_first_failure(tmp_path):
    script = write_script(
        tmp_path,
        "raise.py",
        """
        import os, time
        if os.environ["RANK"] == "2":
            print("about to fail", flush=True)
            raise ValueError("bad batch 17 on rank 2")
        time.sleep(120)
        """,
    )
    result = run_launcher(["-n", "3", script], tmp_path)
    assert result.returncode == 1
    assert "[rank2]: about to fail" in result.stdout
    assert "[rank2]: ValueError: bad batch 17 on rank 2" in result.stderr
    summary = result.stderr[result.stderr.index(f"pscore-run: {script} FAILED") :]
    lines = summary.splitlines()
    assert lines[1].startswith("  first failure: rank 2 (local rank 2, node 0, host ")
    assert lines[2].startswith("  exited with code 1 at 20") and lines[2].endswith(" UTC")
    assert "rank 0 was killed by SIGTERM" in lines[3] and "rank 1 was killed by SIGTERM" in lines[3]
    assert lines[4] == "  last lines of its stderr:"
    assert lines[5] == "    Traceback (most recent call last):"
    assert lines[-1] == "    ValueError: bad batch 17 on rank 2"


REDUCE = """
    import os
    import numpy as np
    import pscore
    pscore.init_process_group(timeout=60)
    rank, world = pscore.get_rank(), pscore.get_world_size()
    x = np.full(100_000, rank + 1.0)
    pscore.all_reduce(x)
    assert (x == world * (world + 1) / 2).all(), x[:4]
    print(f"rank {rank} of {world} local {os.environ['LOCAL_RANK']} sum {x[0]}")
    pscore.barrier()
"""


def test_two_nodes_on_one_host_meet_and_reduce(tmp_path):
    """Two pscore-run processes, --nnodes 2, node ranks 0 and 1 on this host: one world of 4."""
    script = write_script(tmp_path, "reduce.py", REDUCE)
    for _ in range(3):
        _two_nodes_on_this_host(tmp_path, script)


def _two_nodes_on_this_host(tmp_path, script: str) -> None:
    port = str(free_port())
    common = ["--nnodes", "2", "--master-addr", "127.0.0.1", "--master-port", port, "-n", "2"]
    nodes = [
        subprocess.Popen(
            [sys.executable, "-m", "pscore.launch", *common, "--node-rank", str(i), script],
            env=launcher_env(),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    outs = [node.communicate(timeout=120) for node in nodes]
    for i, (node, (out, err)) in enumerate(zip(nodes, outs)):
        assert node.returncode == 0, err
        assert sorted(out.splitlines()) == [
            f"[rank{r}]: rank {r} of 4 local {r - 2 * i} sum 10.0" for r in (2 * i, 2 * i + 1)
        ]


def test_no_python_runs_the_program_itself(tmp_path):
    script = tmp_path / "report.sh"
    script.write_text('#!/bin/sh\necho "rank $RANK of $WORLD_SIZE: $1"\n')
    script.chmod(0o755)
    result = run_launcher(
        ["-n", "2", "--no-python", "--max_restarts", "0", str(script), "hi"], tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == [f"[rank{r}]: rank {r} of 2: hi" for r in (0, 1)]


def test_a_process_left_holding_the_output_does_not_hold_the_launcher(tmp_path):
    """A rank that leaves a child behind with its stdout: the launcher still ends (it stops
    reading that pipe a few seconds after the ranks are gone)."""
    script = write_script(
        tmp_path,
        "leave.py",
        """
        import subprocess
        subprocess.Popen(["sleep", "30"])
        print("bye", flush=True)
        """,
    )
    start = time.monotonic()
    result = run_launcher(["-n", "1", script], tmp_path, timeout=90)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "[rank0]: bye\n"
    assert time.monotonic() - start < 60


def test_nodes_derive_one_job_id_and_port_29500(tmp_path):
    script = write_script(tmp_path, "report.py", REPORT)
    env = launcher_env()
    env.pop("PSCORE_JOB_ID", None)
    args = ["--nnodes", "2", "--node-rank", "1", "--master-addr", "10.1.2.3", script]
    result = subprocess.run(
        [sys.executable, "-m", "pscore.launch", *args],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    info = json.loads((tmp_path / "rank1.json").read_text())
    assert info["PSCORE_JOB_ID"] == "pscore-run@10.1.2.3:29500"
    assert info["MASTER_PORT"] == "29500" and info["WORLD_SIZE"] == "2"


def test_a_long_line_comes_out_in_prefixed_pieces(tmp_path):
    script = write_script(tmp_path, "long.py", "print('x' * 150_000 + 'y')")
    result = run_launcher(["-n", "1", script], tmp_path)
    assert result.returncode == 0, result.stderr
    pieces = result.stdout.splitlines()
    assert len(pieces) == 3 and all(p.startswith("[rank0]: ") for p in pieces)
    assert "".join(p[len("[rank0]: ") :] for p in pieces) == "x" * 150_000 + "y"


def test_ranks_of_a_killed_launcher_get_sigterm(tmp_path):
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
    launcher_proc = subprocess.Popen(
        [sys.executable, "-m", "pscore.launch", "-n", "2", script], env=launcher_env(), cwd=tmp_path
    )
    deadline = time.monotonic() + 30
    while not all((tmp_path / f"pid{r}").exists() for r in range(2)):
        assert time.monotonic() < deadline and launcher_proc.poll() is None
        time.sleep(0.02)
    launcher_proc.kill()
    launcher_proc.wait(30)
    pids = [int((tmp_path / f"pid{r}").read_text()) for r in range(2)]
    while any(pid_alive(p) for p in pids):
        assert time.monotonic() < deadline + 30, "ranks outlived their launcher"
        time.sleep(0.05)


AFFINITY = """
    import json, os
    with open(f"cpus{os.environ['LOCAL_RANK']}.json", "w") as f:
        json.dump(sorted(os.sched_getaffinity(0)), f)
"""


def test_core_slices_are_disjoint_contiguous_and_even():
    assert affinity.core_slices([0, 1], 2) == [{0}, {1}]
    assert affinity.core_slices(list(range(16)), 3) == [
        set(range(6)),
        set(range(6, 11)),
        set(range(11, 16)),
    ]
    assert affinity.core_slices([3, 5, 7], 1) == [{3, 5, 7}]
    assert affinity.core_slices([0, 1], 3) is None  # more ranks than CPUs: unbound
    assert affinity.core_slices([0, 1], 0) is None


@pytest.mark.parametrize("bind", ["cores", "none"])
def test_local_ranks_are_bound_to_disjoint_cpus(tmp_path, bind):
    allowed = sorted(os.sched_getaffinity(0))
    n = min(2, len(allowed))
    script = write_script(tmp_path, "cpus.py", AFFINITY)
    result = run_launcher(["-n", str(n), "--bind", bind, script], tmp_path)
    assert result.returncode == 0, result.stderr
    got = [json.loads((tmp_path / f"cpus{r}.json").read_text()) for r in range(n)]
    if bind == "none":
        assert got == [allowed] * n
    else:
        assert [set(c) for c in got] == affinity.core_slices(allowed, n)


def test_more_ranks_than_cpus_stay_unbound(tmp_path):
    allowed = sorted(os.sched_getaffinity(0))
    n = len(allowed) + 1
    script = write_script(tmp_path, "cpus.py", AFFINITY)
    result = run_launcher(["-n", str(n), script], tmp_path)
    assert result.returncode == 0, result.stderr
    assert all(json.loads((tmp_path / f"cpus{r}.json").read_text()) == allowed for r in range(n))
