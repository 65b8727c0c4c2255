"""`python -m pscore.bench staging`: its options, and the message where CUDA is missing (the run
itself is a GPU benchmark: benchmarks/gpu_check.sh)."""

from __future__ import annotations

import json

import pytest
from test_bench_cli import run_bench

from pscore.bench import __main__ as bench_main

torch = pytest.importorskip("torch")


def test_options_have_help_and_defaults(capsys):
    with pytest.raises(SystemExit) as e:
        bench_main.main(["staging", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for option in ("--world", "--transport", "--sizes", "--iters", "--rounds", "--json"):
        assert option in out
    assert "default tcp" in out


def test_without_cuda_it_says_what_is_missing():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    result = run_bench("staging", "--sizes", "4K")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"python -m pscore.bench staging: needs a CUDA device: torch {torch.__version__} sees none"
    )


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_it_reports_both_paths_per_size(tmp_path):
    path = tmp_path / "staging.json"
    result = run_bench(
        "staging",
        "--sizes",
        "4K,64K",
        "--iters",
        "5",
        "--rounds",
        "1",
        "--json",
        str(path),
        timeout=240,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(path.read_text())
    assert [r["bytes"] for r in report["results"]] == [4096, 65536]
    for r in report["results"]:
        assert r["cuda_staged"]["p50_us"] > 0 and r["host"]["p50_us"] > 0
        assert r["time_ratio"] == r["cuda_staged"]["p50_us"] / r["host"]["p50_us"]
    assert "staged allreduce world=2" in result.stdout
