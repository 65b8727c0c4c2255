"""Type-checked, never run: uses of the extension modules that their .pyi stubs must accept
(mypy --strict in .ci/stubs), so a stub that loses a type or an enum fails CI."""

from __future__ import annotations

import numpy as np

from pscore import _C, _hogwild, _ps, _types
from pscore.buffer import view


def hogwild_table() -> float:
    spec = _hogwild.TableSpec()
    spec.shape = [4, 3]
    spec.dtype = _types.DType.FLOAT32
    spec.optimizer = _hogwild.OptimizerState.ADAM
    options = _hogwild.CreateOptions()
    options.segment.lock_timeout_ms = 1000
    init = view(np.zeros((4, 3), np.float32), writable=False, what="init")
    table = _hogwild.Table.create("t", spec, options, init)
    table.adam(None, table.view(-1), False, False, _hogwild.AdamOptions(lr=0.1))
    state: _hogwild.OptimizerState = table.optimizer
    return _hogwild.SgdOptions().lr + float(state.value)


def cuda_update() -> None:
    table, ids, grads = np.zeros((2, 3), np.float32), np.zeros(1, np.int64), np.ones((1, 3))
    _hogwild.cuda_adagrad(
        view(table, what="table"),
        view(np.zeros_like(table), what="state_sum"),
        view(ids, writable=False, what="ids"),
        view(grads.astype(np.float32), writable=False, what="grads"),
        _hogwild.AdagradOptions(lr=0.1, eps=1e-10),
    )


def ps_spec() -> list[tuple[int, int, int]]:
    spec = _ps.TableSpec()
    spec.consistency = _ps.Consistency.SSP
    spec.init_kind = _ps.InitKind.NORMAL
    spec.optimizer.kind = _types.OptimizerKind.ADAM
    parts, _loads = _ps.plan_dense_parts(1 << 20, 4, [0, 0])
    return parts


def reduce_op(group: _C.ProcessGroup) -> _C.Work:
    return group.allreduce(view(np.ones(4, np.float32)), _types.ReduceOp.SUM, False)
