"""A torch module's parameters in shared tables, so Hogwild workers train one model in place:
PyTorch's mnist_hogwild pattern (model.share_memory() and an optimizer per process), with
pscore's fused update kernels and tables that any process can attach to by name.

    shared = SharedParameters(model, optimizer="adagrad")   # once, in the parent
    train(worker, num_procs=4, args=(shared,))               # it travels by table names

    def worker(rank, shared):
        model = Net()
        shared.bind(model)               # the parameters become views of the tables, no copy
        opt = shared.optimizer(model, lr=0.01)
        for x, y in batches:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()                   # lock-free, in place, seen by every worker at once

Dense gradients update the whole table; sparse ones (nn.Embedding(sparse=True)) update only
their rows, with repeated rows summed first as torch's optimizers do.
"""

from __future__ import annotations

import math
from typing import Any

from .table import SharedTable, _default_name

_OPTIMIZERS = ("sgd", "adagrad", "adam")


def _table_shape(shape: tuple) -> tuple:
    """Tables have 1 to 4 dims: scalars become (1,), deeper tensors (rows, rest)."""
    if not shape:
        return (1,)
    if len(shape) > 4:
        return (shape[0], math.prod(shape[1:]))
    return tuple(shape)


def _check_parameter(name: str, p: Any) -> None:
    if p.device.type != "cpu":
        raise ValueError(f"parameter {name!r} is on {p.device}; shared tables live in CPU memory")
    if str(p.dtype) not in ("torch.float32", "torch.float64"):
        raise TypeError(f"parameter {name!r} is {p.dtype}; shared tables hold float32 or float64")
    if p.numel() == 0:
        raise ValueError(f"parameter {name!r} is empty")


class SharedParameters:
    """One SharedTable per parameter of `module`, initialised from its values, with the state
    of `optimizer` ("sgd", "adagrad" or "adam") alongside. The module given here is bound at
    once; other processes bind their own copy of the architecture with bind()."""

    def __init__(
        self,
        module: Any,
        *,
        optimizer: str = "sgd",
        prefix: str | None = None,
        initial_accumulator: float = 0.0,
    ):
        if optimizer not in _OPTIMIZERS:
            raise ValueError(f"optimizer {optimizer!r} is not one of {', '.join(_OPTIMIZERS)}")
        self.optimizer_name = optimizer
        self.tables: dict[str, SharedTable] = {}
        prefix = prefix or _default_name()
        try:
            for name, p in module.named_parameters():
                _check_parameter(name, p)
                shape = _table_shape(tuple(p.shape))
                self.tables[name] = SharedTable.create(
                    f"{prefix}.{name}",
                    shape,
                    dtype=str(p.dtype).replace("torch.", ""),
                    optimizer=None if optimizer == "sgd" else optimizer,
                    init=p.detach().reshape(shape),
                    initial_accumulator=initial_accumulator,
                )
        except BaseException:
            self.close()
            raise
        if not self.tables:
            raise ValueError("the module has no parameters to share")
        self.bind(module)

    @classmethod
    def _from_tables(cls, optimizer: str, tables: dict) -> SharedParameters:
        self = cls.__new__(cls)
        self.optimizer_name = optimizer
        self.tables = tables
        return self

    def __reduce__(self):
        # The tables pickle by name: a spawned worker attaches to the same memory.
        return (SharedParameters._from_tables, (self.optimizer_name, self.tables))

    def bind(self, module: Any) -> Any:
        """Points every parameter of `module` (the same architecture) at its table, in place
        and without a copy; returns the module. ValueError names what does not match."""
        params = dict(module.named_parameters())
        missing, extra = (
            sorted(set(self.tables) - set(params)),
            sorted(set(params) - set(self.tables)),
        )
        if missing or extra:
            raise ValueError(
                f"the module does not match the shared parameters: missing {missing}, "
                f"unexpected {extra}"
            )
        for name, p in params.items():
            t = self.tables[name]
            if _table_shape(tuple(p.shape)) != t.shape or str(p.dtype) != f"torch.{t.dtype}":
                raise ValueError(
                    f"parameter {name!r} is {tuple(p.shape)} {p.dtype}; its shared table is "
                    f"{t.shape} {t.dtype}"
                )
        for name, p in params.items():
            p.data = self.tables[name].torch().view(p.shape)
        return module

    def optimizer(self, module: Any, lr: float, **kwargs: Any) -> HogwildOptimizer:
        """A HogwildOptimizer over `module`'s parameters, which must be bound to these tables."""
        return HogwildOptimizer(self, module, lr, **kwargs)

    def close(self) -> None:
        """Releases this process's handles; the last process to close removes the tables.
        Bound parameters stay valid (the memory lives while a view does)."""
        for t in self.tables.values():
            t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class HogwildOptimizer:
    """torch.optim-style zero_grad() / step() that applies each parameter's gradient to its
    shared table with the fused kernels: SGD, Adagrad, or Adam (no weight decay; its bias
    correction counts steps on each table across all processes). Lock-free unless locked=True.
    Sparse gradients update only their rows, repeated rows summed first (coalesce)."""

    def __init__(
        self,
        shared: SharedParameters,
        module: Any,
        lr: float,
        *,
        betas: tuple = (0.9, 0.999),
        eps: float | None = None,
        locked: bool = False,
    ):
        self.kind = shared.optimizer_name
        self.lr, self.betas, self.locked = float(lr), tuple(betas), locked
        self.eps = eps if eps is not None else (1e-10 if self.kind == "adagrad" else 1e-8)
        self._pairs = []
        for name, p in module.named_parameters():
            t = shared.tables.get(name)
            if t is None or p.data_ptr() != t.torch().data_ptr():
                raise ValueError(
                    f"parameter {name!r} is not bound to its shared table; call "
                    "shared.bind(module) first"
                )
            self._pairs.append((p, t))

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, _ in self._pairs:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self) -> None:
        for p, t in self._pairs:
            g = p.grad
            if g is None:
                continue
            if g.is_sparse:
                self._apply(t, g._indices()[0], g._values(), coalesce=True)
            else:
                self._apply(t, None, g.detach().reshape(t.shape).contiguous(), coalesce=False)

    def _apply(self, t: SharedTable, ids: Any, g: Any, coalesce: bool) -> None:
        kw = {"locked": self.locked, "coalesce": coalesce}
        if self.kind == "sgd":
            t.sgd(ids, g, lr=self.lr, **kw)
        elif self.kind == "adagrad":
            t.adagrad(ids, g, lr=self.lr, eps=self.eps, **kw)
        else:
            t.adam(ids, g, lr=self.lr, betas=self.betas, eps=self.eps, **kw)
