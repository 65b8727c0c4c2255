"""pscore.train: one Trainer that trains a torch model on a cluster under every strategy of the
seeds: allreduce, ps-sync (Sandblaster), ps-async (Downpour), ssp, hogwild,
distributed-hogwild, hybrid (dense by allreduce, embeddings on the servers) and auto."""

from __future__ import annotations

from .hooks import EvaluationHook, Hook, LoggingHook, NanLossHook, StopAtStepHook
from .strategies import NAMES as STRATEGIES
from .strategies import Strategy
from .tensorboard import TensorBoardHook
from .trainer import Trainer

__all__ = [
    "STRATEGIES",
    "EvaluationHook",
    "Hook",
    "LoggingHook",
    "NanLossHook",
    "StopAtStepHook",
    "Strategy",
    "TensorBoardHook",
    "Trainer",
]
