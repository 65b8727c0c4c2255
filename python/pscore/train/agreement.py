"""What the workers must agree on before the first step: the model they built and the
checkpoint they resume from; a disagreement names the workers that differ."""

from __future__ import annotations

import zlib
from typing import Any

from .. import collectives
from . import checkpoint

__all__ = ["check_models_agree", "gather_int", "read_checkpoint"]


def gather_int(value: int) -> list[int]:
    """Every worker's `value`, by rank."""
    import torch

    world = collectives.get_world_size()
    if world == 1:
        return [value]
    every = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    collectives.all_gather(every, torch.tensor([value], dtype=torch.int64))
    return [int(t.item()) for t in every]


def check_models_agree(model: Any, rank: int) -> None:
    """Every worker must build the same model: a digest of its parameters' names, shapes and
    dtypes, compared across workers."""
    text = ";".join(f"{n}:{tuple(p.shape)}:{p.dtype}" for n, p in model.named_parameters())
    digests = gather_int(zlib.crc32(text.encode()))
    if len(set(digests)) > 1:
        differ = [r for r, d in enumerate(digests) if d != digests[0]]
        raise ValueError(
            f"the workers' models differ: worker(s) {differ} built a model whose parameter "
            f"names, shapes or dtypes are not worker 0's (this worker {rank}: {text[:300]})"
        )


def read_checkpoint(saver: Any, model: Any, job: dict) -> tuple | None:
    """The latest checkpoint in `saver`'s directory (path, tensors, metadata), its model
    weights loaded into `model`; every worker must find the same one, written by the same
    `job` ({"strategy", "world_size"})."""
    if saver is None:
        return None
    found = saver.restore()
    steps = gather_int(-1 if found is None else int(found[2]["global_step"]))
    if len(set(steps)) > 1:
        raise ValueError(
            f"the workers found different checkpoints in {saver.directory}: global steps by "
            f"worker {steps} (-1: none). checkpoint_dir must be one directory every worker "
            "reads (a shared filesystem on several machines)"
        )
    if found is None:
        return None
    path, tensors, metadata = found
    checkpoint.check_same_job(path, metadata, job)
    weights, _ = checkpoint.unpack(tensors)
    try:
        model.load_state_dict(weights)
    except RuntimeError as e:
        raise ValueError(f"the checkpoint {path} does not fit this model: {e}") from e
    return found
