"""The training benchmark's workloads: a model, its data, loss and optimizer, the batch per
worker, and what is timed (time to a test accuracy, or samples/s only). Adding a workload is
adding one entry to WORKLOADS; every system (pscore's strategies and the DDP peers) trains the
same one."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

__all__ = ["WORKLOADS", "Workload", "workload"]


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    make_model: Callable[[], Any]  # the same initial weights on every call
    make_data: Callable[[], tuple]  # -> (train, test), each a tuple (inputs..., target)
    loss_fn: Callable[[Any, Any], Any]
    optimizer: str  # a pscore.train optimizer name
    optimizer_args: dict
    batch_size: int  # per worker
    target_accuracy: float | None  # time to this test accuracy; None: samples/s only
    max_epochs: int = 30  # cap on the epochs of a time-to-accuracy run
    steps: int = 20  # samples/s runs: timed steps per worker (after `warmup`)
    warmup: int = 3
    about: str = ""
    strategies: tuple[str, ...] | None = None  # the pscore strategies that run it (None: all)


def _cross_entropy(output: Any, target: Any) -> Any:
    import torch

    return torch.nn.functional.cross_entropy(output, target)


def _mlp(*widths: int) -> Any:
    import torch

    torch.manual_seed(0)
    layers: list = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def _digits() -> tuple:
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    x_train, x_test, y_train, y_test = train_test_split(x, y, test_size=0.25, random_state=0)
    return (x_train, y_train), (x_test, y_test)


MLP_WIDTHS = (1024, 2048, 2048, 2048, 10)


def _synthetic(n: int = 4096) -> tuple:
    """Inputs from a fixed seed, labels from a fixed random projection (a learnable signal)."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, MLP_WIDTHS[0], generator=g)
    y = (x @ torch.randn(MLP_WIDTHS[0], MLP_WIDTHS[-1], generator=g)).argmax(1)
    return (x, y), (x[:256], y[:256])


def _ctr() -> Workload:
    """The click-through model of pscore.bench.ctr (a 1M-row embedding table): what hybrid is
    for, against allreduce and DDP with the same dense embedding gradients."""
    from . import ctr

    return Workload(**ctr.workload_fields(), strategies=("hybrid", "allreduce"))


WORKLOADS = {
    w.name: w
    for w in (
        Workload(
            "digits",
            lambda: _mlp(64, 256, 256, 10),
            _digits,
            _cross_entropy,
            "sgd",
            {"lr": 0.05, "momentum": 0.9},
            batch_size=32,
            target_accuracy=0.97,
            about="MLP 64-256-256-10 on scikit-learn digits, time to 97% test accuracy",
        ),
        Workload(
            "mlp",
            lambda: _mlp(*MLP_WIDTHS),
            _synthetic,
            _cross_entropy,
            "sgd",
            {"lr": 0.01, "momentum": 0.9},
            batch_size=64,
            target_accuracy=None,
            about="MLP 1024-2048-2048-2048-10 (10.5 M parameters), synthetic data, samples/s",
        ),
        _ctr(),
    )
}


def workload(name: str, max_epochs: int | None = None) -> Workload:
    """WORKLOADS[name], with its epoch cap replaced by `max_epochs` when given."""
    w = WORKLOADS[name]
    return w if max_epochs is None else dataclasses.replace(w, max_epochs=max_epochs)
