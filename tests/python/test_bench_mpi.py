"""`python -m pscore.bench COLLECTIVE --compare mpi`: Open MPI's mpirun (with mpi4py) timed in
the same run as pscore, rounds alternating; what it says when Open MPI or mpi4py is missing; and
a failing or hung mpirun ending the run with an error naming it. The real runs skip when Open
MPI or mpi4py is not installed."""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import stat
import sys
import time

import pytest
import test_bench_cli
import torch

from pscore.bench import buffers, collectives, mpi_compare

HAVE_MPI = shutil.which("mpirun") is not None and importlib.util.find_spec("mpi4py") is not None
needs_mpi = pytest.mark.skipif(not HAVE_MPI, reason="needs Open MPI's mpirun and mpi4py")
needs_mpi4py = pytest.mark.skipif(importlib.util.find_spec("mpi4py") is None, reason="needs mpi4py")
INSTALL = ("apt-get install openmpi-bin libopenmpi-dev", "pip install mpi4py")
SMALL = ["--sizes", "4K,64K", "--iters", "5", "--rounds", "2"]


def run_bench(*args, path=None, timeout=180):
    return test_bench_cli.run_bench(*args, path=path, timeout=timeout)


def fake_mpirun(folder, script: str) -> str:
    """A folder whose `mpirun` says it is Open MPI to --version and runs `script` otherwise."""
    folder.mkdir()
    mpirun = folder / "mpirun"
    mpirun.write_text(
        '#!/bin/sh\nif [ "$1" = --version ]; then echo "mpirun (Open MPI) 4.1.4"; exit 0; fi\n'
        + script
        + "\n"
    )
    mpirun.chmod(mpirun.stat().st_mode | stat.S_IXUSR)
    return str(folder)


def check_rows(report, peers):
    assert [r["bytes"] for r in report["results"]] == [4096, 64 << 10]
    for r in report["results"]:
        for peer in ("pscore", *peers):
            assert r[peer]["p50_us"] > 0 and r[peer]["busbw_GBps"] > 0, (peer, r)
            assert r[peer]["algbw_GBps"] == pytest.approx(r["bytes"] / r[peer]["p50_us"] / 1e3)
        assert r["mpi_time_ratio"] == pytest.approx(r["pscore"]["p50_us"] / r["mpi"]["p50_us"])
        assert r["mpi_busbw_ratio"] == pytest.approx(
            r["pscore"]["busbw_GBps"] / r["mpi"]["busbw_GBps"]
        )


@needs_mpi
def test_allreduce_against_open_mpi_over_tcp(tmp_path):
    out = tmp_path / "out.json"
    result = run_bench(
        "allreduce", "--compare", "mpi", "--transport", "tcp", *SMALL, "--json", str(out)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    check_rows(report, ["mpi"])
    assert report["backend"] == "pscore/tcp" and report["mpi"]["btl"] == "tcp,self"
    assert report["mpi"]["library"].startswith("Open MPI")
    assert "gloo" not in report["results"][0]
    assert "time / mpi" in result.stdout and "busbw x mpi" in result.stdout


@needs_mpi
def test_alltoall_against_gloo_and_open_mpi(tmp_path):
    out = tmp_path / "out.json"
    result = run_bench(
        "alltoall", "--compare", "gloo,mpi", "--buffers", "numpy", *SMALL, "--json", str(out)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    check_rows(report, ["gloo", "mpi"])
    assert report["buffers"] == "numpy"
    assert report["mpi"]["btl"] == "vader,self"
    assert "time / gloo" in result.stdout and "time / mpi" in result.stdout


@needs_mpi
@pytest.mark.parametrize("name", ["scatter", "gather"])
def test_rooted_collectives_against_gloo_and_open_mpi(name, tmp_path):
    out = tmp_path / "out.json"
    result = run_bench(
        name, "--compare", "gloo,mpi", "--api", "pscore,torch", *SMALL, "--json", str(out)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    check_rows(report, ["gloo", "mpi", "pscore_torch"])
    assert report["collective"] == name
    assert f"{name} world=2" in result.stdout and "time / mpi" in result.stdout


def test_no_mpirun_on_path_names_what_to_install():
    result = run_bench("allreduce", "--compare", "mpi", path="/nonexistent")
    assert result.returncode == 2
    assert "mpirun" in result.stderr and "not on PATH" in result.stderr
    assert all(step in result.stderr for step in INSTALL), result.stderr


@pytest.mark.parametrize(
    ("version", "hide_mpi4py", "says"),
    [
        ("mpirun (Open MPI) 4.1.4", True, "needs mpi4py"),
        ("HYDRA build details:", False, "needs Open MPI"),
    ],
)
def test_missing_mpi4py_or_another_mpi_names_what_to_install(
    tmp_path, monkeypatch, capsys, version, hide_mpi4py, says
):
    if not hide_mpi4py and importlib.util.find_spec("mpi4py") is None:
        pytest.skip("needs mpi4py, to reach the check of mpirun's kind")
    mpirun = tmp_path / "mpirun"
    mpirun.write_text(f"#!/bin/sh\necho '{version}'\n")
    mpirun.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    if hide_mpi4py:
        monkeypatch.setitem(sys.modules, "mpi4py", None)
    assert collectives.main(["allreduce", "--compare", "mpi"]) == 2
    err = capsys.readouterr().err
    assert says in err and all(step in err for step in INSTALL), err


@needs_mpi4py
def test_a_failing_mpirun_ends_the_run_with_its_output(tmp_path):
    path = fake_mpirun(tmp_path / "bin", "echo 'no btl could reach rank 1' >&2; exit 3")
    result = run_bench("allreduce", "--compare", "mpi", *SMALL, path=f"{path}:{os.environ['PATH']}")
    assert result.returncode != 0
    assert "mpirun exited with code 3" in result.stderr
    assert "no btl could reach rank 1" in result.stderr


@needs_mpi4py
def test_a_hung_mpirun_ends_the_run_within_its_timeout(tmp_path):
    path = fake_mpirun(tmp_path / "bin", "exec sleep 600")
    started = time.monotonic()
    result = run_bench(
        "allreduce",
        "--compare",
        "mpi",
        "--mpi-timeout",
        "3",
        *SMALL,
        path=f"{path}:{os.environ['PATH']}",
    )
    assert result.returncode != 0
    assert "mpirun (the Open MPI peer) did not finish its round 0 of allreduce 4K" in result.stderr
    assert time.monotonic() - started < 120


@pytest.mark.parametrize(
    ("world", "transport", "expected"),
    [
        (2, "auto", ["--mca", "btl", "vader,self"]),
        (2, "tcp", ["--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "lo"]),
        (len(os.sched_getaffinity(0)) + 1, "shm", ["--oversubscribe", "--bind-to", "none"]),
    ],
)
def test_mpirun_command_follows_transport_and_world(world, transport, expected):
    args = argparse.Namespace(
        collective="allreduce",
        sizes=[4096],
        rounds=1,
        world=world,
        transport=transport,
        buffers="numpy",
    )
    cmd = mpi_compare.mpirun_command(args, 1234, "/tmp/out.json", [5])
    joined = " ".join(cmd)
    assert f"-n {world}" in joined and " ".join(expected) in joined
    assert ("--oversubscribe" in cmd) == (world > len(os.sched_getaffinity(0)))
    # bound per core as pscore's ranks are (launch/affinity.py) unless oversubscribed
    assert ("--bind-to core" in joined) == (world <= len(os.sched_getaffinity(0)))
    config = json.loads(cmd[-1])
    assert config["port"] == 1234 and cmd[-3:-1] == ["-m", "pscore.bench.mpi_peer"]
    assert config["buffers"] == "numpy"  # the peer allocates as pscore's ranks do


def test_compare_takes_a_list_of_peers():
    parser = collectives.parser("allreduce")
    assert parser.parse_args(["--compare", "gloo,mpi"]).compare == ["gloo", "mpi"]
    assert parser.parse_args(["--compare", "none"]).compare == []
    with pytest.raises(SystemExit):
        parser.parse_args(["--compare", "nccl"])


@pytest.mark.parametrize("kind", ["torch", "numpy"])
@pytest.mark.parametrize(
    ("name", "fields"),
    [
        ("allreduce", {"x": 1000}),
        ("allgather", {"part": 500, "out": 1000}),
        ("reduce_scatter", {"out": 500, "inp": 1000}),
        ("alltoall", {"inp": 1000, "out": 1000}),
        ("scatter", {"part": 500, "whole": 1000}),
        ("gather", {"part": 500, "whole": 1000}),
    ],
)
def test_every_library_gets_the_same_operands(kind, name, fields):
    ones, empty = buffers.allocator(kind)
    b = buffers.operands(name, 4000, 2, ones, empty)
    assert {k: len(v) for k, v in vars(b).items()} == fields
    for k, v in vars(b).items():
        assert v.dtype == torch.float32 and v.is_contiguous(), k
    if "x" in fields:
        assert bool((b.x == 1).all())
