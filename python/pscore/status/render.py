"""`pscore status`'s snapshot as text tables for a terminal."""

from __future__ import annotations

import time

__all__ = ["render"]

_SHARD_COLUMNS = [
    "SHARD",
    "ADDRESS",
    "STATE",
    "TABLES",
    "ROWS",
    "ELEMENTS",
    "REQ/S",
    "IN",
    "OUT",
    "IN/S",
    "OUT/S",
    "QUEUE",
    "P50_US",
    "P99_US",
    "CONNS",
]
_RANK_COLUMNS = ["RANK", "HOST", "PID", "ROLE", "STRATEGY", "BACKEND", "STATE", "JOINED"]


def _bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return f"{n:.0f}B"


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def _table(columns: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip()
        for line in [columns, *rows]
    ]


def _shard_row(r: dict) -> list[str]:
    cells = [str(r["shard"]), r["address"] or "-", r["state"]]
    if r["state"] != "up":
        return cells + ["-"] * (len(_SHARD_COLUMNS) - len(cells))
    s, rates = r["stats"], r.get("rates")
    return [
        *cells,
        str(s.get("tables", 0)),
        str(s.get("sparse_rows", 0)),
        str(s.get("dense_elements", 0)),
        f"{rates['requests_per_s']:.1f}" if rates else "-",
        _bytes(s.get("bytes_in", 0)),
        _bytes(s.get("bytes_out", 0)),
        _bytes(rates["bytes_in_per_s"]) if rates else "-",
        _bytes(rates["bytes_out_per_s"]) if rates else "-",
        str(s.get("queue_depth", 0)),
        f"{s.get('latency_p50_us', 0):.0f}",
        f"{s.get('latency_p99_us', 0):.0f}",
        str(r["connections"]),
    ]


def _requests_line(r: dict) -> str:
    by_type = r["stats"].get("requests_by_type", {})
    counts = " ".join(f"{kind}={n}" for kind, n in sorted(by_type.items()))
    return f"  shard {r['shard']} requests: {counts or 'none'}"


def _age(joined: float | None, now: float) -> str:
    if joined is None:
        return "-"
    seconds = max(0, int(now - joined))
    return (
        f"{seconds // 3600}h{seconds // 60 % 60:02d}m ago"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60:02d}s ago")
    )


def _rank_row(r: dict, now: float) -> list[str]:
    return [
        str(r["rank"]),
        r.get("host", "-"),
        str(r.get("pid", "-")),
        r.get("role", "-"),
        r.get("strategy", "-"),
        r.get("backend", "-"),
        r["state"],
        _age(r.get("joined"), now),
    ]


def render(snap: dict) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(snap["time"]))
    rates = f"rates over {snap['interval_s']:g} s" if snap["interval_s"] > 0 else "no rates"
    lines = [f"pscore status  job {snap['job']}  store {snap['store']}  {when}  ({rates})", ""]
    shards = snap["shards"]
    if shards:
        lines += [f"parameter servers: {_count(len(shards), 'shard')}"]
        lines += _table(_SHARD_COLUMNS, [_shard_row(r) for r in shards])
        lines += [_requests_line(r) for r in shards if r["state"] == "up"]
        lines += [f"  shard {r['shard']} {r['state']}: {r['error']}" for r in shards if r["error"]]
    else:
        lines += ["parameter servers: none registered"]
    lines.append("")
    ranks = snap["ranks"]
    if ranks:
        lines += [f"ranks: {len(ranks)}"]
        lines += _table(_RANK_COLUMNS, [_rank_row(r, snap["time"]) for r in ranks])
    else:
        lines += ["ranks: none registered"]
    return "\n".join(lines)
