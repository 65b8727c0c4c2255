"""Zero-copy views of numpy arrays and CPU torch tensors as (pointer, bytes, dtype) buffers.

The C++ core never sees a Python object: every binding takes a `Buffer`'s fields. The Buffer
keeps the owning object alive for as long as an asynchronous operation holds it.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np

from . import _C
from ._enums import by_name

# pscore's dtype names: the C++ enum's members (csrc/common/dtype.h), lower-cased.
_DTYPE_MEMBERS = by_name(_C.DType)
DTYPES = tuple(_DTYPE_MEMBERS)


@dataclasses.dataclass(frozen=True)
class Buffer:
    """A contiguous host buffer: address, size in bytes, element type and the object owning it."""

    ptr: int
    nbytes: int
    dtype: str
    numel: int
    owner: Any

    @property
    def dtype_code(self) -> _C.DType:
        """The element type as the bindings take it."""
        return _DTYPE_MEMBERS[self.dtype]


def _torch():
    return sys.modules.get("torch")


def is_torch_tensor(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


# dtype object -> pscore name; a dict lookup instead of building the name on every call.
_NUMPY_NAMES = {np.dtype(name): name for name in DTYPES if name != "bfloat16"}
_TORCH_NAMES: dict = {}


def _torch_name(dtype) -> str | None:
    if not _TORCH_NAMES:
        torch = _torch()
        _TORCH_NAMES.update({getattr(torch, name): name for name in DTYPES})
    return _TORCH_NAMES.get(dtype)


def dtype_name(x: Any) -> str:
    """pscore's name for x's element type; TypeError for one pscore does not carry."""
    if isinstance(x, np.ndarray):
        name = _NUMPY_NAMES.get(x.dtype)
        if name is None:
            _unsupported(x.dtype.name, x.dtype.isnative)
        return name
    if is_torch_tensor(x):
        name = _torch_name(x.dtype)
        if name is None:
            _unsupported(str(x.dtype).replace("torch.", ""), True)
        return name
    raise TypeError(f"expected a numpy array or a torch tensor, got {type(x).__name__}")


def _unsupported(name: str, native: bool) -> None:
    if not native:
        raise TypeError(f"dtype {name} is not in this machine's byte order; use .astype(native)")
    raise TypeError(f"dtype {name} is not supported; use one of {sorted(DTYPES)}")


def as_buffer(x: Any, *, writable: bool = True, what: str = "tensor") -> Buffer:
    """Views x without copying. Raises TypeError / ValueError for what cannot be viewed in place."""
    dtype = dtype_name(x)
    if not isinstance(x, np.ndarray):  # a torch tensor
        if x.device.type != "cpu":
            raise ValueError(f"{what} is on {x.device}; this backend takes CPU tensors")
        if not x.is_contiguous():
            raise ValueError(f"{what} is not contiguous; call .contiguous() first")
        if x.is_sparse:
            raise ValueError(f"{what} is sparse; pass a dense tensor")
        return Buffer(x.data_ptr(), x.numel() * x.element_size(), dtype, x.numel(), x)
    if not x.flags.c_contiguous:
        raise ValueError(f"{what} is not C-contiguous; use np.ascontiguousarray first")
    if writable and not x.flags.writeable:
        raise ValueError(f"{what} is read-only; the operation writes its result in place")
    return Buffer(x.ctypes.data if x.size else 0, x.nbytes, dtype, x.size, x)
