"""Type-checked, never run: uses of the extension modules that their .pyi stubs must accept
(mypy --strict in .ci/stubs), so a stub that loses a type or an enum fails CI."""

from __future__ import annotations

from pscore import _C, _hogwild, _ps


def hogwild_table() -> float:
    spec = _hogwild.TableSpec()
    spec.shape = [4, 3]
    spec.dtype = _C.DType.FLOAT32
    spec.optimizer = _hogwild.OptimizerState.ADAM
    options = _hogwild.CreateOptions()
    options.segment.lock_timeout_ms = 1000
    table = _hogwild.Table.create("t", spec, options)
    table.adam(None, table.view(-1), False, False, _hogwild.AdamOptions(lr=0.1))
    state: _hogwild.OptimizerState = table.optimizer
    return _hogwild.SgdOptions().lr + float(state.value)


def cuda_update() -> None:
    u = _hogwild.CudaSparseUpdate()
    u.kind = _C.OptimizerKind.ADAGRAD
    u.ids_dtype = _C.DType.INT64
    u.table, u.rows, u.dim = 0, 1, 1
    _hogwild.cuda_sparse_update(u)


def ps_spec() -> list[tuple[int, int, int]]:
    spec = _ps.TableSpec()
    spec.consistency = _ps.Consistency.SSP
    spec.init_kind = _ps.InitKind.NORMAL
    spec.optimizer.kind = _C.OptimizerKind.ADAM
    parts, _loads = _ps.plan_dense_parts(1 << 20, 4, [0, 0])
    return parts


def reduce_op(group: _C.ProcessGroup, address: int) -> _C.Work:
    return group.allreduce(address, 1, _C.DType.FLOAT32, _C.ReduceOp.SUM, False)
