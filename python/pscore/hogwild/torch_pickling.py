"""Keeps a SharedParameters binding across torch.multiprocessing.

torch's ForkingPickler reduces a CPU tensor through its storage: `_share_fd_cpu_()` (or
`_share_filename_cpu_()`) finds no torch shared-memory allocator behind a view of a SharedTable,
so it allocates a new torch segment, copies the data and points the *sender's* storage at it.
The parent's parameter then no longer is the table: its later updates and the children's never
meet. (model.share_memory() does the same through `share_memory_()`.)

Here the tensors that are views of a bound table reduce to the table's name and the view's
geometry instead; the receiver attaches the table (once per process) and rebuilds the same view,
so both sides keep writing to the one table. Any other tensor goes to torch's reducer.
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from .table import SharedTable

__all__ = ["attached", "forget", "table_address", "table_of", "track"]

# This process's tables with bound parameters: by the address of their parameters, and by name.
_by_address: dict[int, SharedTable] = {}
_by_name: dict[str, SharedTable] = {}
_lock = threading.Lock()
_installed = {"done": False}


def table_address(t: SharedTable) -> int:
    return t.numpy().ctypes.data


def track(t: SharedTable) -> None:
    """Remembers `t` as holding bound parameters, so tensors over it pickle by its name."""
    with _lock:
        _by_address[table_address(t)] = t
        _by_name[t.name] = t
    _install()


def forget(t: SharedTable) -> None:
    """Stops pickling views of `t` by name (its handle was closed)."""
    with _lock:
        if _by_name.get(t.name) is t:
            del _by_name[t.name]
        address = table_address(t)
        if _by_address.get(address) is t:
            del _by_address[address]


def attached(name: str, shape: tuple, dtype: str) -> SharedTable:
    """This process's open handle on table `name`, attaching (and tracking) it the first time."""
    with _lock:
        t = _by_name.get(name)
    if t is None or t.closed:
        t = SharedTable.attach(name, shape=shape, dtype=dtype, timeout=5.0)
        track(t)
    return t


def table_of(tensor: Any) -> SharedTable | None:
    """The tracked table whose parameters `tensor` views, or None."""
    storage = tensor.untyped_storage()
    t = _by_address.get(storage.data_ptr())
    return t if t is not None and storage.nbytes() == t.nbytes else None


def _reduce(fallback, tensor):
    t = table_of(tensor)
    if t is None or (tensor.requires_grad and not tensor.is_leaf):
        return fallback(tensor)  # torch's reducer (it refuses non-leaf tensors needing grad)
    import torch

    return (
        _rebuild,
        (
            t.name,
            t.shape,
            t.dtype.name,
            tuple(tensor.size()),
            tuple(tensor.stride()),
            tensor.storage_offset(),
            isinstance(tensor, torch.nn.Parameter),
            tensor.requires_grad,
        ),
    )


def _rebuild(name, shape, dtype, size, stride, offset, is_parameter, requires_grad):
    import torch

    view = attached(name, shape, dtype).torch().as_strided(size, stride, offset)
    if is_parameter:
        return torch.nn.Parameter(view, requires_grad=requires_grad)
    return view.requires_grad_(requires_grad)


def _install() -> None:
    """Puts _reduce in front of torch's reducers for Tensor and Parameter (once)."""
    with _lock:
        if _installed["done"]:
            return
        from multiprocessing.reduction import ForkingPickler

        import torch
        import torch.multiprocessing  # registers torch's reducers first

        for cls in (torch.Tensor, torch.nn.Parameter):
            fallback = ForkingPickler._extra_reducers[cls]
            ForkingPickler.register(cls, functools.partial(_reduce, fallback))
        _installed["done"] = True
