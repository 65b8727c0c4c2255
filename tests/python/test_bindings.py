"""The typed bindings: C++ enums exported once and shared by the extension modules, option
structs whose fields start at the C++ defaults, and the CUDA request built as a struct (checked
here without a GPU)."""

from __future__ import annotations

import pytest

from pscore import _C, _hogwild, _ps, tensor
from pscore._enums import by_name, name_of
from pscore.hogwild import cuda as hwcuda
from pscore.hogwild.table import STATE_NAMES
from pscore.ps.tables import CONSISTENCY, INITIALIZERS


def test_python_names_are_the_exported_enum_members():
    assert tensor.DTYPES == (
        "float16", "bfloat16", "float32", "float64", "int8", "uint8", "int32", "int64"
    )  # fmt: skip
    assert list(by_name(_C.ReduceOp)) == [
        "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"
    ]  # fmt: skip
    assert list(by_name(_C.OptimizerKind)) == ["sgd", "adagrad", "adam", "adamw", "rmsprop"]
    assert list(INITIALIZERS) == ["zeros", "uniform", "normal", "constant"]
    assert list(CONSISTENCY) == ["async", "sync", "ssp"]
    assert set(by_name(_hogwild.OptimizerState)) == set(STATE_NAMES)
    assert name_of(_ps.Consistency.SSP) == "ssp"


def test_modules_share_one_enum_type():
    spec = _ps.OptimizerSpec()
    assert isinstance(spec.kind, _C.OptimizerKind) and spec.kind == _C.OptimizerKind.SGD
    spec.kind = _C.OptimizerKind.ADAMW
    assert spec.kind == _C.OptimizerKind.ADAMW
    request = _hogwild.CudaSparseUpdate()
    request.ids_dtype = _C.DType.INT32
    assert request.ids_dtype == _C.DType.INT32
    with pytest.raises(TypeError):
        spec.kind = 3  # numbers no longer cross


def test_option_structs_start_at_the_cpp_defaults_and_keep_their_fields():
    sgd = _hogwild.SgdOptions()
    assert (sgd.lr, sgd.momentum, sgd.nesterov) == (0.01, 0.0, False)
    adam = _hogwild.AdamOptions(lr=0.1, amsgrad=True)
    assert (adam.lr, adam.beta1, adam.beta2, adam.eps, adam.amsgrad) == (
        0.1,
        0.9,
        0.999,
        1e-8,
        True,
    )
    adam.weight_decay = 0.5
    assert adam.weight_decay == 0.5
    segment = _hogwild.SegmentOptions()
    assert (segment.populate, segment.wait_ms, segment.ready_timeout_ms) == (True, 0, 30000)
    spec = _hogwild.TableSpec()
    assert (spec.dtype, spec.optimizer) == (_C.DType.FLOAT32, _hogwild.OptimizerState.NONE)
    assert spec.lock_stripes == _hogwild.DEFAULT_LOCK_STRIPES
    table = _ps.TableSpec()
    assert (table.init_kind, table.consistency) == (_ps.InitKind.ZEROS, _ps.Consistency.ASYNC)


def test_cuda_request_names_each_field():
    torch = pytest.importorskip("torch")
    table, state_sum = torch.zeros(5, 3), torch.zeros(5, 3)
    ids, grads = torch.tensor([4, 0], dtype=torch.int32), torch.ones(2, 3)
    u = hwcuda._request("adagrad", table, [state_sum], ids, grads, [0.1, 1e-10])
    assert u.kind == _C.OptimizerKind.ADAGRAD and u.ids_dtype == _C.DType.INT32
    assert (u.table, u.state0, u.state1) == (table.data_ptr(), state_sum.data_ptr(), 0)
    assert (u.rows, u.dim, u.num_ids) == (5, 3, 2)
    assert (u.ids, u.grads) == (ids.data_ptr(), grads.data_ptr())
    assert u.coeffs == [0.1, 1e-10]
    # The binding checks the request before any kernel: without CUDA it says so, with CUDA
    # an empty request is refused.
    expected = ValueError if _hogwild.cuda_built() else RuntimeError
    with pytest.raises(expected, match="empty or null table|without CUDA"):
        _hogwild.cuda_sparse_update(_hogwild.CudaSparseUpdate())
