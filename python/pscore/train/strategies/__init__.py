"""The training strategies by name, and "auto"'s choice among them."""

from __future__ import annotations

import importlib
from typing import Any

from .base import Strategy

__all__ = ["AUTO_EMBEDDING_ROWS", "NAMES", "Strategy", "make"]

# name -> "module:class", imported when chosen (each strategy is one file).
_CLASSES = {
    "allreduce": "allreduce:AllReduce",
    "ps-sync": "ps_sync:PSSync",
    "ps-async": "ps_async:PSAsync",
    "ssp": "ps_async:SSP",
    "hogwild": "hogwild:Hogwild",
    "distributed-hogwild": "distributed_hogwild:DistributedHogwild",
    "hybrid": "hybrid:Hybrid",
}
NAMES = (*_CLASSES, "auto")
"""Every name Trainer(strategy=...) takes (pscore.train.STRATEGIES)."""

# "auto" puts a model's embedding tables on the servers from this many rows (summed) on.
AUTO_EMBEDDING_ROWS = 100_000


def _class(name: str) -> type:
    module, cls = _CLASSES[name].split(":")
    return getattr(importlib.import_module(f".{module}", __name__), cls)


def _embedding_rows(model: Any) -> int:
    import torch

    kinds = (torch.nn.Embedding, torch.nn.EmbeddingBag)
    return sum(m.num_embeddings for m in model.modules() if isinstance(m, kinds))


def auto(run: Any, model: Any) -> str:
    """The framework of the cluster's SINGA topology when it has one (Sandblaster: ps-sync,
    AllReduce: allreduce, Downpour: ps-async, Distributed Hogwild: distributed-hogwild); else
    hybrid for a model whose embedding tables hold >= AUTO_EMBEDDING_ROWS rows and a job with
    servers; else ps-sync when the job has servers; else allreduce."""
    if run.topology is not None:
        return run.topology.strategy
    if run.num_servers > 0:
        return "hybrid" if _embedding_rows(model) >= AUTO_EMBEDDING_ROWS else "ps-sync"
    return "allreduce"


def make(strategy: Any, run: Any, model: Any, options: dict | None = None) -> Strategy:
    """A Strategy from a name (options: its keyword arguments) or a Strategy instance."""
    if isinstance(strategy, Strategy):
        if options:
            raise TypeError("strategy_args apply to a strategy given by name, not an instance")
        return strategy
    if not isinstance(strategy, str):
        raise TypeError(f"strategy must be a name or a Strategy, not {type(strategy).__name__}")
    name = strategy.lower().replace("_", "-")
    if name == "auto":
        name = auto(run, model)
    if name not in _CLASSES:
        raise ValueError(f"unknown strategy {strategy!r}; the strategies are {', '.join(NAMES)}")
    return _class(name)(**(options or {}))
