"""`python -m pscore.bench`: the list of benchmarks with a line on each, the collective
benchmarks' options with their help and defaults, and a short real run against gloo."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pscore.bench import __main__ as bench_main
from pscore.bench import collectives

# The folder holding the pscore under test (python/, or site-packages when installed).
PYTHON_PATH = os.path.dirname(
    os.path.dirname(os.path.dirname(os.path.abspath(collectives.__file__)))
)
OPTIONS = ["--world", "--transport", "--compare", "--sizes", "--iters", "--rounds", "--json"]


def run_bench(*args, path=None, timeout=120):
    """`python -m pscore.bench *args` on the pscore under test; `path`: the children's PATH."""
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([PYTHON_PATH, os.environ.get("PYTHONPATH", "")])
    )
    if path is not None:
        env["PATH"] = path
    return subprocess.run(
        [sys.executable, "-m", "pscore.bench", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_no_name_lists_every_benchmark_with_a_line_on_it():
    result = run_bench()
    assert result.returncode == 2
    listed = {}
    for line in result.stderr.splitlines()[2:]:
        name, what = line.split(None, 1)
        listed[name] = what
    assert set(listed) == set(bench_main.BENCHMARKS)
    assert all(len(what.split()) >= 4 for what in listed.values()), listed
    assert listed["allreduce"].startswith("all_reduce busbw")


def test_help_and_unknown_names(capsys):
    assert bench_main.main(["--help"]) == 0
    assert "hogwild-cuda" in capsys.readouterr().out
    assert bench_main.main(["allreduse"]) == 2
    assert "no benchmark named 'allreduse'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["allreduce", "barrier"])
def test_collective_options_have_help_and_defaults(name, capsys):
    with pytest.raises(SystemExit) as e:
        bench_main.main([name, "--help"])
    assert e.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for option, default in zip(OPTIONS, ["2", "auto", "gloo", "4K,16K", "200", "3", "none"]):
        start = text.index(option + " ", text.index("options:"))
        described = text[start : text.find(" --", start + 1)]
        assert f"default {default}" in described, described


def test_loopback_options_have_help_and_defaults(capsys):
    with pytest.raises(SystemExit):
        bench_main.main(["loopback", "-h"])
    text = " ".join(capsys.readouterr().out.split())
    assert "MiB sent in each direction (default 256)" in text
    assert "JSON file (default none)" in text


def test_default_sizes_parse_back():
    parser = collectives.parser("allreduce")
    assert parser.parse_args([]).sizes == collectives.default_sizes()
    assert parser.parse_args(["--sizes", "4K,1M,8"]).sizes == [4096, 1 << 20, 8]


def test_a_short_allreduce_run_against_gloo(tmp_path):
    out = tmp_path / "out.json"
    result = run_bench(
        "allreduce", "--sizes", "4K,256K", "--iters", "5", "--rounds", "1", "--json", str(out)
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert [r["bytes"] for r in report["results"]] == [4096, 256 << 10]
    for r in report["results"]:
        assert r["pscore"]["p50_us"] > 0 and r["gloo"]["p50_us"] > 0 and r["time_ratio"] > 0
    assert "busbw x gloo" in result.stdout


def test_sizes_parse_with_suffixes():
    assert collectives.parse_sizes("4K, 1MB,8,2g") == [4096, 1 << 20, 8, 2 << 30]


@pytest.mark.parametrize("sizes", ["0", "-4K", "4K,,8K", "3", "6", "abc", "K"])
def test_sizes_that_are_not_float32_buffers_are_refused(sizes):
    result = run_bench("allreduce", f"--sizes={sizes}", "--compare", "none")
    assert result.returncode == 2
    assert "is not a size: expected a positive multiple of 4 bytes" in result.stderr
    assert "Traceback" not in result.stderr


def test_counts_below_one_are_refused_with_their_values():
    result = run_bench("broadcast", "--world", "0", "--rounds", "2")
    assert result.returncode == 2
    assert result.stderr == (
        "python -m pscore.bench broadcast: --world, --iters and --rounds must be >= 1, "
        "got 0, 200, 2\n"
    )


def test_ps_options_have_help_and_defaults(capsys):
    with pytest.raises(SystemExit):
        bench_main.main(["ps", "--help"])
    text = " ".join(capsys.readouterr().out.split("options:", 1)[1].split())
    for flag in ["--servers", "--workers", "--compare", "--sizes", "--rows", "--batch", "--dim"]:
        assert f"{flag} " in text
    assert text.count("default") >= 12  # every option but --help


def test_a_short_ps_run_against_torch_rpc_is_silent_on_stderr():
    """torch's rpc warns about its own internals; the benchmark's output is the table alone."""
    args = ["--sizes", "4K", "--batch", "64", "--rows", "1000", "--sparse-iters", "6"]
    result = run_bench("ps", *args, "--scale", "0.01", "--loopback-mb", "1", timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "# dense push+pull, 2 servers, 1 workers" in result.stdout


def test_cuda_allreduce_without_a_gpu_says_so():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = run_bench("allreduce", "--device", "cuda", "--compare", "nccl-torch,gloo-torch")
    assert result.returncode == 2
    assert "--device cuda needs a CUDA GPU and torch built with CUDA; this machine has none" in (
        result.stderr
    )


def test_cuda_compare_names_the_peers_it_takes(capsys):
    assert bench_main.main(["allreduce", "--compare", "nccl-torch"]) == 2
    assert "--compare on CPU takes gloo, mpi or none, got nccl-torch" in capsys.readouterr().err
