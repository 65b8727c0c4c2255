"""A torch optimizer's state as flat named tensors (for safetensors checkpoints) and back."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["load_optimizer_tensors", "optimizer_tensors"]


def optimizer_tensors(optimizer: Any, prefix: str = "optimizer") -> dict:
    """{"<prefix>/<param index>/<state name>": tensor}; scalar state (e.g. step) becomes a
    0-d tensor; the hyper-parameters ride along as a JSON uint8 tensor "<prefix>/groups"."""
    import torch

    sd = optimizer.state_dict()
    out = {}
    for index, state in sd["state"].items():
        for key, value in state.items():
            t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            out[f"{prefix}/{index}/{key}"] = t.detach().clone().contiguous()
    groups = json.dumps(sd["param_groups"]).encode()
    out[f"{prefix}/groups"] = torch.frombuffer(bytearray(groups), dtype=torch.uint8)
    return out


def load_optimizer_tensors(optimizer: Any, tensors: dict, prefix: str = "optimizer") -> None:
    """Restores what optimizer_tensors saved into `optimizer` (built over the same parameters)."""
    key = f"{prefix}/groups"
    if key not in tensors:
        raise ValueError(f"the checkpoint has no optimizer state ({key!r} is missing)")
    groups = json.loads(bytes(tensors[key].numpy()).decode())
    state: dict = {}
    for name, t in tensors.items():
        parts = name.split("/")
        if len(parts) != 3 or parts[0] != prefix:
            continue
        state.setdefault(int(parts[1]), {})[parts[2]] = t
    optimizer.load_state_dict({"state": state, "param_groups": groups})
