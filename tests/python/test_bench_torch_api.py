"""The collective benchmarks' `--api` option: the torch.distributed row (pscore's torch backend)
runs beside pscore's own calls and gloo, lands in the JSON file with its ratio, and bad values
are refused by name. No timing is asserted."""

from __future__ import annotations

import json

import pytest
from test_bench_cli import run_bench

from pscore.bench import collectives, torch_api


def test_both_apis_and_gloo_land_in_the_json_with_their_ratios(tmp_path):
    out = tmp_path / "out.json"
    args = ["--api", "pscore,torch", "--sizes", "4K,64K", "--iters", "5", "--rounds", "2"]
    result = run_bench("allreduce", *args, "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["api"] == ["pscore", "torch"]
    assert [r["bytes"] for r in report["results"]] == [4096, 64 << 10]
    for r in report["results"]:
        for row in ("pscore", "pscore_torch", "gloo"):
            assert r[row]["p50_us"] > 0 and r[row]["busbw_GBps"] > 0, (row, r)
        ratio = r["pscore_torch"]["p50_us"] / r["pscore"]["p50_us"]
        assert r["torch_api_ratio"] == pytest.approx(ratio)
        assert r["time_ratio"] == pytest.approx(r["pscore"]["p50_us"] / r["gloo"]["p50_us"])
    header = result.stdout.splitlines()[1]
    assert "torch p50 us" in header and "torch / pscore" in header and "gloo p50 us" in header
    assert "api=pscore,torch" in result.stdout


@pytest.mark.parametrize("name", ["broadcast", "alltoall"])
def test_the_torch_api_alone_is_the_row_of_its_table(name, tmp_path):
    out = tmp_path / "out.json"
    args = ["--api", "torch", "--compare", "none", "--sizes", "4K", "--iters", "5"]
    result = run_bench(name, *args, "--rounds", "1", "--json", str(out))
    assert result.returncode == 0, result.stderr[-3000:]
    (row,) = json.loads(out.read_text())["results"]
    assert set(row) == {"bytes", "pscore_torch"}
    assert row["pscore_torch"]["p50_us"] > 0
    assert f"{name} world=2 backend=pscore/" in result.stdout and "api=torch" in result.stdout


@pytest.mark.parametrize("value", ["gloo", "torch,torch", "", "pscore,"])
def test_an_api_list_that_is_not_one_is_refused_by_name(value):
    result = run_bench("allreduce", f"--api={value}", "--compare", "none")
    assert result.returncode == 2
    assert f"{value!r} is not a list of APIs: expected one or both of pscore, torch" in (
        result.stderr
    )
    assert "Traceback" not in result.stderr


def test_api_help_names_the_default(capsys):
    with pytest.raises(SystemExit):
        collectives.parser("allreduce").parse_args(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--api API" in text and "default pscore)" in text
    assert collectives.parser("allreduce").parse_args([]).api == ("pscore",)
    assert torch_api.parse_apis("torch, pscore") == ("torch", "pscore")
