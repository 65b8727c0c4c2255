"""pscore-run --workers N --servers M [--worker-groups G]: ps tasks beside the workers, with the
environment contract of pscore.train.run, [psI] output, and the workers' exit status."""

from __future__ import annotations

import json

import pytest
from train_ps_helpers import launch, write

from pscore.launch import launcher

REPORT = """
    import json, os
    names = ["PSCORE_ROLE", "PSCORE_RANK", "PSCORE_WORLD_SIZE", "RANK", "MASTER_PORT",
             "PSCORE_MASTER_PORT", "PSCORE_NUM_SERVERS", "PSCORE_WORKER_GROUPS", "PSCORE_STORE",
             "PSCORE_JOB_ID", "PSCORE_SHARD", "PSCORE_NUM_WORKERS"]
    info = {n: os.environ.get(n) for n in names}
    name = f"ps{info['PSCORE_SHARD']}" if info["PSCORE_ROLE"] == "ps" else f"rank{info['RANK']}"
    with open(f"{name}.json", "w") as f:
        json.dump(info, f)
    print("hello from", name, flush=True)
"""


def test_ps_tasks_and_workers_get_their_roles(tmp_path):
    script = write(tmp_path, "report.py", REPORT)
    flags = ["--workers", "4", "--servers", "2", "--worker-groups", "2"]
    result = launch([*flags, "--log-dir", "logs", script], tmp_path)
    assert result.returncode == 0, result.stderr
    ps = [json.loads((tmp_path / f"ps{i}.json").read_text()) for i in range(2)]
    workers = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(4)]
    every = ps + workers
    assert len({i["PSCORE_JOB_ID"] for i in every}) == 1
    assert len({i["PSCORE_STORE"] for i in every}) == 1
    assert every[0]["PSCORE_STORE"].startswith("tcp://127.0.0.1:")
    assert {(i["PSCORE_NUM_SERVERS"], i["PSCORE_WORKER_GROUPS"]) for i in every} == {("2", "2")}
    for shard, info in enumerate(ps):
        assert info["PSCORE_ROLE"] == "ps" and info["PSCORE_SHARD"] == str(shard)
        assert info["PSCORE_NUM_WORKERS"] == "4"
        assert info["PSCORE_RANK"] is info["RANK"] is info["MASTER_PORT"] is None
    for rank, info in enumerate(workers):
        assert info["PSCORE_ROLE"] == ("chief" if rank == 0 else "worker")
        assert info["PSCORE_RANK"] == str(rank) and info["PSCORE_WORLD_SIZE"] == "4"
        assert info["PSCORE_SHARD"] is None
    assert workers[0]["MASTER_PORT"] != every[0]["PSCORE_STORE"].rsplit(":", 1)[1]
    for name in ("ps0", "ps1", "rank0", "rank3"):
        assert f"[{name}]: hello from {name}" in result.stdout
    assert (tmp_path / "logs" / "ps_1" / "stdout.log").read_text() == "hello from ps1\n"


def test_workers_alone_are_n(tmp_path):
    script = write(tmp_path, "report.py", REPORT)
    result = launch(["--workers", "2", script], tmp_path)
    assert result.returncode == 0, result.stderr
    info = json.loads((tmp_path / "rank1.json").read_text())
    assert info["PSCORE_WORLD_SIZE"] == "2" and info["PSCORE_ROLE"] is None
    assert not (tmp_path / "ps0.json").exists()


# The ps task says when its SIGTERM handler is in place, and the workers end only then: a
# launcher that stops it earlier would kill it before the handler could say so.
SERVER_STAYS = """
    import os, signal, sys, time
    if os.environ["PSCORE_ROLE"] == "ps":
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
        open("ps_ready", "w").close()
        time.sleep(60)
    deadline = time.monotonic() + 60
    while not os.path.exists("ps_ready") and time.monotonic() < deadline:
        time.sleep(0.01)
    sys.exit(int(sys.argv[1]) if os.environ.get("PSCORE_RANK") == "1" else 0)
"""


def test_a_ps_task_left_running_after_the_workers_succeed_is_stopped(tmp_path):
    script = write(tmp_path, "stays.py", SERVER_STAYS)
    result = launch(
        ["--workers", "2", "--servers", "1", "--grace-period", "1", script, "0"], tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "the workers finished 1 s ago and ps 0 still run(s); stopping them" in result.stderr
    assert "FAILED" not in result.stderr


def test_a_failed_worker_fails_the_job_and_stops_the_servers(tmp_path):
    script = write(tmp_path, "stays.py", SERVER_STAYS)
    result = launch(["--workers", "2", "--servers", "1", script, "7"], tmp_path)
    assert result.returncode == 7
    assert "pscore-run: rank 1 (pid" in result.stderr
    assert "other ranks: ps 0 exited with code 3" in result.stderr


def test_a_failed_ps_task_fails_the_job(tmp_path):
    script = write(
        tmp_path,
        "ps_fails.py",
        """
        import os, sys, time
        if os.environ["PSCORE_ROLE"] == "ps":
            print("shard is broken", file=sys.stderr)
            sys.exit(5)
        time.sleep(60)
        """,
    )
    result = launch(["--workers", "2", "--servers", "1", script], tmp_path)
    assert result.returncode == 5
    assert "first failure: ps 0 (node 0" in result.stderr
    assert "    shard is broken" in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-n", "2", "--servers", "1", "x.py"], "--servers needs --workers N"),
        (["-n", "2", "--workers", "2", "x.py"], "-n 2 and --workers 2 both say"),
        (["--worker-groups", "2", "x.py"], "--worker-groups needs --workers N"),
        (["--workers", "0", "--servers", "1", "x.py"], "--workers must be >= 1, got 0"),
        (["--workers", "2", "--servers", "0", "x.py"], "--servers must be >= 1, got 0"),
        (["--workers", "4", "--worker-groups", "3", "x.py"], "--worker-groups 3 does not divide"),
        (["--workers", "2", "--worker-groups", "0", "x.py"], "--worker-groups 0 does not divide"),
        (
            ["--nnodes", "2", "--master-addr", "h", "--workers", "2", "--servers", "1", "x.py"],
            "start a Trainer job on one node",
        ),
    ],
)
def test_bad_role_flags(args, message, capsys):
    assert launcher.main(args) == 2
    assert message in capsys.readouterr().err


def test_a_scripts_flag_is_not_taken_for_a_prefix_of_pscore_runs(tmp_path):
    """`--worker` and `--master` are the script's: pscore-run takes no abbreviation of its own
    --workers / --worker-groups / --master-addr."""
    script = tmp_path / "flags.py"
    script.write_text("import sys\nprint('argv', sys.argv[1:], flush=True)\n")
    result = launch(["-n", "1", str(script), "--worker", "a", "--master", "b"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "argv ['--worker', 'a', '--master', 'b']" in result.stdout
