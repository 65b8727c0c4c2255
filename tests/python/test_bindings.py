"""The typed bindings: C++ enums exported once and shared by the extension modules, option
structs whose fields start at the C++ defaults, and the CUDA request built as a struct (checked
here without a GPU)."""

from __future__ import annotations

import pytest

from pscore import _hogwild, _ps, _types, buffer
from pscore._enums import by_name, name_of
from pscore.hogwild.table import STATE_NAMES
from pscore.ps.tables import CONSISTENCY, INITIALIZERS


def test_python_names_are_the_exported_enum_members():
    assert buffer.DTYPE_CODES == {
        "float16": 0,
        "bfloat16": 1,
        "float32": 2,
        "float64": 3,
        "int8": 4,
        "uint8": 5,
        "int32": 6,
        "int64": 7,
    }  # fmt: skip; read from _types.DType, in csrc/common/dtype.h's order
    assert list(by_name(_types.ReduceOp)) == [
        "sum", "prod", "min", "max", "avg", "band", "bor", "bxor"
    ]  # fmt: skip
    assert list(by_name(_types.OptimizerKind)) == ["sgd", "adagrad", "adam", "adamw", "rmsprop"]
    assert list(INITIALIZERS) == ["zeros", "uniform", "normal", "constant"]
    assert list(CONSISTENCY) == ["async", "sync", "ssp"]
    assert set(by_name(_hogwild.OptimizerState)) == set(STATE_NAMES)
    assert name_of(_ps.Consistency.SSP) == "ssp"


def test_modules_share_one_enum_type():
    spec = _ps.OptimizerSpec()
    assert isinstance(spec.kind, _types.OptimizerKind) and spec.kind == _types.OptimizerKind.SGD
    spec.kind = _types.OptimizerKind.ADAMW
    assert spec.kind == _types.OptimizerKind.ADAMW
    with pytest.raises(TypeError):
        spec.kind = 3  # numbers no longer cross


def test_option_structs_start_at_the_cpp_defaults_and_keep_their_fields():
    sgd = _hogwild.SgdOptions()
    assert (sgd.lr, sgd.momentum, sgd.nesterov) == (1e-3, 0.0, False)
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
    assert (spec.dtype, spec.optimizer) == (_types.DType.FLOAT32, _hogwild.OptimizerState.NONE)
    assert spec.lock_stripes == _hogwild.DEFAULT_LOCK_STRIPES
    table = _ps.TableSpec()
    assert (table.init_kind, table.consistency) == (_ps.InitKind.ZEROS, _ps.Consistency.ASYNC)


def test_the_cuda_updates_are_named_and_take_option_structs_and_views():
    torch = pytest.importorskip("torch")
    table, ids, grads = torch.zeros(5, 3), torch.tensor([4, 0]), torch.ones(2, 3)
    views = [buffer.view(x, what=w) for x, w in ((table, "table"), (ids, "ids"), (grads, "g"))]
    sgd = _hogwild.SgdOptions(lr=0.1)
    with pytest.raises(TypeError):  # coefficients no longer cross as a positional list
        _hogwild.cuda_sgd(views[0], views[1], views[2], [0.1])
    with pytest.raises(TypeError):  # nor a raw address for the table
        _hogwild.cuda_sgd(table.data_ptr(), views[1], views[2], sgd)
    with pytest.raises(TypeError):  # each update takes its own optimizer's options
        _hogwild.cuda_sgd(views[0], views[1], views[2], _hogwild.AdamOptions())
    assert not hasattr(_hogwild, "cuda_sparse_update")
    # Typed arguments reach the binding, which reads the device from the views: host memory is
    # refused before any kernel, with or without CUDA built.
    with pytest.raises(ValueError, match="table is on cpu; this operation takes a CUDA device"):
        _hogwild.cuda_sgd(table=views[0], ids=views[1], grads=views[2], options=sgd)
    state = buffer.view(torch.zeros(5, 3), what="state")
    with pytest.raises(ValueError, match="table is on cpu"):
        _hogwild.cuda_adagrad(views[0], state, views[1], views[2], _hogwild.AdagradOptions())
    with pytest.raises(ValueError, match="table is on cpu"):
        _hogwild.cuda_adam(views[0], state, state, views[1], views[2], _hogwild.AdamOptions())
