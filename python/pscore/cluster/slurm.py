"""Slurm's compressed host and task lists: "node[01-03,07],gpu5" -> hosts, "2(x3),1" -> tasks
per node."""

from __future__ import annotations

import re

__all__ = ["expand_nodelist", "expand_tasks_per_node", "tasks_on_node"]

_TASKS_ITEM = re.compile(r"^(\d+)(?:\(x(\d+)\))?$")


def _split_top_level(text: str, name: str) -> list[str]:
    """Splits on commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"{name}={text!r}: nested brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"{name}={text!r}: unbalanced ']'")
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"{name}={text!r}: unbalanced '['")
    parts.append(text[start:])
    return parts


def _expand_range(spec: str, whole: str, name: str) -> list[str]:
    """ "01-03,07" -> ["01", "02", "03", "07"], keeping the zero padding of the first bound."""
    out = []
    for item in spec.split(","):
        lo, sep, hi = item.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{name}={whole!r}: bad range {item!r}")
        if not sep:
            out.append(lo)
            continue
        if int(hi) < int(lo):
            raise ValueError(f"{name}={whole!r}: range {item!r} runs backwards")
        out.extend(str(n).zfill(len(lo)) for n in range(int(lo), int(hi) + 1))
    return out


def _expand_host(pattern: str, whole: str, name: str) -> list[str]:
    """One host pattern, possibly with several bracket groups ("r[1-2]n[3,5]")."""
    open_at = pattern.find("[")
    if open_at < 0:
        if "]" in pattern:
            raise ValueError(f"{name}={whole!r}: unbalanced ']'")
        return [pattern]
    close_at = pattern.find("]", open_at)
    head, body, tail = pattern[:open_at], pattern[open_at + 1 : close_at], pattern[close_at + 1 :]
    return [
        head + middle + rest
        for middle in _expand_range(body, whole, name)
        for rest in _expand_host(tail, whole, name)
    ]


def expand_nodelist(nodelist: str, name: str = "SLURM_JOB_NODELIST") -> list[str]:
    """Expands Slurm's compressed host list, e.g. "node[01-03,07],gpu5" ->
    ["node01", "node02", "node03", "node07", "gpu5"]. ValueError naming ``name`` when
    malformed."""
    text = nodelist.strip()
    if not text:
        raise ValueError(f"{name} is empty")
    hosts: list[str] = []
    for part in _split_top_level(text, name):
        if not part:
            raise ValueError(f"{name}={nodelist!r}: empty host")
        hosts.extend(_expand_host(part, nodelist, name))
    return hosts


def expand_tasks_per_node(text: str, name: str = "SLURM_TASKS_PER_NODE") -> list[int]:
    """ "2(x3),1" -> [2, 2, 2, 1]."""
    out: list[int] = []
    for item in text.strip().split(","):
        m = _TASKS_ITEM.match(item.strip())
        if not m:
            raise ValueError(f"{name}={text!r}: bad item {item!r} (expected N or N(xM))")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def tasks_on_node(text: str, node_index: int, name: str = "SLURM_TASKS_PER_NODE") -> int:
    """Tasks on node ``node_index`` (SLURM_NODEID) of a tasks-per-node list."""
    counts = expand_tasks_per_node(text, name)
    if not 0 <= node_index < len(counts):
        raise ValueError(f"{name}={text!r} has no entry for node {node_index} (SLURM_NODEID)")
    return counts[node_index]
