"""Turning the arrays users pass (numpy arrays, CPU torch tensors) into the (address, count)
pairs the C++ client reads and writes in place."""

from __future__ import annotations

import numpy as np

from ..tensor import as_buffer, is_torch_tensor

__all__ = ["float_input", "float_output", "id_input"]


def float_input(x, what: str):
    """(owner, address, numel) of x as contiguous float32, copying only when x is not."""
    if is_torch_tensor(x):
        if x.device.type != "cpu":
            raise ValueError(f"{what} is on {x.device}; the parameter server takes CPU tensors")
        if x.dtype.is_complex or not x.dtype.is_floating_point:
            raise TypeError(f"{what} must hold floating-point values, got {x.dtype}")
        x = x.detach().float().contiguous()
    elif isinstance(x, np.ndarray):
        if x.dtype.kind != "f":
            raise TypeError(f"{what} must hold floating-point values, got {x.dtype}")
        x = np.ascontiguousarray(x, dtype=np.float32)
    else:
        raise TypeError(f"{what} must be a numpy array or a torch tensor, not {type(x).__name__}")
    b = as_buffer(x, writable=False, what=what)
    return x, b.ptr, b.numel


def float_output(x, what: str):
    """(owner, address, numel) of x, which must be a writable contiguous float32 array."""
    if not (is_torch_tensor(x) or isinstance(x, np.ndarray)):
        raise TypeError(f"{what} must be a numpy array or a torch tensor, not {type(x).__name__}")
    b = as_buffer(x, writable=True, what=what)
    if b.dtype != "float32":
        raise TypeError(f"{what} must be float32 (the tables' type), got {b.dtype}")
    return x, b.ptr, b.numel


def id_input(ids, what: str = "ids"):
    """(owner, address, count) of ids as contiguous int64 (any values)."""
    if is_torch_tensor(ids):
        if ids.device.type != "cpu":
            raise ValueError(f"{what} is on {ids.device}; the parameter server takes CPU tensors")
        if ids.dtype.is_floating_point or ids.dtype.is_complex or str(ids.dtype) == "torch.bool":
            raise TypeError(f"{what} must be integers, got {ids.dtype}")
        ids = ids.detach().reshape(-1).long().contiguous()
    elif isinstance(ids, np.ndarray):
        if ids.dtype.kind not in "iu":
            raise TypeError(f"{what} must be integers, got {ids.dtype}")
        if ids.dtype == np.uint64 and ids.size and ids.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{what} holds values above the int64 range")
        ids = np.ascontiguousarray(ids.reshape(-1), dtype=np.int64)
    else:
        raise TypeError(f"{what} must be a numpy array or a torch tensor, not {type(ids).__name__}")
    b = as_buffer(ids, writable=False, what=what)
    return ids, b.ptr, b.numel
