"""all_reduce of a sparse COO tensor (sum only, as gloo): every rank's entries are gathered and
coalesced, so each rank ends with the same sum, in place.

Ranks hold different numbers of entries, so the counts and shapes are gathered first and the
entries travel padded to the largest count. The calls run one after another on the caller's
thread: each needs the one before it, and running them here keeps every rank's sequence of
collectives in the same order."""

from __future__ import annotations

import torch

from ..collectives import functions as c
from .tensors import carried

__all__ = ["all_reduce_sparse"]


def all_reduce_sparse(t: torch.Tensor, group) -> None:
    local = t.coalesce()
    world = group.size
    header = torch.tensor([local._nnz(), *t.shape], dtype=torch.int64)
    headers = torch.empty(world, header.numel(), dtype=torch.int64)
    c.all_gather_into_tensor(headers, header, group=group)
    if not (headers[:, 1:] == header[1:]).all():
        raise ValueError(
            "pscore backend: sparse all_reduce needs the same shape on every rank, got "
            f"{[tuple(h[1:].tolist()) for h in headers]}"
        )
    counts = headers[:, 0].tolist()
    top = max(counts)
    indices = _gather_padded(local.indices(), 1, top, group)
    values = _gather_padded(local.values(), 0, top, group)
    parts_i = [indices[r][:, : counts[r]] for r in range(world)]
    parts_v = [values[r][: counts[r]] for r in range(world)]
    total = torch.sparse_coo_tensor(torch.cat(parts_i, 1), torch.cat(parts_v), t.shape)
    t.copy_(total.coalesce())


def _gather_padded(x: torch.Tensor, dim: int, top: int, group) -> torch.Tensor:
    """x padded with zeros to `top` entries along `dim`, from every rank: (world, *padded)."""
    shape = list(x.shape)
    shape[dim] = top
    padded = torch.zeros(shape, dtype=x.dtype)
    padded.narrow(dim, 0, x.shape[dim]).copy_(x)
    out = torch.empty([group.size, *shape], dtype=x.dtype)
    c.all_gather_into_tensor(carried(out), carried(padded), group=group)
    return out
