"""Server-side optimizers of parameter-server tables, with torch.optim's names and defaults.

An optimizer here is a description: the update runs on the servers, in C++, with torch.optim's
arithmetic (so the same gradient sequence gives the same parameters to float tolerance). Its state
(momentum buffers, moments) lives on the servers and is saved with the tables.
"""

from __future__ import annotations

import dataclasses
import math

from .. import _types
from .._enums import by_name

__all__ = ["SGD", "Adagrad", "Adam", "AdamW", "Optimizer", "RMSprop", "fill_spec"]

_KINDS = by_name(_types.OptimizerKind)  # csrc/common/optimizer_formulas.h


def _check(name: str, value: float, *, low: float = 0.0, below: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    value = float(value)
    if not math.isfinite(value) or value < low or (below is not None and value >= below):
        bound = f"[{low}, {below})" if below is not None else f">= {low}"
        raise ValueError(f"invalid {name} {value}: expected a finite value {bound}")
    return value


@dataclasses.dataclass(frozen=True)
class Optimizer:
    """Base class; use SGD, Adagrad, Adam, AdamW or RMSprop."""

    kind = "sgd"

    def _fill(self, spec) -> None:  # writes the hyper-parameters into a _ps.OptimizerSpec
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class SGD(Optimizer):
    """torch.optim.SGD: momentum, dampening, weight decay and Nesterov momentum."""

    lr: float = 1e-3
    momentum: float = 0.0
    dampening: float = 0.0
    weight_decay: float = 0.0
    nesterov: bool = False
    kind = "sgd"

    def __post_init__(self):
        _check("lr", self.lr)
        _check("momentum", self.momentum)
        _check("weight_decay", self.weight_decay)
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")

    def _fill(self, spec) -> None:
        spec.lr, spec.momentum, spec.dampening = self.lr, self.momentum, self.dampening
        spec.weight_decay, spec.nesterov = self.weight_decay, bool(self.nesterov)


@dataclasses.dataclass(frozen=True)
class Adagrad(Optimizer):
    """torch.optim.Adagrad."""

    lr: float = 0.01
    lr_decay: float = 0.0
    weight_decay: float = 0.0
    initial_accumulator_value: float = 0.0
    eps: float = 1e-10
    kind = "adagrad"

    def __post_init__(self):
        _check("lr", self.lr)
        _check("lr_decay", self.lr_decay)
        _check("weight_decay", self.weight_decay)
        _check("initial_accumulator_value", self.initial_accumulator_value)
        _check("eps", self.eps)

    def _fill(self, spec) -> None:
        spec.lr, spec.lr_decay, spec.weight_decay = self.lr, self.lr_decay, self.weight_decay
        spec.initial_accumulator_value, spec.eps = self.initial_accumulator_value, self.eps


@dataclasses.dataclass(frozen=True)
class Adam(Optimizer):
    """torch.optim.Adam (L2 weight decay added to the gradient), with amsgrad."""

    lr: float = 1e-3
    betas: tuple = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False
    kind = "adam"

    def __post_init__(self):
        _check("lr", self.lr)
        if not isinstance(self.betas, (tuple, list)) or len(self.betas) != 2:
            raise ValueError(f"betas must be a pair of floats, got {self.betas!r}")
        _check("beta1", self.betas[0], below=1.0)
        _check("beta2", self.betas[1], below=1.0)
        _check("eps", self.eps)
        _check("weight_decay", self.weight_decay)

    def _fill(self, spec) -> None:
        spec.lr, spec.eps, spec.weight_decay = self.lr, self.eps, self.weight_decay
        spec.beta1, spec.beta2 = float(self.betas[0]), float(self.betas[1])
        spec.amsgrad = bool(self.amsgrad)


@dataclasses.dataclass(frozen=True)
class AdamW(Adam):
    """torch.optim.AdamW (decoupled weight decay, default 1e-2)."""

    weight_decay: float = 1e-2
    kind = "adamw"


@dataclasses.dataclass(frozen=True)
class RMSprop(Optimizer):
    """torch.optim.RMSprop, with momentum and the centered variant."""

    lr: float = 1e-2
    alpha: float = 0.99
    eps: float = 1e-8
    weight_decay: float = 0.0
    momentum: float = 0.0
    centered: bool = False
    kind = "rmsprop"

    def __post_init__(self):
        _check("lr", self.lr)
        _check("alpha", self.alpha)
        _check("eps", self.eps)
        _check("weight_decay", self.weight_decay)
        _check("momentum", self.momentum)

    def _fill(self, spec) -> None:
        spec.lr, spec.alpha, spec.eps = self.lr, self.alpha, self.eps
        spec.weight_decay, spec.momentum = self.weight_decay, self.momentum
        spec.centered = bool(self.centered)


def fill_spec(opt: Optimizer, spec, clip_norm: float | None, clip_value: float | None) -> None:
    """Writes `opt` and the clipping settings into a _ps.OptimizerSpec."""
    if not isinstance(opt, Optimizer):
        raise TypeError(
            f"optimizer must be pscore.ps.SGD/Adagrad/Adam/AdamW/RMSprop, not {type(opt).__name__}"
        )
    spec.kind = _KINDS[opt.kind]
    opt._fill(spec)
    spec.clip_norm = 0.0 if clip_norm is None else _check("clip_norm", clip_norm)
    spec.clip_value = 0.0 if clip_value is None else _check("clip_value", clip_value)
    if clip_norm == 0 or clip_value == 0:
        raise ValueError("clip_norm and clip_value must be > 0 (use None to disable clipping)")
