"""SharedTable: a Hogwild parameter table in a named POSIX shared-memory segment.

One process creates it, others attach by name (or receive it pickled: it travels by name), and
all of them update it in place without locks through C++ kernels that release the GIL. The
numpy and torch views share the segment's memory. The segment disappears from /dev/shm when the
last handle closes (the handles are counted in the segment, dead processes reaped), when anyone
calls unlink(), or at the latest when the last process exits cleanly.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from typing import Any

import numpy as np

from .. import _hogwild, _types
from .._enums import by_name, name_of
from ..buffer import is_torch_tensor, view

__all__ = ["STATE_NAMES", "SharedTable", "close_all"]

# The optimizer state a table carries (the C++ enum, hogwild/table_spec.h), by the name create()
# takes, and its arrays by torch's names: "momentum" is SGD's momentum buffer, "amsgrad" Adam's
# state with amsgrad's maximum. None and "sgd" carry none.
OPTIMIZERS = {None: _hogwild.OptimizerState.NONE, "sgd": _hogwild.OptimizerState.NONE}
OPTIMIZERS.update(by_name(_hogwild.OptimizerState))

# The update defaults are the C++ option structs' (torch.optim's), read once.
_SGD, _ADAGRAD, _ADAM = _hogwild.SgdOptions(), _hogwild.AdagradOptions(), _hogwild.AdamOptions()
STATE_NAMES = {
    "none": (),
    "adagrad": ("sum",),
    "adam": ("exp_avg", "exp_avg_sq"),
    "momentum": ("momentum_buffer",),
    "amsgrad": ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"),
}
_OPTIONS = {
    _hogwild.SgdOptions: "sgd",
    _hogwild.AdagradOptions: "adagrad",
    _hogwild.AdamOptions: "adam",
}
_TABLE_DTYPES = ("float32", "float64")
_counter = {"n": 0}
_counter_lock = threading.Lock()


def _default_name() -> str:
    with _counter_lock:
        _counter["n"] += 1
        n = _counter["n"]
    return f"t{os.getpid()}-{n}-{os.urandom(4).hex()}"


def _ms(seconds: float | None, what: str) -> int:
    if seconds is None:
        return -1
    if not isinstance(seconds, (int, float)) or math.isnan(seconds) or seconds < 0:
        raise ValueError(f"{what} must be a number of seconds >= 0 or None, got {seconds!r}")
    return int(seconds * 1000)


def _segment_options(populate: bool, lock_timeout: float | None) -> Any:
    options = _hogwild.SegmentOptions()
    options.populate = populate
    options.lock_timeout_ms = _ms(lock_timeout, "lock_timeout")
    return options


def _check_dtype(dtype: Any) -> str:
    name = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if hasattr(dtype, "is_floating_point"):  # a torch.dtype
        name = str(dtype).replace("torch.", "")
    if name not in _TABLE_DTYPES:
        raise TypeError(f"a shared table holds float32 or float64, not {name}")
    return name


def _check_shape(shape: Any) -> tuple[int, ...]:
    if isinstance(shape, (int, np.integer)):
        shape = (int(shape),)
    try:
        dims = tuple(int(d) for d in shape)
    except TypeError:
        raise TypeError(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if not 1 <= len(dims) <= 4 or any(d <= 0 for d in dims):
        raise ValueError(f"shape {dims} must have 1 to 4 dimensions, each > 0")
    return dims


def _foreign_order(x: Any) -> bool:
    return isinstance(x, np.ndarray) and not x.dtype.isnative


def _step(step: Any, op: str) -> int:
    """An optimizer step as the binding takes it: >= 1, or 0 for the table's next global one."""
    if step is None:
        return 0
    if not isinstance(step, (int, np.integer)) or isinstance(step, bool) or step < 1:
        raise ValueError(f"{op} step must be an int >= 1 or None, got {step!r}")
    return int(step)


def _id_array(ids: Any, op: str) -> Any:
    """ids as the caller passed them, a list, tuple or range made an int64 array."""
    if not isinstance(ids, (list, tuple, range)):
        return ids
    arr = np.asarray(ids)
    if arr.size == 0:
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{op} ids are {arr.dtype}; pass int64 or int32")
    return arr.astype(np.int64, copy=False)


class SharedTable:
    """A float32/float64 table of shape (rows, *row_shape) in shared memory.

    Make one with SharedTable.create or SharedTable.attach. Updates (sgd, adagrad, adam, axpy)
    are Hogwild: no locks, rows updated in place, safe from any number of threads and
    processes; pass locked=True to take the table's striped row locks instead.
    """

    def __init__(self, handle: Any):
        self._h = handle
        self.name: str = handle.name
        self.shape: tuple[int, ...] = tuple(handle.shape)
        self.dtype: np.dtype = np.dtype(name_of(handle.dtype))
        self.optimizer: str = name_of(handle.optimizer)
        self._dtype_name = self.dtype.name
        self._row_shape = self.shape[1:]
        self._close = weakref.finalize(self, handle.close)

    # ---- making and finding tables -------------------------------------------------------
    @classmethod
    def create(
        cls,
        name: str | None = None,
        shape: Any = None,
        dtype: Any = "float32",
        *,
        optimizer: str | None = None,
        init: Any = None,
        initial_accumulator: float = 0.0,
        lock_stripes: int = 1024,
        exist_ok: bool = False,
        populate: bool = True,
        lock_timeout: float | None = 30.0,
    ) -> SharedTable:
        """Creates table `name` (a fresh unique name when None), zero-filled or copied from init.

        optimizer: None/"sgd" (no state), "momentum" (SGD's "momentum_buffer"), "adagrad"
        (accumulator "sum"), "adam" ("exp_avg", "exp_avg_sq") or "amsgrad" (Adam's with
        "max_exp_avg_sq"): the state lives in the segment too. exist_ok attaches to an existing
        table of the same shape, dtype and optimizer (ValueError if it differs). A name left
        behind by processes that all died is reclaimed. Raises FileExistsError when the name is
        taken.
        """
        if shape is None:
            raise TypeError("SharedTable.create needs a shape")
        dims = _check_shape(shape)
        dt = _check_dtype(dtype)
        if optimizer not in OPTIMIZERS:
            raise ValueError(
                f"optimizer {optimizer!r} is not one of sgd, momentum, adagrad, adam, amsgrad"
            )
        if not isinstance(lock_stripes, int) or lock_stripes < 1:
            raise ValueError(f"lock_stripes must be an int >= 1, got {lock_stripes!r}")
        init_view = None
        if init is not None:
            init_arr = np.asarray(
                init.detach().cpu().numpy() if is_torch_tensor(init) else init, dtype=dt
            )
            if init_arr.ndim == 0:
                init_arr = np.full(dims, init_arr, dtype=dt)
            if init_arr.shape != dims:
                raise ValueError(f"init has shape {init_arr.shape}, the table {dims}")
            init_view = view(np.ascontiguousarray(init_arr), writable=False, what="init")
        name = _default_name() if name is None else name
        spec = _hogwild.TableSpec()
        spec.shape, spec.dtype = list(dims), getattr(_types.DType, dt.upper())
        spec.optimizer, spec.lock_stripes = OPTIMIZERS[optimizer], lock_stripes
        options = _hogwild.CreateOptions()
        options.segment = _segment_options(populate, lock_timeout)
        options.initial_accumulator = float(initial_accumulator)
        try:
            h = _hogwild.Table.create(name, spec, options, init_view)
        except FileExistsError:
            if not exist_ok:
                raise
            t = cls.attach(name, shape=dims, dtype=dt, timeout=5.0, lock_timeout=lock_timeout)
            if OPTIMIZERS[t.optimizer] != spec.optimizer:
                t.close()
                raise ValueError(
                    f"shared table '{name}' exists with optimizer={t.optimizer!r}, "
                    f"not {optimizer!r}"
                ) from None
            return t
        return _track(cls(h))

    @classmethod
    def attach(
        cls,
        name: str,
        *,
        shape: Any = None,
        dtype: Any = None,
        timeout: float | None = 0.0,
        ready_timeout: float = 30.0,
        populate: bool = True,
        lock_timeout: float | None = 30.0,
    ) -> SharedTable:
        """Maps table `name`. Waits up to `timeout` seconds for it to appear (None: forever) and
        `ready_timeout` for its creator to fill it. Raises FileNotFoundError when it does not
        exist, ValueError when shape/dtype are given and differ from the table's."""
        options = _segment_options(populate, lock_timeout)
        options.wait_ms = _ms(timeout, "timeout")
        options.ready_timeout_ms = _ms(ready_timeout, "ready_timeout")
        h = _hogwild.Table.attach(name, options)
        t = _track(cls(h))
        problems = []
        if shape is not None and _check_shape(shape) != t.shape:
            problems.append(f"shape {t.shape}, not {_check_shape(shape)}")
        if dtype is not None and _check_dtype(dtype) != t._dtype_name:
            problems.append(f"dtype {t._dtype_name}, not {_check_dtype(dtype)}")
        if problems:
            t.close()
            raise ValueError(f"shared table '{name}' exists with " + " and ".join(problems))
        return t

    @staticmethod
    def remove(name: str) -> bool:
        """Removes table `name` from /dev/shm whoever holds it (e.g. one left by a crash)."""
        return _hogwild.Table.remove(name)

    @staticmethod
    def shm_path(name: str) -> str:
        """Where table `name` lives: ``/dev/shm/pscore_hw_<name>``."""
        return "/dev/shm" + _hogwild.Table.shm_path(name)

    def __reduce__(self):
        # Pickling sends the name; unpickling attaches (spawned workers, multiprocessing queues).
        return (_attach_pickled, (self.name, self.shape, self._dtype_name))

    # ---- views ----------------------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The parameters as a writable numpy array over the shared memory (no copy)."""
        return self._h.view(-1)

    def torch(self):
        """The parameters as a CPU torch tensor over the shared memory (no copy)."""
        import torch

        return torch.from_numpy(self._h.view(-1))

    def state(self, name: str, as_torch: bool = False):
        """Optimizer state by torch's name: "momentum_buffer" (SGD), "sum" (Adagrad), "exp_avg",
        "exp_avg_sq", "max_exp_avg_sq" (Adam)."""
        names = STATE_NAMES[self.optimizer]
        if name not in names:
            raise KeyError(
                f"shared table '{self.name}' (optimizer={self.optimizer!r}) has no "
                f"state {name!r}; it has {list(names)}"
            )
        arr = self._h.view(names.index(name))
        if as_torch:
            import torch

            return torch.from_numpy(arr)
        return arr

    # ---- updates ----------------------------------------------------------------------------
    def sgd(
        self,
        ids: Any,
        grads: Any,
        lr: float = _SGD.lr,
        *,
        momentum: float = _SGD.momentum,
        dampening: float = _SGD.dampening,
        nesterov: bool = _SGD.nesterov,
        weight_decay: float = _SGD.weight_decay,
        maximize: bool = _SGD.maximize,
        locked: bool = False,
        coalesce: bool = False,
    ) -> None:
        """torch.optim.SGD's update of rows `ids` (ids=None: the whole table, grads shaped like
        it); plain SGD is table[ids[i]] -= lr * grads[i]. momentum > 0 needs a table created
        with optimizer="momentum": each row's buffer starts as its first gradient.

        A repeated id applies once per occurrence, in order; coalesce=True sums its gradients
        first and applies them once, as torch's optimizers do with an uncoalesced sparse
        gradient (nn.Embedding(sparse=True)'s). Sparse ids get the dense update on their rows
        only: other rows, and their state, stay as they are. The same holds for adagrad and
        adam."""
        opts = _hogwild.SgdOptions(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            nesterov=nesterov,
            weight_decay=weight_decay,
            maximize=maximize,
        )
        self._update("sgd", ids, grads, locked, coalesce, opts)

    def adagrad(
        self,
        ids: Any,
        grads: Any,
        lr: float = _ADAGRAD.lr,
        eps: float = _ADAGRAD.eps,
        *,
        lr_decay: float = _ADAGRAD.lr_decay,
        weight_decay: float = _ADAGRAD.weight_decay,
        maximize: bool = _ADAGRAD.maximize,
        step: int | None = None,
        locked: bool = False,
        coalesce: bool = False,
    ) -> None:
        """torch.optim.Adagrad's update of rows `ids` (or all), fused in one pass per row.
        step: lr_decay's step (>= 1); None takes the table's next global step."""
        opts = _hogwild.AdagradOptions(
            lr=lr,
            eps=eps,
            lr_decay=lr_decay,
            weight_decay=weight_decay,
            maximize=maximize,
            step=_step(step, "adagrad"),
        )
        self._update("adagrad", ids, grads, locked, coalesce, opts)

    def adam(
        self,
        ids: Any,
        grads: Any,
        lr: float = _ADAM.lr,
        betas: tuple = (_ADAM.beta1, _ADAM.beta2),
        eps: float = _ADAM.eps,
        step: int | None = None,
        *,
        weight_decay: float = _ADAM.weight_decay,
        decoupled_weight_decay: bool = _ADAM.decoupled_weight_decay,
        amsgrad: bool = _ADAM.amsgrad,
        maximize: bool = _ADAM.maximize,
        locked: bool = False,
        coalesce: bool = False,
    ) -> None:
        """torch.optim.Adam's update of rows `ids` (or all) in one pass per row, lazy over rows
        as SparseAdam; decoupled_weight_decay=True is AdamW; amsgrad needs a table created with
        optimizer="amsgrad". step: the bias-correction step (>= 1); None takes the table's next
        global step."""
        b1, b2 = betas
        opts = _hogwild.AdamOptions(
            lr=lr,
            beta1=b1,
            beta2=b2,
            eps=eps,
            step=_step(step, "adam"),
            weight_decay=weight_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
        )
        self._update("adam", ids, grads, locked, coalesce, opts)

    def step_with(
        self, options: Any, ids: Any, grads: Any, *, locked: bool = False, coalesce: bool = False
    ) -> None:
        """One update with prebuilt options (pscore._hogwild.SgdOptions, AdagradOptions or
        AdamOptions): what sgd/adagrad/adam do, without building the options on every call."""
        kind = _OPTIONS.get(type(options))
        if kind is None:
            raise TypeError(f"options must be Sgd/Adagrad/AdamOptions, got {type(options)}")
        self._update(kind, ids, grads, locked, coalesce, options)

    def axpy(self, alpha: float, x: Any, *, locked: bool = False) -> None:
        """table += alpha * x over the whole table (x shaped like the table)."""
        try:
            self._h.axpy(float(alpha), x, locked)
        except TypeError:
            self._refuse_byte_order("axpy", None, x)
            raise

    def _update(self, op: str, ids: Any, grads: Any, locked: bool, coalesce: bool, opts) -> None:
        # The binding views ids and grads (numpy arrays directly, others via pscore.buffer).
        if ids is not None and type(ids) is not np.ndarray:
            ids = _id_array(ids, op)
        try:
            getattr(self._h, op)(ids, grads, locked, coalesce, opts)
        except TypeError:
            self._refuse_byte_order(op, ids, grads)
            raise

    def _refuse_byte_order(self, op: str, ids: Any, grads: Any) -> None:
        """The binding's words for an array in the other byte order, which views refuse."""
        if _foreign_order(grads):
            raise TypeError(
                f"{op} on shared table '{self.name}': grads are {grads.dtype.name} "
                f"(non-native byte order) but the table holds {self._dtype_name}"
            ) from None
        if _foreign_order(ids):
            raise TypeError(
                f"{op} ids are {ids.dtype.name} (non-native byte order); pass int64 or int32"
            ) from None

    # ---- lifetime -------------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        return self._h.closed

    @property
    def is_creator(self) -> bool:
        return self._h.is_creator

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * self.dtype.itemsize

    @property
    def update_count(self) -> int:
        """Update calls applied to the table so far, by every process."""
        return self._h.update_count

    @property
    def lock_stripes(self) -> int:
        return self._h.lock_stripes

    def live_attachments(self) -> int:
        """Open handles on the table across all processes (dead processes' are reaped)."""
        return self._h.live_attachments()

    def close(self) -> None:
        """Releases this handle; the last one to close removes the segment. Views stay valid."""
        self._close()

    def unlink(self) -> None:
        """Removes the name from /dev/shm now; open handles and views keep working."""
        self._h.unlink()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "open"
        return (
            f"SharedTable(name={self.name!r}, shape={self.shape}, dtype={self._dtype_name}, "
            f"optimizer={self.optimizer!r}, {state})"
        )


_open_tables: weakref.WeakSet = weakref.WeakSet()


def _track(t: SharedTable) -> SharedTable:
    _open_tables.add(t)
    return t


def close_all() -> None:
    """Closes every table this process opened (train() workers call it before exiting)."""
    for t in list(_open_tables):
        t.close()


def _attach_pickled(name: str, shape: tuple, dtype: str) -> SharedTable:
    return SharedTable.attach(name, shape=shape, dtype=dtype, timeout=5.0)
