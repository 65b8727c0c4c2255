"""Shared output of the benchmarks: nccl-tests-style tables, percentiles and JSON files."""

from __future__ import annotations

import json
import os
import platform
import statistics

__all__ = ["human_bytes", "machine", "p50", "print_table", "write_json"]


def p50(samples: list[float]) -> float:
    return statistics.median(samples)


def human_bytes(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def print_table(title: str, columns: list[str], rows: list[list], widths: list[int] | None = None):
    widths = widths or [max(12, len(c) + 2) for c in columns]
    print(f"# {title}")
    print("#" + "".join(c.rjust(w) for c, w in zip(columns, widths)))
    for row in rows:
        cells = [f"{v:.2f}" if isinstance(v, float) else str(v) for v in row]
        print(" " + "".join(c.rjust(w) for c, w in zip(cells, widths)))


def machine() -> dict:
    return {
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
    }


def write_json(path: str | None, payload: dict) -> None:
    if not path:
        return
    payload = dict(payload, machine=machine())
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(payload, f, indent=2)
    os.replace(tmp, path)
    print(f"# wrote {path}")
