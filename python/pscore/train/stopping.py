"""Agreeing on a stop in lockstep strategies: a worker that left the training loop alone would
leave the others waiting in the next collective, so at each step boundary every worker's stop
request is combined (one max all-reduce of two int32 flags: stop, skip the final checkpoint)
and, once some worker asked, every worker learns the first asking worker's reason."""

from __future__ import annotations

from .. import collectives

__all__ = ["agree"]

_REASON_BYTES = 256  # a reason as sent to the other workers (longer ones are cut)


def agree(reason: str | None, keep_checkpoint: bool) -> tuple[str | None, bool]:
    """Collective over the default group: (the stop reason, whether to keep the final
    checkpoint) as agreed; the reason is this worker's own when it asked, else `worker r
    stopped: ...` for the lowest rank that asked, None when no worker asked."""
    import torch

    flags = torch.tensor([reason is not None, not keep_checkpoint], dtype=torch.int32)
    collectives.all_reduce(flags, op="max")
    if not flags[0]:
        return None, keep_checkpoint
    mine = torch.zeros(_REASON_BYTES, dtype=torch.uint8)
    text = (reason or "").encode()[:_REASON_BYTES]
    mine[: len(text)] = torch.tensor(list(text), dtype=torch.uint8)
    every = [torch.zeros_like(mine) for _ in range(collectives.get_world_size())]
    collectives.all_gather(every, mine)
    if reason is None:
        asked = [(r, bytes(t.tolist()).rstrip(b"\0")) for r, t in enumerate(every)]
        rank, theirs = next((r, t) for r, t in asked if t)
        reason = f"worker {rank} stopped: {theirs.decode(errors='replace')}"
    return reason, not flags[1]
