"""Binding the local ranks to disjoint sets of this machine's CPUs, as mpirun binds its ranks by
default: a rank polling for its peers can then never take the core a peer needs, nor can the
scheduler stack two ranks on one core while another process holds the other. On this 2-core
machine with one busy process beside a 2-rank job, unbound ranks ran a 1 MB allreduce at p50
183-7831 us from run to run, bound ones at 152-183 us (docs/collectives.md).

Each rank gets a contiguous slice of the CPUs the launcher may use (its own affinity), as even as
they divide; with more ranks than CPUs nothing is bound."""

from __future__ import annotations

import os

__all__ = ["BIND_CHOICES", "bind_self", "core_slices", "rank_cpus"]

BIND_CHOICES = ("cores", "none")


def core_slices(cpus: list[int], n: int) -> list[frozenset[int]] | None:
    """`cpus` cut into n contiguous slices whose sizes differ by at most one; None when there are
    fewer CPUs than slices (or n < 1)."""
    if n < 1 or n > len(cpus):
        return None
    base, extra = divmod(len(cpus), n)
    out, at = [], 0
    for i in range(n):
        size = base + (i < extra)
        out.append(frozenset(cpus[at : at + size]))
        at += size
    return out


def rank_cpus(bind: str, nproc: int) -> list[frozenset[int]] | None:
    """Per local rank, the CPUs it is bound to (bind "cores"), or None: no binding (bind
    "none", or more ranks than the CPUs this process may use)."""
    if bind == "none":
        return None
    return core_slices(sorted(os.sched_getaffinity(0)), nproc)


def bind_self(local_rank: int, local_world: int) -> frozenset[int] | None:
    """Binds this process as pscore-run binds local rank `local_rank` of `local_world`; returns
    its CPUs (None: left unbound)."""
    slices = rank_cpus("cores", local_world)
    if slices is None:
        return None
    os.sched_setaffinity(0, slices[local_rank])
    return slices[local_rank]
