"""`python -m pscore.bench plot out.json [more.json ...] -o out.png`: draws what the benchmarks
wrote with --json, one panel each: a collective's busbw against message size (log x; p50 latency
for barrier) for pscore and each peer in the file; the parameter server's dense push+pull GB/s
against size and sparse rows/s; Hogwild rows/s against processes, per operation.

Needs matplotlib (``pip install 'pscore[plot]'``). :func:`figure` returns the matplotlib Figure.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys

from .report import human_bytes

__all__ = ["Panel", "figure", "main", "panels"]


@dataclasses.dataclass
class Panel:
    """One axes: lines (label -> (xs, ys)) on a log2 byte axis or a linear one, or bars."""

    title: str
    xlabel: str
    ylabel: str
    lines: dict[str, tuple[list[float], list[float]]] = dataclasses.field(default_factory=dict)
    bars: dict[str, float] = dataclasses.field(default_factory=dict)
    bytes_axis: bool = False


def _collective(report: dict) -> list[Panel]:
    name = report["collective"]
    barrier = name == "barrier"
    panel = Panel(
        title=f"{name} (world {report.get('world', '?')}, {report.get('backend', '?')})",
        xlabel="message size (bytes)",
        ylabel="p50 latency (us)" if barrier else "busbw (GB/s)",
        bytes_axis=not barrier,
    )
    results = report["results"]
    systems = [k for k, v in results[0].items() if isinstance(v, dict) and "p50_us" in v]
    for system in systems:
        rows = [r for r in results if system in r]
        ys = [r[system]["p50_us" if barrier else "busbw_GBps"] for r in rows]
        panel.lines[system] = ([r["bytes"] for r in rows], ys)
    return [panel]


def _ps(report: dict) -> list[Panel]:
    dense = report["dense"]
    servers, workers = report.get("servers", "?"), report.get("workers", "?")
    setup = f"{servers} servers, {workers} workers"
    out = []
    if dense:
        panel = Panel(
            f"ps dense push+pull ({setup})", "tensor size (bytes)", "algbw (GB/s)", bytes_axis=True
        )
        for key in dense[0]:
            if key.endswith("_GBps"):
                system = key[: -len("_GBps")]
                panel.lines[system] = ([d["bytes"] for d in dense], [d[key] for d in dense])
        out.append(panel)
    sparse = report.get("sparse")
    if sparse:
        title = f"ps sparse push+pull (batch {sparse['batch']}, dim {sparse['dim']}, {setup})"
        panel = Panel(title, "system", "rows/s")
        for key, value in sparse.items():
            if key.endswith("_rows_per_s"):
                panel.bars[key[: -len("_rows_per_s")]] = value
        out.append(panel)
    return out


def _hogwild(report: dict) -> list[Panel]:
    out = {}
    for r in report["results"]:
        panel = out.setdefault(r["op"], Panel(f"hogwild {r['op']}", "processes", "rows/s"))
        xs, ys = panel.lines.setdefault(r["impl"], ([], []))
        xs.append(r["procs"])
        ys.append(r["rows_per_s"])
    return list(out.values())


def _drawer(report):
    if not isinstance(report, dict):
        return None
    if "collective" in report:
        return _collective
    return {"ps": _ps, "hogwild": _hogwild}.get(report.get("benchmark"))


def panels(report: dict, source: str = "the JSON") -> list[Panel]:
    """The panels of one benchmark's --json output; ValueError naming `source` when it is not
    one this plot understands."""
    draw = _drawer(report)
    if draw is None:
        if isinstance(report, dict):
            what = f"keys {', '.join(sorted(report))}" if report else "no keys"
        else:
            what = f"a JSON {type(report).__name__}, not an object"
        raise ValueError(
            f"{source}: not a benchmark result this plot understands (a collective's, ps or "
            f"hogwild --json output); it has {what}"
        )
    try:
        found = draw(report)
    except (KeyError, IndexError, TypeError) as e:
        raise ValueError(f"{source}: malformed {draw.__name__[1:]} results ({e!r})") from None
    if not found or not any(p.lines or p.bars for p in found):
        raise ValueError(f"{source}: no results to plot")
    return found


def _bytes_tick(value: float, _pos=None) -> str:
    return human_bytes(int(value)) if value >= 1 else ""


def _draw(ax, panel: Panel) -> None:
    from matplotlib.ticker import FuncFormatter

    ax.set_title(panel.title, fontsize=10)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.grid(True, alpha=0.3)
    if panel.bars:
        ax.bar(list(panel.bars), list(panel.bars.values()), color="C0")
        return
    for label, (xs, ys) in panel.lines.items():
        ax.plot(xs, ys, marker="o", label=label)
    if panel.bytes_axis:
        ax.set_xscale("log", base=2)
        ax.xaxis.set_major_formatter(FuncFormatter(_bytes_tick))
    ax.legend()


def figure(reports: list[tuple[str, dict]]):
    """A matplotlib Figure with every panel of the given (source, report) pairs."""
    from matplotlib.figure import Figure

    found = [p for source, report in reports for p in panels(report, source)]
    cols = min(2, len(found))
    rows = math.ceil(len(found) / cols)
    fig = Figure(figsize=(6 * cols, 4 * rows), layout="constrained")
    for i, panel in enumerate(found):
        _draw(fig.add_subplot(rows, cols, i + 1), panel)
    return fig


def _load(path: str) -> tuple[str, dict]:
    try:
        with open(path) as f:
            return path, json.load(f)
    except OSError as e:
        raise ValueError(f"cannot read {path}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{path} is not JSON: {e}") from None


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m pscore.bench plot",
        description="Draw benchmark results written with --json (one panel per collective, "
        "ps table kind or hogwild operation).",
    )
    p.add_argument("inputs", nargs="+", metavar="JSON", help="files the benchmarks wrote")
    p.add_argument("-o", "--output", required=True, help="image to write (.png, .svg, .pdf)")
    args = p.parse_args(argv[1:])
    try:
        import matplotlib  # noqa: F401 - checked here to say how to get it
    except ImportError:
        print(
            "python -m pscore.bench plot needs matplotlib: pip install 'pscore[plot]'",
            file=sys.stderr,
        )
        return 2
    try:
        fig = figure([_load(path) for path in args.inputs])
    except ValueError as e:
        print(f"python -m pscore.bench plot: {e}", file=sys.stderr)
        return 2
    fig.savefig(args.output, dpi=100)
    print(f"# wrote {args.output}")
    return 0
