"""A torch module's parameters in shared tables, so Hogwild workers train one model in place:
PyTorch's mnist_hogwild pattern (model.share_memory() and an optimizer per process), with
pscore's fused update kernels, optimizer state shared by every process, and tables that any
process can attach to by name.

    model = Net()
    shared = SharedParameters(model, optimizer="sgd", lr=0.01, momentum=0.5)  # once, the parent
    procs = [mp.Process(target=worker, args=(model,)) for _ in range(2)]      # model stays bound

    def worker(model):
        opt = SharedParameters.of(model).optimizer(model)   # torch.optim.SGD(lr, momentum)'s step
        for x, y in batches:
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()                   # lock-free, in place, seen by every worker at once

A module travels bound through torch.multiprocessing (spawn, fork, queues; torch_pickling.py);
or a worker binds its own copy of the architecture with shared.bind(model). Dense gradients
update the whole table; sparse ones (nn.Embedding(sparse=True)) apply the dense update to their
rows only, with repeated rows summed first as torch's optimizers do.
"""

from __future__ import annotations

import math
from typing import Any

from . import optim_options, torch_pickling
from .table import SharedTable, _default_name

__all__ = ["HogwildOptimizer", "SharedParameters"]

_ATTRIBUTE = "_pscore_hogwild"  # a bound module's SharedParameters


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
    of the optimizer alongside: "sgd", "adagrad", "adam" or "adamw", and its options with
    torch.optim's names and defaults (lr, momentum, dampening, nesterov, weight_decay, maximize;
    lr_decay, initial_accumulator_value, eps; betas, amsgrad, decoupled_weight_decay). They are
    the defaults of optimizer(); whether momentum is used, amsgrad and
    initial_accumulator_value are fixed here, as they decide the state the tables hold. The
    module given here is bound at once."""

    def __init__(
        self, module: Any, *, optimizer: str = "sgd", prefix: str | None = None, **options: Any
    ):
        self.optimizer_name = optimizer
        self.defaults = optim_options.resolve(optimizer, options)
        optim_options.kernel_options(optimizer, self.defaults)  # bad options fail before tables
        state = optim_options.table_state(optimizer, self.defaults)
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
                    optimizer=state,
                    init=p.detach().reshape(shape),
                    initial_accumulator=self.defaults.get("initial_accumulator_value", 0.0),
                )
        except BaseException:
            self.close()
            raise
        if not self.tables:
            raise ValueError("the module has no parameters to share")
        self.bind(module)

    @classmethod
    def _from_tables(cls, optimizer: str, defaults: dict, tables: dict) -> SharedParameters:
        self = cls.__new__(cls)
        self.optimizer_name = optimizer
        self.defaults = defaults
        # The same handle the module's pickled parameters rebuild on, so they stay bound to it.
        self.tables = {n: torch_pickling.attached(*spec) for n, spec in tables.items()}
        return self

    @classmethod
    def attach(
        cls,
        module: Any,
        prefix: str,
        *,
        optimizer: str = "sgd",
        timeout: float = 30.0,
        **options: Any,
    ) -> SharedParameters:
        """The tables another process made with SharedParameters(module, prefix=prefix,
        optimizer=optimizer, **options), bound to `module` (the same architecture): waits up
        to `timeout` seconds for each; ValueError when a table's shape, dtype or optimizer
        state is not what `module` and the options need."""
        defaults = optim_options.resolve(optimizer, options)
        state = optim_options.table_state(optimizer, defaults) or "none"
        self = cls.__new__(cls)
        self.optimizer_name, self.defaults, self.tables = optimizer, defaults, {}
        try:
            for name, p in module.named_parameters():
                _check_parameter(name, p)
                t = self.tables[name] = SharedTable.attach(
                    f"{prefix}.{name}",
                    shape=_table_shape(tuple(p.shape)),
                    dtype=str(p.dtype).replace("torch.", ""),
                    timeout=timeout,
                )
                if t.optimizer != state:
                    raise ValueError(
                        f"shared table '{t.name}' holds optimizer state {t.optimizer!r}; "
                        f"optimizer {optimizer!r} with these options needs {state!r}"
                    )
            self.bind(module)
        except BaseException:
            self.close()
            raise
        return self

    def unbind(self, module: Any) -> Any:
        """Makes `module`'s parameters ordinary tensors holding their tables' current values
        (copies), so the module outlives the tables; returns the module."""
        self.check_bound(module)
        for _, p in module.named_parameters():
            p.data = p.data.clone()
        del module.__dict__[_ATTRIBUTE]
        return module

    def __reduce__(self):
        # The tables pickle by name: a spawned worker attaches to the same memory.
        tables = {n: (t.name, t.shape, t.dtype.name) for n, t in self.tables.items()}
        return (SharedParameters._from_tables, (self.optimizer_name, self.defaults, tables))

    @staticmethod
    def of(module: Any) -> SharedParameters:
        """The SharedParameters `module` is bound to (it travels with the module through
        torch.multiprocessing). ValueError if it is not bound or a parameter came unbound."""
        shared = module.__dict__.get(_ATTRIBUTE)
        if shared is None:
            raise ValueError(
                "the module is not bound to shared tables; make SharedParameters(module) or "
                "call shared.bind(module)"
            )
        shared.check_bound(module)
        return shared

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
            torch_pickling.track(self.tables[name])
            p.data = self.tables[name].torch().view(p.shape)
        module.__dict__[_ATTRIBUTE] = self
        return module

    def check_bound(self, module: Any) -> None:
        """ValueError when `module` is not bound to these tables; RuntimeError naming the first
        parameter of a module bound here that is no longer a view of its table, and why."""
        for name, p in module.named_parameters():
            t = self.tables.get(name)
            if t is not None and p.data_ptr() == torch_pickling.table_address(t):
                continue
            if t is None or module.__dict__.get(_ATTRIBUTE) is not self:
                raise ValueError(
                    f"parameter {name!r} is not bound to these shared tables; call "
                    "shared.bind(module) first"
                )
            raise RuntimeError(
                f"parameter {name!r} is no longer bound to shared table '{t.name}': its "
                "storage was moved, as model.share_memory() and share_memory_() do (torch "
                "copies memory it did not allocate into a segment of its own; so does its "
                "multiprocessing pickler for a tensor it does not know is a table's view); "
                "SharedParameters already shares the parameters, so drop that call and bind "
                "again with shared.bind(module)"
            )

    def optimizer(self, module: Any, lr: float | None = None, **options: Any) -> HogwildOptimizer:
        """A HogwildOptimizer over `module`'s parameters, which must be bound to these tables;
        `options` override the defaults given at creation."""
        return HogwildOptimizer(self, module, lr, **options)

    def close(self) -> None:
        """Releases this process's handles; the last process to close removes the tables.
        Bound parameters stay valid (the memory lives while a view does), but torch's pickler
        no longer sends them by table name."""
        for t in self.tables.values():
            torch_pickling.forget(t)
            t.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class HogwildOptimizer:
    """torch.optim-style zero_grad() / step() that applies each parameter's gradient to its
    shared table with the fused kernels, as torch.optim.SGD, Adagrad, Adam or AdamW would, with
    the optimizer state (momentum buffers, accumulators, moments) in the tables: every process
    steps the same state. The step count of Adagrad's lr_decay and Adam's bias correction is
    each table's, counted over all processes. Lock-free unless locked=True. Sparse gradients
    update only their rows, repeated rows summed first (coalesce)."""

    def __init__(
        self,
        shared: SharedParameters,
        module: Any,
        lr: float | None = None,
        *,
        locked: bool = False,
        **options: Any,
    ):
        if lr is not None:
            options["lr"] = lr
        self.kind = shared.optimizer_name
        self.options = optim_options.resolve(self.kind, {**shared.defaults, **options})
        optim_options.check_tables_serve(self.kind, shared.defaults, self.options)
        self._kernel_options = optim_options.kernel_options(self.kind, self.options)
        self.locked = locked
        shared.check_bound(module)
        self._pairs = [(p, shared.tables[n]) for n, p in module.named_parameters()]
        self._addresses = [torch_pickling.table_address(t) for _, t in self._pairs]
        self._shared, self._module = shared, module

    @property
    def lr(self) -> float:
        return self.options["lr"]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p, _ in self._pairs:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.zero_()

    def step(self) -> None:
        if any(p.data_ptr() != a for (p, _), a in zip(self._pairs, self._addresses)):
            self._shared.check_bound(self._module)  # raises, naming the moved parameter
        for p, t in self._pairs:
            g = p.grad
            if g is None:
                continue
            if g.is_sparse:
                ids, g, coalesce = g._indices()[0], g._values(), True
            else:
                ids, g, coalesce = None, g.detach().reshape(t.shape).contiguous(), False
            t.step_with(self._kernel_options, ids, g, locked=self.locked, coalesce=coalesce)
