"""The buffers a collective benchmark times, built the same way for every library in a run (pscore,
torch.distributed and the mpi4py peer), so that all of them move the same kind of memory.

`--buffers torch` (the default) allocates with torch's CPU allocator, as a training job's tensors
are; `--buffers numpy` with numpy's, which asks the kernel for transparent huge pages on large
arrays (madvise), and then single-copy reads between processes run about a third faster.
"""

from __future__ import annotations

from types import SimpleNamespace

__all__ = ["BUFFER_KINDS", "allocator", "blocks", "operands"]

BUFFER_KINDS = ("torch", "numpy")


def allocator(kind: str, device="cpu"):
    """(ones, empty): float32 vectors of n elements as torch tensors on `device`, their memory
    from torch's allocator or, with kind "numpy", from numpy's (CPU only)."""
    import torch

    if kind == "numpy":
        import numpy as np

        return (
            lambda n: torch.from_numpy(np.ones(n, np.float32)),
            lambda n: torch.from_numpy(np.empty(n, np.float32)),
        )
    return (
        lambda n: torch.ones(n, dtype=torch.float32, device=device),
        lambda n: torch.empty(n, dtype=torch.float32, device=device),
    )


def operands(name: str, nbytes: int, world: int, ones, empty) -> SimpleNamespace:
    """The buffers of one call of collective `name` on an nbytes message: `x` for the in-place
    ones, `part`/`out` for all_gather, `out`/`inp` for reduce_scatter and all_to_all, `part`/
    `whole` for scatter (the root's `whole` cut into blocks) and gather (into the root's)."""
    n = max(1, nbytes // 4)
    if name == "allgather":
        part = ones(max(1, n // world))
        return SimpleNamespace(part=part, out=empty(len(part) * world))
    if name == "scatter":
        part = empty(max(1, n // world))
        return SimpleNamespace(part=part, whole=ones(len(part) * world))
    if name == "gather":
        part = ones(max(1, n // world))
        return SimpleNamespace(part=part, whole=empty(len(part) * world))
    if name == "reduce_scatter":
        out = empty(max(1, n // world))
        return SimpleNamespace(out=out, inp=ones(len(out) * world))
    if name == "alltoall":
        m = max(world, n - n % world)
        return SimpleNamespace(inp=ones(m), out=empty(m))
    return SimpleNamespace(x=ones(n))


def blocks(whole, world: int) -> list:
    """`whole` as `world` equal consecutive views: a scatter's or gather's list of tensors."""
    m = len(whole) // world
    return [whole[i * m : (i + 1) * m] for i in range(world)]
