"""The Trainer's optimizer, named once: "sgd", "adagrad", "adam", "adamw" or "rmsprop" with
torch.optim's option names (or a torch.optim class). The same choice becomes a torch.optim
optimizer where the update runs on the worker (allreduce, Hogwild) and pscore's server-side
optimizer where it runs on the parameter servers (the PS strategies), with the same arithmetic."""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["OptimizerChoice", "resolve"]

_NAMES = ("sgd", "adagrad", "adam", "adamw", "rmsprop")


def _torch_classes() -> dict[str, Any]:
    import torch

    o = torch.optim
    return {
        "sgd": o.SGD,
        "adagrad": o.Adagrad,
        "adam": o.Adam,
        "adamw": o.AdamW,
        "rmsprop": o.RMSprop,
    }


@dataclasses.dataclass(frozen=True)
class OptimizerChoice:
    """name: one of sgd/adagrad/adam/adamw/rmsprop, or None for another torch.optim class
    (`cls`), which only the worker-side strategies can run. args: torch.optim's keywords."""

    name: str | None
    args: dict
    cls: Any = None

    def torch(self, params: Any) -> Any:
        """A torch.optim optimizer over `params`."""
        cls = self.cls or _torch_classes()[self.name]
        try:
            return cls(params, **self.args)
        except TypeError as e:
            raise TypeError(f"optimizer {self.label}: {e}") from None

    def server(self) -> Any:
        """The parameter servers' optimizer (pscore.ps.optim) with these options."""
        from ..ps import optim

        if self.name is None:
            raise ValueError(
                f"optimizer {self.label} cannot run on the parameter servers; they run "
                f"{', '.join(_NAMES)} (pass one of those names or its torch.optim class)"
            )
        cls = {"sgd": optim.SGD, "adagrad": optim.Adagrad, "adam": optim.Adam}.get(self.name)
        cls = cls or {"adamw": optim.AdamW, "rmsprop": optim.RMSprop}[self.name]
        fields = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(self.args) - fields)
        if unknown:
            raise TypeError(
                f"optimizer {self.name!r} on the parameter servers takes no option "
                f"{', '.join(map(repr, unknown))}; it takes {', '.join(sorted(fields))}"
            )
        return cls(**self.args)

    @property
    def label(self) -> str:
        return repr(self.name) if self.name else self.cls.__name__


def resolve(optimizer: Any, optimizer_args: dict | None) -> OptimizerChoice:
    """The Trainer's optimizer= and optimizer_args= checked: a name or a torch.optim class."""
    args = dict(optimizer_args or {})
    if isinstance(optimizer, str):
        name = optimizer.lower()
        if name not in _NAMES:
            raise ValueError(f"optimizer {optimizer!r} is not one of {', '.join(_NAMES)}")
        return OptimizerChoice(name, args)
    if isinstance(optimizer, type):
        for name, cls in _torch_classes().items():
            if optimizer is cls:
                return OptimizerChoice(name, args)
        import torch

        if issubclass(optimizer, torch.optim.Optimizer):
            return OptimizerChoice(None, args, optimizer)
    raise TypeError(
        f"optimizer must be one of {', '.join(_NAMES)} or a torch.optim.Optimizer class, "
        f"not {optimizer!r}"
    )
