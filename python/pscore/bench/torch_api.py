"""The collective benchmarks' `--api torch` row: the same operation through torch.distributed on
a group made with `init_process_group("pscore")` (pscore's torch backend), timed in the same
processes and rounds as pscore's own call, so the table shows what the backend adds per call.
The gloo peer goes through the same torch calls on a gloo group."""

from __future__ import annotations

import argparse

from .buffers import blocks, operands

__all__ = ["API_NAMES", "TORCH_ROW", "init_groups", "parse_apis", "row_key", "torch_calls"]

API_NAMES = ("pscore", "torch")
TORCH_ROW = "pscore_torch"
"""The JSON key of the torch-API row (pscore through torch.distributed)."""


def parse_apis(text: str) -> tuple[str, ...]:
    """'pscore,torch' -> ('pscore', 'torch'): which APIs call pscore, each timed in every round."""
    names = tuple(part.strip() for part in text.split(","))
    if not all(n in API_NAMES for n in names) or len(set(names)) != len(names):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of APIs: expected one or both of {', '.join(API_NAMES)}, "
            "comma-separated, each once"
        )
    return names


def row_key(api: str) -> str:
    """The JSON key of an API's row: "pscore" for pscore's own calls."""
    return TORCH_ROW if api == "torch" else "pscore"


def init_groups(dist, rank: int, world: int, init_file: str, apis, peer: str | None):
    """torch.distributed's groups for the run: (the pscore-backed group or None, the group of
    torch backend `peer` (gloo, nccl) or None). With the torch API the default group is pscore's
    and the peer gets a new group."""
    if "torch" not in apis:
        if not peer:
            return None, None
        dist.init_process_group(
            peer, init_method=f"file://{init_file}", rank=rank, world_size=world
        )
        return None, dist.group.WORLD
    from .. import torch_backend  # noqa: F401 - registers the "pscore" backend

    dist.init_process_group(
        "pscore", init_method=f"file://{init_file}", rank=rank, world_size=world
    )
    return dist.group.WORLD, dist.new_group(backend=peer) if peer else None


def torch_calls(name: str, dist, group, world: int, ones, empty):
    """make(nbytes) -> a call of collective `name` through torch.distributed on `group`, its
    buffers (buffers.py) built once per size. torch 2.13 renamed all_gather_into_tensor and
    reduce_scatter_tensor (the old names warn); older torch has only those."""

    def make(nbytes):  # noqa: PLR0911 - one return per operation
        b = operands(name, nbytes, world, ones, empty)
        if name == "allreduce":
            return lambda: dist.all_reduce(b.x, group=group)
        if name == "broadcast":
            return lambda: dist.broadcast(b.x, 0, group=group)
        if name == "reduce":
            return lambda: dist.reduce(b.x, 0, group=group)
        if name == "allgather":
            gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
            return lambda: gather(b.out, b.part, group=group)
        if name == "reduce_scatter":
            scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
            return lambda: scatter(b.out, b.inp, group=group)
        if name == "alltoall":
            return lambda: dist.all_to_all_single(b.out, b.inp, group=group)
        if name in ("scatter", "gather"):
            root_list = blocks(b.whole, world) if dist.get_rank(group) == 0 else None
            if name == "scatter":
                return lambda: dist.scatter(b.part, root_list, 0, group=group)
            return lambda: dist.gather(b.part, root_list, 0, group=group)
        if name == "barrier":
            return lambda: dist.barrier(group=group)
        raise ValueError(name)

    return make
