"""pscore.buffer: the one view of numpy arrays, torch tensors and __dlpack__ objects that every
native call takes (address, bytes, dtype, shape, device, stream), and its errors."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest

from pscore import _C
from pscore.buffer import (
    CPU,
    CUDA,
    DTYPE_CODES,
    BufferView,
    _tensor,
    device_view,
    view,
    view_as,
    view_out,
)

torch = pytest.importorskip("torch")

NUMPY_DTYPES = [name for name in DTYPE_CODES if name != "bfloat16"]


class DLPackOnly:
    """An object that offers nothing but the DLPack protocol (here: a numpy array's)."""

    def __init__(self, array, *, versioned: bool = True):
        self.array = array
        self.versioned = versioned
        self.asked = []

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __dlpack__(self, stream=None, max_version=None, **kwargs):
        self.asked.append((stream, max_version))
        if not self.versioned:
            if max_version is not None:
                raise TypeError("max_version is not supported")
            return self.array.__dlpack__(stream=stream, max_version=(0, 8))
        return self.array.__dlpack__(stream=stream, max_version=max_version)


def _expect(v: BufferView, ptr, nbytes, numel, dtype, shape):
    assert (v.ptr, v.nbytes, v.numel, v.dtype, v.shape) == (ptr, nbytes, numel, dtype, shape)
    assert v.dtype_code == DTYPE_CODES[dtype]
    assert (v.device_type, v.device_index, v.stream, v.device) == (CPU, 0, 0, "cpu")


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_arrays_of_every_dtype_are_viewed_in_place(dtype):
    a = np.zeros((2, 3), dtype)
    _expect(view(a), a.ctypes.data, a.nbytes, 6, dtype, (2, 3))
    assert view(a).owner is a


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
def test_numpy_views_built_in_cpp_hold_what_python_would_put_in_them(dtype):
    for a in (np.zeros((2, 3), dtype), np.zeros((0, 4), dtype), np.array(5, dtype)):
        built = _C.fast_view(a, True)
        assert type(built) is BufferView
        code = DTYPE_CODES[dtype]
        assert built == (
            None if a.size else 0,
            a.nbytes,
            a.size,
            code,
            CPU,
            0,
            0,
            a.shape,
            dtype,
            a,
        )
    read_only = np.zeros(3, dtype)
    read_only.flags.writeable = False
    assert _C.fast_view(read_only, False) is not None
    swapped = np.zeros(3, np.dtype(dtype).newbyteorder())
    # what needs explaining is left to pscore.buffer, which raises the error naming it
    odd = [read_only, np.zeros((3, 3), dtype).T, np.zeros(3, bool), [1]]
    for x in odd + ([swapped] if swapped.itemsize > 1 else []):
        assert _C.fast_view(x, True) is None


@pytest.mark.parametrize("dtype", list(DTYPE_CODES))
def test_cpu_tensors_of_every_dtype_are_viewed_in_place(dtype):
    t = torch.zeros(4, 2, dtype=getattr(torch, dtype))
    _expect(view(t), t.data_ptr(), t.numel() * t.element_size(), 8, dtype, (4, 2))


def _fast_and_python_views(t):
    """(fast_view's view, the one pscore.buffer builds in Python) of CPU tensor t; the Python one
    first: it hands torch's types to fast_view the first time."""
    built = _tensor(t, "tensor")
    return _C.fast_view(t, True), built


@pytest.mark.parametrize("dtype", list(DTYPE_CODES))
def test_cpu_tensor_views_built_in_cpp_hold_what_python_would_put_in_them(dtype):
    base = torch.arange(24).to(getattr(torch, dtype)).reshape(4, 6)
    cases = [base, base[1:3], base[2], base[0, 0], torch.zeros(0, 3, dtype=base.dtype)]
    cases += [base.reshape(24)[:4].reshape(4, 1).t()]  # (1, 4): strides (1, 1), contiguous
    cases += [torch.nn.Parameter(base.clone(), requires_grad=base.is_floating_point())]
    for t in cases:
        fast, python = _fast_and_python_views(t)
        assert type(fast) is BufferView and type(fast.shape) is tuple
        assert tuple(fast) == tuple(python)  # field by field, the owner the tensor itself
        assert fast.owner is t and fast._asdict() == python._asdict()
    assert _fast_and_python_views(base[1:3])[0].address == base.data_ptr() + 6 * base.itemsize
    assert _fast_and_python_views(base[0, 0])[0].shape == ()
    empty = _fast_and_python_views(base[:0])[0]
    assert (empty.address, empty.nbytes, empty.numel, empty.shape) == (0, 0, 0, (0, 6))
    # torch tensors have no read-only flag: a view to write into is made alike
    assert _C.fast_view(base, False) == _C.fast_view(base, True) == device_view(base, False)


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_tensors_the_cpp_view_does_not_take_get_pythons_errors():
    view(torch.zeros(1))  # fast_view knows torch from here on
    coo = torch.eye(3).to_sparse()
    odd = [torch.zeros(4, 6).t(), coo, torch.empty(3, device="meta")]
    odd += [torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.complex64)]
    odd += [torch.eye(3).to_sparse_csr(), torch.ones(2, 2).to_sparse_csc()]
    odd += [
        torch.ones(4).to_mkldnn(),
        torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8),
    ]
    odd += [torch.ones(4, 6)[:, ::2], torch.ones(2, dtype=torch.complex64).conj()]
    for t in odd:
        assert _C.fast_view(t, True) is None
    with pytest.raises(ValueError, match=r"grads is not contiguous; .* shape \(6, 4\)"):
        device_view(torch.zeros(4, 6).t(), what="grads")
    with pytest.raises(ValueError, match="grads is sparse; pass a dense tensor"):
        device_view(coo, what="grads")
    with pytest.raises(TypeError, match="dtype bool is not supported"):
        device_view(torch.ones(3, dtype=torch.bool))
    with pytest.raises(ValueError, match="tensor is on meta; pscore takes CPU and CUDA tensors"):
        device_view(torch.empty(3, device="meta"))


def test_a_tensor_type_changed_after_the_first_view_is_read_through_its_new_attributes():
    p = torch.nn.Parameter(torch.ones(3))
    assert _fast_and_python_views(p)[0].address == p.data_ptr()
    torch.nn.Parameter.data_ptr = lambda _self: 4096
    try:
        fast, python = _fast_and_python_views(p)
        assert fast == python and fast.address == 4096
    finally:
        del torch.nn.Parameter.data_ptr
    assert _C.fast_view(p, True).address == torch.Tensor.data_ptr(p)


def test_a_tensor_subclass_is_read_through_its_own_attributes():
    class Shifted(torch.Tensor):
        def data_ptr(self):
            return super().data_ptr() + 4

    t = torch.ones(4).as_subclass(Shifted)
    fast, python = _fast_and_python_views(t)
    assert fast == python and fast.address == torch.Tensor.data_ptr(t) + 4


@pytest.mark.parametrize("dtype", NUMPY_DTYPES)
@pytest.mark.parametrize("versioned", [True, False])
def test_dlpack_objects_of_every_dtype_are_viewed_in_place(dtype, versioned):
    a = np.arange(12).astype(dtype).reshape(3, 4)
    obj = DLPackOnly(a, versioned=versioned)
    v = view(obj)
    _expect(v, a.ctypes.data, a.nbytes, 12, dtype, (3, 4))
    assert obj.asked[-1][0] is None  # a CPU buffer is exported for no stream
    # The view holds the exporter alive: the memory stays valid after the caller drops it.
    want = a.tobytes()
    del obj, a
    assert bytes((ctypes.c_uint8 * v.nbytes).from_address(v.ptr)) == want


def test_dlpack_objects_are_written_through_the_view():
    a = np.zeros(5, np.float32)
    v = view(DLPackOnly(a))
    np.ctypeslib.as_array((ctypes.c_float * 5).from_address(v.ptr))[:] = 7
    assert (a == 7).all()


def test_a_bfloat16_tensor_through_dlpack():
    t = torch.arange(6, dtype=torch.bfloat16)

    class Wrapped:
        def __dlpack_device__(self):
            return t.__dlpack_device__()

        def __dlpack__(self, **kw):
            return t.__dlpack__(**kw)

    v = view(Wrapped())
    assert (v.ptr, v.dtype, v.numel, v.nbytes) == (t.data_ptr(), "bfloat16", 6, 12)


def test_zero_dimensional_and_empty_buffers():
    s = np.array(3.0, np.float32)
    _expect(view(s), s.ctypes.data, 4, 1, "float32", ())
    t = torch.tensor(2, dtype=torch.int64)
    _expect(view(t), t.data_ptr(), 8, 1, "int64", ())
    _expect(view(DLPackOnly(s)), s.ctypes.data, 4, 1, "float32", ())
    e = np.zeros((0, 3), np.float64)
    _expect(view(e), 0, 0, 0, "float64", (0, 3))
    _expect(view(torch.zeros(0)), 0, 0, 0, "float32", (0,))
    _expect(view(DLPackOnly(e)), 0, 0, 0, "float64", (0, 3))


def test_non_contiguous_buffers_are_refused_naming_the_argument():
    a = np.zeros((4, 6), np.float32)
    strided = r"\(strides \(6, 2\) elements are not C-contiguous for shape \(4, 3\)\)"
    with pytest.raises(ValueError, match=r"grads is not contiguous; call .contiguous\(\) or np"):
        view(a[:, ::2], what="grads")
    with pytest.raises(ValueError, match=strided):
        view(a[:, ::2], what="grads")
    with pytest.raises(ValueError, match=r"\(strides \(1, 6\) elements .* shape \(6, 4\)"):
        view(torch.zeros(4, 6).t(), what="grads")
    with pytest.raises(ValueError, match="out is not contiguous; .*" + strided):
        view(DLPackOnly(a[:, ::2]), what="out")
    # A size-1 dimension's stride does not matter: a transposed row is contiguous.
    _expect(view(DLPackOnly(a[:1].T)), a.ctypes.data, 24, 6, "float32", (6, 1))


def test_read_only_buffers_are_refused_only_where_written():
    a = np.ones(3, np.float32)
    a.flags.writeable = False
    with pytest.raises(ValueError, match="out is read-only; the operation writes"):
        view(a, what="out")
    assert view(a, writable=False).ptr == a.ctypes.data
    with pytest.raises(ValueError, match="out is read-only"):
        view(DLPackOnly(a), what="out")
    assert view(DLPackOnly(a), writable=False).numel == 3


def test_unsupported_dtypes_name_the_dtype():
    with pytest.raises(TypeError, match=r"dtype bool is not supported; use one of"):
        view(np.ones(3, bool))
    with pytest.raises(TypeError, match=r"dtype complex64 is not supported"):
        view(torch.ones(3, dtype=torch.complex64))
    with pytest.raises(TypeError, match=r"dtype bool8 is not supported"):
        view(DLPackOnly(np.ones(3, bool)))
    with pytest.raises(TypeError, match=r"dtype complex128 is not supported"):
        view(DLPackOnly(np.ones(3, np.complex128)))
    with pytest.raises(TypeError, match=r"dtype uint16 is not supported"):
        view(DLPackOnly(np.ones(3, np.uint16)))
    with pytest.raises(TypeError, match="not in this machine's byte order"):
        view(np.ones(3, ">f4" if np.little_endian else "<f4"))
    with pytest.raises(TypeError, match=r"x: expected a numpy array or a torch tensor .* got list"):
        view([1.0], what="x")


def test_the_torch_backend_carries_bool_and_complex_as_views_of_the_same_memory():
    from pscore.torch_backend.tensors import carried

    b = torch.tensor([True, False, True])
    v = view(carried(b))
    assert (v.ptr, v.dtype, v.numel, v.nbytes) == (b.data_ptr(), "uint8", 3, 3)
    c = torch.zeros(4, dtype=torch.complex64)
    v = view(carried(c))
    assert (v.ptr, v.dtype, v.numel, v.shape) == (c.data_ptr(), "float32", 8, (4, 2))
    c = torch.zeros(2, dtype=torch.complex128)
    assert view(carried(c)).dtype == "float64"


def test_devices_other_than_the_host_are_refused_where_host_memory_is_needed():
    meta = torch.empty(3, device="meta")
    with pytest.raises(ValueError, match="tensor is on meta; pscore takes CPU and CUDA tensors"):
        view(meta)

    class OnAnAccelerator:
        def __dlpack_device__(self):
            return (4, 0)  # OpenCL

        def __dlpack__(self, **kw):
            raise AssertionError("not exported: the device is refused first")

    with pytest.raises(ValueError, match="x is on DLPack device type 4"):
        view(OnAnAccelerator(), what="x")


def test_pieces_of_a_view_point_into_it():
    a = np.arange(10, dtype=np.int64)
    first, second = view(a).rows([4, 6], "a")
    assert (first.ptr, first.numel, first.nbytes) == (a.ctypes.data, 4, 32)
    assert (second.ptr, second.numel, second.shape) == (a.ctypes.data + 32, 6, (6,))
    with pytest.raises(ValueError, match="a: pieces of 11 elements exceed its 10"):
        view(a).rows([5, 6], "a")


def test_values_are_converted_only_when_they_are_not_the_dtype_already():
    a = np.ones(4, np.float32)
    assert view_as(a, "float32", what="grad").ptr == a.ctypes.data
    v = view_as(np.ones((2, 2), np.float64), "float32", what="grad")
    assert (v.dtype, v.shape) == ("float32", (2, 2))
    ids = view_as(torch.tensor([[1, 2], [3, 4]], dtype=torch.int32), "int64", what="ids")
    assert (ids.dtype, ids.shape) == ("int64", (4,))
    with pytest.raises(TypeError, match="grad must hold floating-point values, got int32"):
        view_as(np.ones(2, np.int32), "float32", what="grad")
    with pytest.raises(TypeError, match=r"ids must be integers, got torch\.float32"):
        view_as(torch.ones(2), "int64", what="ids")
    with pytest.raises(ValueError, match="ids holds values above the int64 range"):
        view_as(np.array([2**63], np.uint64), "int64", what="ids")
    with pytest.raises(TypeError, match="out must be float32, got float64"):
        view_out(np.ones(2), "float32", what="out")


def test_numpy_calls_never_import_torch():
    code = (
        "import sys, numpy as np\n"
        "from pscore.buffer import view\n"
        "view(np.ones(3)); view(np.ones(3), writable=False)\n"
        "assert 'torch' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_tensors_carry_their_device_and_the_current_stream():
    t = torch.ones(4, 3, device="cuda")
    v = view(t, host=None)
    assert (v.ptr, v.nbytes, v.device_type, v.device_index) == (t.data_ptr(), 48, CUDA, 0)
    assert v.stream == torch.cuda.current_stream(0).cuda_stream
    assert v.device == "cuda:0"
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        assert view(t, host=None).stream == s.cuda_stream
    with pytest.raises(ValueError, match="grads is on cuda:0; this backend takes CPU tensors"):
        view(t, what="grads")
    # Through DLPack: the export is asked for the stream the work will run on.
    w = torch.arange(6, device="cuda", dtype=torch.float32)

    class Wrapped:
        def __dlpack_device__(self):
            return w.__dlpack_device__()

        def __dlpack__(self, **kw):
            return w.__dlpack__(**kw)

    v = view(Wrapped(), host=None)
    assert (v.ptr, v.device, v.stream) == (
        w.data_ptr(),
        "cuda:0",
        torch.cuda.current_stream(0).cuda_stream,
    )


def test_native_calls_take_dlpack_objects_and_name_them_in_errors():
    import uuid

    from pscore.hogwild import SharedTable

    with SharedTable.create(f"bv-{uuid.uuid4().hex[:10]}", (4, 2)) as t:
        ids = DLPackOnly(np.array([0, 3], np.int64))
        t.sgd(ids, DLPackOnly(np.ones((2, 2), np.float32)), lr=1.0)
        assert t.numpy().tolist() == [[-1, -1], [0, 0], [0, 0], [-1, -1]]
        with pytest.raises(TypeError, match="grads are float64 but the table holds float32"):
            t.sgd(ids, DLPackOnly(np.ones((2, 2))))
        with pytest.raises(ValueError, match=r"grads is not contiguous; .* shape \(2, 2\)"):
            t.sgd(ids, DLPackOnly(np.ones((2, 4), np.float32)[:, ::2]))
