"""One view of the buffers users pass: numpy arrays, torch tensors (CPU and CUDA) and any object
with ``__dlpack__`` / ``__dlpack_device__``, as address, bytes, dtype, shape, device and stream.

Every native call (collectives, the parameter server client, Hogwild tables and CUDA kernels)
takes a `BufferView`; csrc/bindings/buffer_view_caster.h reads it into pscore::BufferView. A view
keeps the object owning the memory alive for as long as an asynchronous operation holds it.

numpy arrays and CPU torch tensors take a fast path in C++ (_C.fast_view: about 0.15 us for an
array, 0.4 us for a tensor, where reading a DLPack capsule through ctypes costs several); other
objects, and arrays or tensors with something to explain, go through Python here. The Hogwild
binding also reads plain numpy arrays itself (pscore::bindings::to_view) and comes here for
everything else.
torch is never imported here: a tensor can only exist once its user imported torch.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any, NamedTuple

import numpy as np

from . import _C, _types, cuda_libraries
from ._enums import by_name

__all__ = [
    "CPU",
    "CUDA",
    "DTYPE_CODES",
    "BufferView",
    "device_view",
    "is_torch_tensor",
    "view",
    "view_as",
    "view_out",
]

# pscore's dtype names and their codes in csrc/common/dtype.h, read from the exported enum: a
# view carries the plain int, which the binding reads faster than an enum member.
DTYPE_CODES = {name: int(member) for name, member in by_name(_types.DType).items()}
_ITEMSIZE = {"float16": 2, "bfloat16": 2, "float32": 4, "float64": 8, "int8": 1, "uint8": 1}
_ITEMSIZE.update(int32=4, int64=8)

# DLPack's device types (DLDeviceType) that pscore reads; codes match csrc/common/buffer_view.h.
CPU, CUDA = 1, 2
_DEVICE_NAMES = {CPU: "cpu", CUDA: "cuda"}
_HOST_ONLY = "this backend takes CPU tensors"


class BufferView(NamedTuple):
    """A C-contiguous buffer. Field order is what the C++ caster reads: keep them in step."""

    address: int | None  # None: a non-empty numpy array's, which the caster reads from owner
    nbytes: int
    numel: int
    dtype_code: int
    device_type: int  # CPU or CUDA (DLPack's codes)
    device_index: int
    stream: int  # the CUDA stream work on it is ordered on (0: the default stream; CPU: 0)
    shape: tuple
    dtype: str
    owner: Any

    @property
    def ptr(self) -> int:
        """The buffer's address."""
        return self.owner.ctypes.data if self.address is None else self.address

    @property
    def device(self) -> str:
        """The device as torch writes it: cpu or cuda:<index>."""
        if self.device_type == CPU:
            return "cpu"
        return f"{_DEVICE_NAMES[self.device_type]}:{self.device_index}"

    @property
    def itemsize(self) -> int:
        return _ITEMSIZE[self.dtype]

    def rows(self, counts: list[int], what: str) -> list[BufferView]:
        """Consecutive pieces of this buffer of counts[i] elements each (sum <= numel)."""
        if sum(counts) > self.numel:
            raise ValueError(f"{what}: pieces of {sum(counts)} elements exceed its {self.numel}")
        out, at, size = [], self.ptr, self.itemsize
        for n in counts:
            out.append(self._replace(address=at, nbytes=n * size, numel=n, shape=(n,)))
            at += n * size
        return out


_new = tuple.__new__  # builds a BufferView without NamedTuple.__new__'s Python frame

# ---- numpy --------------------------------------------------------------------------------
# dtype object -> pscore name; a dict lookup instead of building the name on every call.
_NUMPY_NAMES = {np.dtype(name): name for name in DTYPE_CODES if name != "bfloat16"}


# The view of a numpy array or a torch tensor built in C++ (csrc/bindings/fast_view.h: ~0.15
# us for an array against ~0.4 us in _numpy, ~0.4 us for a tensor against ~0.8 us in _tensor; a
# CUDA tensor, ordered on torch's current stream, where torch has the DLPack exchange API), or
# None when x needs explaining or is anything else; view() comes here when it does not.
_fast_view = _C.fast_view


def _numpy(x: np.ndarray, writable: bool, what: str) -> BufferView:
    name = _NUMPY_NAMES.get(x.dtype)
    if name is None:
        _unsupported(x.dtype.name, x.dtype.isnative)
    flags = x.flags
    if not flags.c_contiguous:
        _not_contiguous(what, x.shape, tuple(s // x.itemsize for s in x.strides))
    if writable and not flags.writeable:
        raise ValueError(f"{what} is read-only; the operation writes its result in place")
    # The address is left to the C++ caster (PyArray_DATA): x.ctypes.data costs ~1 us a call.
    size = x.size
    fields = (None if size else 0, x.nbytes, size, DTYPE_CODES[name], CPU, 0, 0, x.shape, name, x)
    return _new(BufferView, fields)


def _not_contiguous(what: str, shape: tuple, strides: tuple) -> None:
    raise ValueError(
        f"{what} is not contiguous; call .contiguous() or np.ascontiguousarray first "
        f"(strides {tuple(strides)} elements are not C-contiguous for shape {tuple(shape)})"
    )


def _unsupported(name: str, native: bool = True) -> None:
    if not native:
        raise TypeError(f"dtype {name} is not in this machine's byte order; use .astype(native)")
    raise TypeError(f"dtype {name} is not supported; use one of {sorted(DTYPE_CODES)}")


# ---- torch --------------------------------------------------------------------------------
_TORCH_DTYPES: dict = {}


def _torch():
    return sys.modules.get("torch")


def is_torch_tensor(x: Any) -> bool:
    torch = _torch()
    return torch is not None and isinstance(x, torch.Tensor)


def _torch_name(dtype) -> str:
    return _torch_dtype(dtype)[0]


def _torch_dtype(dtype) -> tuple:
    """(pscore name, dtype code, item size) of a torch dtype."""
    entry = _TORCH_DTYPES.get(dtype)
    if entry is None:
        if not _TORCH_DTYPES:
            torch = _torch()
            for name, code in DTYPE_CODES.items():
                t = getattr(torch, name)
                _TORCH_DTYPES[t] = (name, code, t.itemsize)
            _hand_torch_to_fast_view(torch)
            return _torch_dtype(dtype)
        _unsupported(str(dtype).replace("torch.", ""))
    return entry


def _hand_torch_to_fast_view(torch) -> None:
    """fast_view reads tensors from here on; a Parameter's attributes are those of torch.Tensor."""
    dtypes = {t: code for t, (_, code, _) in _TORCH_DTYPES.items()}
    plain = (torch.Tensor, torch.nn.Parameter)
    _C.fast_view_torch(torch.Tensor, plain, torch.strided, dtypes)


def _cuda_stream(torch, index: int) -> int:
    """The current stream of CUDA device `index`: work on the buffer is ordered after it."""
    return torch.cuda.current_stream(index).cuda_stream


def _cuda_seen() -> None:
    """A CUDA buffer is about to reach the core: it must know where to load CUDA from."""
    cuda_libraries.register_candidates()


def _tensor(x: Any, what: str) -> BufferView:
    name, code, itemsize = _torch_dtype(x.dtype)
    if x.is_sparse:
        raise ValueError(f"{what} is sparse; pass a dense tensor")
    if not x.is_contiguous():
        _not_contiguous(what, tuple(x.shape), x.stride())
    nbytes = x.nbytes  # the cheapest of torch's size attributes
    ptr = x.data_ptr() if nbytes else 0
    shape = tuple(x.shape)
    if x.is_cpu:
        return _new(BufferView, (ptr, nbytes, nbytes // itemsize, code, CPU, 0, 0, shape, name, x))
    device = x.device
    if device.type != "cuda":
        raise ValueError(f"{what} is on {device}; pscore takes CPU and CUDA tensors")
    _cuda_seen()
    stream = _cuda_stream(_torch(), device.index)
    fields = (ptr, nbytes, nbytes // itemsize, code, CUDA, device.index, stream, shape, name, x)
    return _new(BufferView, fields)


# ---- DLPack -------------------------------------------------------------------------------
# The structs of the DLPack specification (https://dmlc.github.io/dlpack/latest/c_api.html).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):  # capsule "dltensor"
    _fields_ = [
        ("dl_tensor", _DLTensor),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
    ]


class _DLManagedTensorVersioned(ctypes.Structure):  # capsule "dltensor_versioned" (DLPack 1.x)
    _fields_ = [
        ("major", ctypes.c_uint32),
        ("minor", ctypes.c_uint32),
        ("manager_ctx", ctypes.c_void_p),
        ("deleter", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("dl_tensor", _DLTensor),
    ]


_READ_ONLY_FLAG = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
# (DLDataTypeCode, bits) -> pscore name: 0 int, 1 uint, 2 float, 4 bfloat.
_DLPACK_NAMES = {(2, 16): "float16", (4, 16): "bfloat16", (2, 32): "float32", (2, 64): "float64"}
_DLPACK_NAMES.update({(0, 8): "int8", (1, 8): "uint8", (0, 32): "int32", (0, 64): "int64"})
_DLPACK_KINDS = {0: "int", 1: "uint", 2: "float", 4: "bfloat", 5: "complex", 6: "bool"}

_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_name = ctypes.pythonapi.PyCapsule_GetName
_capsule_name.restype = ctypes.c_char_p
_capsule_name.argtypes = [ctypes.py_object]


def _dlpack_capsule(x: Any, device_type: int, device_index: int) -> tuple[Any, int]:
    """(capsule, stream): x exported for use on `stream`, versioned (DLPack 1.x) when x can."""
    stream = None
    if device_type == CUDA:
        _cuda_seen()
        torch = _torch()
        # torch's current stream, where torch uses CUDA (else it has queued nothing anywhere)
        if torch is not None and torch.cuda.is_initialized():
            stream = _cuda_stream(torch, device_index)
    # DLPack forbids stream 0 (ambiguous); the legacy default stream, handle 0, is asked as 1.
    asked = 1 if stream == 0 else stream
    try:
        capsule = x.__dlpack__(stream=asked, max_version=(1, 0))
    except TypeError:  # a producer that predates DLPack 1.0's max_version
        capsule = x.__dlpack__(stream=asked)
    return capsule, stream or 0


def _dlpack(x: Any, writable: bool, what: str) -> BufferView:
    device_type, device_index = (int(v) for v in x.__dlpack_device__())
    if device_type not in _DEVICE_NAMES:
        raise ValueError(
            f"{what} is on DLPack device type {device_type}; pscore takes CPU and CUDA"
        )
    capsule, stream = _dlpack_capsule(x, device_type, device_index)
    name = _capsule_name(capsule)
    if name == b"dltensor_versioned":
        managed = _DLManagedTensorVersioned.from_address(_capsule_pointer(capsule, name))
        read_only = bool(managed.flags & _READ_ONLY_FLAG)
    elif name == b"dltensor":
        managed = _DLManagedTensor.from_address(_capsule_pointer(capsule, name))
        read_only = False  # DLPack before 1.0 cannot say
    else:
        raise TypeError(f"{what}.__dlpack__() returned a capsule named {name!r}, not a DLPack one")
    t = managed.dl_tensor
    dtype = _dlpack_dtype(t.dtype)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    strides = tuple(t.strides[i] for i in range(t.ndim)) if t.strides else None
    if strides and not _compact(shape, strides):
        _not_contiguous(what, shape, strides)
    if writable and read_only:
        raise ValueError(f"{what} is read-only; the operation writes its result in place")
    numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
    ptr = (t.data or 0) + t.byte_offset if numel else 0
    nbytes = numel * _ITEMSIZE[dtype]
    # The capsule owns the export: its destructor releases it once the view is gone.
    owner = (x, capsule)
    code = DTYPE_CODES[dtype]
    return BufferView(
        ptr, nbytes, numel, code, device_type, device_index, stream, shape, dtype, owner
    )


def _dlpack_dtype(dt: _DLDataType) -> str:
    kind = _DLPACK_KINDS.get(dt.code, f"code {dt.code}")
    name = _DLPACK_NAMES.get((dt.code, dt.bits))
    if name is None or dt.lanes != 1:
        lanes = f"x{dt.lanes}" if dt.lanes != 1 else ""
        _unsupported(f"{kind}{dt.bits}{lanes}")
    return name


def _compact(shape: tuple, strides: tuple) -> bool:
    """Whether strides (in elements) are those of a C-contiguous array of `shape` (an empty
    array is, whatever its strides)."""
    if 0 in shape:
        return True
    step = 1
    for n, s in zip(reversed(shape), reversed(strides)):
        if n > 1 and s != step:
            return False
        step *= n
    return True


# ---- the one entry point ------------------------------------------------------------------
def view(
    x: Any, *, writable: bool = True, what: str = "tensor", host: str | None = _HOST_ONLY
) -> BufferView:
    """Views x in place, without copying. writable: the operation writes into x. host: None
    accepts CUDA buffers; otherwise x must be in host memory and `host` says who needs it there
    (in the error). Raises TypeError / ValueError naming `what` for what cannot be viewed."""
    v = _fast_view(x, writable)  # the latency path first
    if v is not None:
        if v.device_type == CPU:
            return v
        _cuda_seen()
    elif is_torch_tensor(x):
        v = _tensor(x, what)
    elif isinstance(x, np.ndarray):
        return _numpy(x, writable, what)
    elif _is_dlpack(x):
        v = _dlpack(x, writable, what)
    else:
        raise TypeError(
            f"{what}: expected a numpy array or a torch tensor (or a __dlpack__ object), "
            f"got {type(x).__name__}"
        )
    if host is not None and v.device_type != CPU:
        raise ValueError(f"{what} is on {v.device}; {host}")
    return v


def device_view(x: Any, writable: bool = True, what: str = "tensor") -> BufferView:
    """view(x, host=None): host or CUDA memory, as the collectives take it. The latency path of
    every collective: a numpy array or a CPU tensor costs one call into C++."""
    v = _fast_view(x, writable)
    if v is None:
        return view(x, writable=writable, what=what, host=None)
    if v.device_type != CPU:
        _cuda_seen()
    return v


def view_as(x: Any, dtype: str, *, what: str, host: str | None = _HOST_ONLY) -> BufferView:
    """A read-only view of x's values as contiguous `dtype` ("float32" or "int64"), copying
    only when x is not that already (on x's device). Floats must come from floating-point values
    and ints from integers (the int64 range). Other __dlpack__ objects must be `dtype` already.
    host: as for view()."""
    floating = dtype == "float32"
    if is_torch_tensor(x):
        if x.device.type != "cpu" and host is not None:
            raise ValueError(f"{what} is on {x.device}; {host}")
        if x.dtype.is_complex or x.dtype.is_floating_point != floating or x.dtype == _torch().bool:
            _wrong_kind(floating, x.dtype, what)
        x = x.detach().reshape(-1) if not floating else x.detach()
        x = (x.float() if floating else x.long()).contiguous()
    elif isinstance(x, np.ndarray):
        if x.dtype.kind not in ("f" if floating else "iu"):
            _wrong_kind(floating, x.dtype, what)
        if x.dtype == np.uint64 and x.size and x.max() > np.iinfo(np.int64).max:
            raise ValueError(f"{what} holds values above the int64 range")
        x = np.ascontiguousarray(x if floating else x.reshape(-1), dtype=dtype)
    elif not _is_dlpack(x):
        raise TypeError(f"{what} must be a numpy array or a torch tensor, not {type(x).__name__}")
    v = view(x, writable=False, what=what, host=host)
    if v.dtype != dtype:
        raise TypeError(f"{what} must be {dtype}, got {v.dtype}")
    return v


def _is_dlpack(x: Any) -> bool:
    return hasattr(x, "__dlpack__") and hasattr(x, "__dlpack_device__")


def _wrong_kind(floating: bool, dtype: Any, what: str) -> None:
    if floating:
        raise TypeError(f"{what} must hold floating-point values, got {dtype}")
    raise TypeError(f"{what} must be integers, got {dtype}")


def view_out(x: Any, dtype: str, *, what: str, host: str | None = _HOST_ONLY) -> BufferView:
    """A writable view of x, which must already be a contiguous `dtype` buffer."""
    if not (is_torch_tensor(x) or isinstance(x, np.ndarray) or _is_dlpack(x)):
        raise TypeError(f"{what} must be a numpy array or a torch tensor, not {type(x).__name__}")
    v = view(x, what=what, host=host)
    if v.dtype != dtype:
        raise TypeError(f"{what} must be {dtype}, got {v.dtype}")
    return v
