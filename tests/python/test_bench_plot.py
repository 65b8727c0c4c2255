"""`python -m pscore.bench plot`: real benchmark runs (a tiny allreduce against gloo, a tiny
Hogwild run) drawn as PNG, the figure's panels and lines checked against the JSON; a JSON the
plot does not understand is refused with the reason."""

from __future__ import annotations

import json

import pytest
from test_bench_cli import run_bench

from pscore.bench import plot

pytest.importorskip("matplotlib")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _line(ax, label):
    return next(line for line in ax.get_lines() if line.get_label() == label)


def test_allreduce_run_plots_busbw_per_size_for_pscore_and_gloo(tmp_path):
    out, png = tmp_path / "allreduce.json", tmp_path / "allreduce.png"
    run = run_bench(
        "allreduce", "--sizes", "4K,64K", "--iters", "3", "--rounds", "1", "--json", str(out)
    )
    assert run.returncode == 0, run.stderr[-3000:]
    drawn = run_bench("plot", str(out), "-o", str(png))
    assert drawn.returncode == 0, drawn.stderr
    data = png.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 5000

    report = json.loads(out.read_text())
    (ax,) = plot.figure([(str(out), report)]).axes
    assert ax.get_title() == f"allreduce (world 2, {report['backend']})"
    assert ax.get_xscale() == "log" and ax.get_ylabel() == "busbw (GB/s)"
    for system in ("pscore", "gloo"):
        line = _line(ax, system)
        assert list(line.get_xdata()) == [4096, 64 << 10]
        assert list(line.get_ydata()) == [r[system]["busbw_GBps"] for r in report["results"]]


def test_hogwild_run_plots_rows_per_second_per_op(tmp_path):
    out = tmp_path / "hogwild.json"
    run = run_bench(
        *("hogwild", "--procs", "1", "--compare", "none", "--ops", "sgd,dense-sgd"),
        *("--rows", "1000", "--dense", "1000", "--seconds", "0.05", "--repeat", "1"),
        *("--pool", "4", "--json", str(out)),
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(out.read_text())
    fig = plot.figure([(str(out), report)])
    assert [ax.get_title() for ax in fig.axes] == ["hogwild sgd", "hogwild dense-sgd"]
    for ax, op in zip(fig.axes, ("sgd", "dense-sgd")):
        assert ax.get_ylabel() == "rows/s"
        for r in (r for r in report["results"] if r["op"] == op):
            line = _line(ax, r["impl"])
            assert list(line.get_xdata()) == [1] and list(line.get_ydata()) == [r["rows_per_s"]]


def test_ps_results_give_a_dense_and_a_sparse_panel():
    # The shape `python -m pscore.bench ps --json` writes (a real run takes minutes).
    report = {
        "benchmark": "ps",
        "servers": 2,
        "workers": 1,
        "dense": [
            {"bytes": 4096, "pscore_GBps": 0.5, "torch_GBps": 0.25, "ratio": 2.0},
            {"bytes": 65536, "pscore_GBps": 1.5, "torch_GBps": 0.5, "ratio": 3.0},
        ],
        "sparse": {
            "batch": 64,
            "dim": 8,
            "rows": 1000,
            "pscore_rows_per_s": 9e5,
            "torch_rows_per_s": 3e5,
            "ratio": 3.0,
        },
    }
    dense_ax, sparse_ax = plot.figure([("ps.json", report)]).axes
    assert list(_line(dense_ax, "torch").get_ydata()) == [0.25, 0.5]
    assert [p.get_height() for p in sparse_ax.patches] == [9e5, 3e5]
    assert sparse_ax.get_ylabel() == "rows/s"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"benchmark": "train", "results": []}', "not a benchmark result this plot understands"),
        ("[1, 2]", "it has a JSON list, not an object"),
        ('{"collective": "allreduce", "results": []}', "malformed collective results"),
        ("{not json", "is not JSON"),
    ],
)
def test_a_json_it_does_not_understand_is_refused(tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    result = run_bench("plot", str(bad), "-o", str(tmp_path / "out.png"))
    assert result.returncode == 2
    assert result.stderr.startswith(f"python -m pscore.bench plot: {bad}")
    assert message in result.stderr
    assert not (tmp_path / "out.png").exists()
