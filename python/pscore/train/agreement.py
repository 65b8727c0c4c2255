"""What the workers must agree on before the first step: the model they built and the
checkpoint they resume from; a disagreement names the workers that differ. Over the job's
collectives, or in an elastic job through its store (elastic.ElasticJob: a gone worker is not
waited for)."""

from __future__ import annotations

import zlib
from typing import Any

from .. import collectives
from . import checkpoint

__all__ = ["check_models_agree", "gather_int", "read_checkpoint", "resume_point", "wait_resumed"]


def gather_int(value: int) -> list[int]:
    """Every worker's `value`, by rank."""
    import torch

    world = collectives.get_world_size()
    if world == 1:
        return [value]
    every = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    collectives.all_gather(every, torch.tensor([value], dtype=torch.int64))
    return [int(t.item()) for t in every]


def _every(value: int, name: str, rank: int, elastic: Any) -> dict[int, int]:
    """{rank: value} of every worker (elastic: of those not gone, through the store)."""
    if elastic is None:
        return dict(enumerate(gather_int(value)))
    elastic.post(name, rank, str(value).encode())
    return {r: int(v) for r, v in elastic.collect(name, f"post its {name}").items()}


def wait_resumed(rank: int, servers: bool, elastic: Any = None) -> None:
    """After each worker loaded the checkpoint and the chief the servers' part: until every
    worker got here (elastic: or is gone; with `servers`, a chief gone before it loaded them
    fails the job rather than train on without the checkpoint)."""
    if elastic is None:
        if collectives.get_world_size() > 1:
            collectives.barrier()
    elif 0 not in _every(0, "resumed", rank, elastic) and servers:
        raise RuntimeError(
            "elastic job: the chief (worker 0) died before the servers held the checkpoint it "
            "resumes from; start the job again"
        )


def check_models_agree(model: Any, rank: int, elastic: Any = None) -> None:
    """Every worker must build the same model: a digest of its parameters' names, shapes and
    dtypes, compared across workers."""
    text = ";".join(f"{n}:{tuple(p.shape)}:{p.dtype}" for n, p in model.named_parameters())
    digests = _every(zlib.crc32(text.encode()), "model", rank, elastic)
    if len(set(digests.values())) > 1:
        first = digests[min(digests)]
        differ = [r for r, d in digests.items() if d != first]
        raise ValueError(
            f"the workers' models differ: worker(s) {differ} built a model whose parameter "
            f"names, shapes or dtypes are not worker {min(digests)}'s (this worker {rank}: "
            f"{text[:300]})"
        )


def read_checkpoint(saver: Any, model: Any, job: dict, rank: int, elastic: Any = None):
    """The latest checkpoint in `saver`'s directory (path, tensors, metadata), its model
    weights loaded into `model`; every worker must find the same one, written by the same
    `job` ({"strategy", "world_size"})."""
    if saver is None:
        return None
    found = saver.restore()
    steps = _every(
        -1 if found is None else int(found[2]["global_step"]), "checkpoint", rank, elastic
    )
    if len(set(steps.values())) > 1:
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


def resume_point(model: Any, run: Any, strategy: str, saver: Any, elastic: Any) -> tuple | None:
    """At the job's start (every worker; elastic: each one that replaces none): the models
    agree, then read_checkpoint's checkpoint (its weights in `model`) or None. An elastic
    worker replacing one that was set up joins the running job instead (None)."""
    if elastic is not None and elastic.joined(run.rank):
        return None
    check_models_agree(model, run.rank, elastic)
    job = {"strategy": strategy, "world_size": run.world_size}
    return read_checkpoint(saver, model, job, run.rank, elastic)
