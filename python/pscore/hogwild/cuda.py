"""Sparse Hogwild updates for tables in GPU memory (torch CUDA tensors), with the same SGD,
Adagrad and Adam arithmetic as the CPU kernels; rows repeated in a batch are combined with
atomicAdd. Available when pscore was built with a CUDA compiler and a device is present;
otherwise every call raises RuntimeError saying which of the two is missing."""

from __future__ import annotations

from typing import Any

from .. import _C, _hogwild
from .._enums import by_name

_KINDS = by_name(_C.OptimizerKind)  # those with a GPU kernel: sgd, adagrad, adam
_DTYPES = by_name(_C.DType)


def is_built() -> bool:
    """True when this pscore carries the CUDA kernels."""
    return bool(_hogwild.cuda_built())


def is_available() -> bool:
    """True when the kernels are built and a CUDA device is visible."""
    return is_built() and _hogwild.cuda_device_count() > 0


def peak_memory_bandwidth(device=None) -> float:
    """The card's peak memory bandwidth in bytes/s (memory clock x bus width x 2), 0 when the
    driver does not report it."""
    _require()
    import torch

    index = torch.device("cuda", torch.cuda.current_device()) if device is None else device
    return float(_hogwild.cuda_peak_memory_bandwidth(torch.device(index).index or 0))


def _require() -> None:
    if not is_built():
        raise RuntimeError(
            "pscore.hogwild.cuda: this pscore was built without CUDA (no CUDA compiler at build "
            "time); rebuild with nvcc on PATH, or use the CPU SharedTable"
        )
    if _hogwild.cuda_device_count() == 0:
        raise RuntimeError(
            "pscore.hogwild.cuda: no CUDA device is visible (driver or devices "
            "missing, or CUDA_VISIBLE_DEVICES hides them)"
        )


def _check_tensor(x: Any, what: str, device, dtypes: tuple) -> None:
    import torch

    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{what} must be a torch tensor, got {type(x).__name__}")
    if x.device.type != "cuda":
        raise ValueError(f"{what} is on {x.device}; the GPU kernels take CUDA tensors")
    if device is not None and x.device != device:
        raise ValueError(f"{what} is on {x.device} but the table is on {device}")
    name = str(x.dtype).replace("torch.", "")
    if name not in dtypes:
        raise TypeError(f"{what} is {name}; expected {' or '.join(dtypes)}")
    if not x.is_contiguous():
        raise ValueError(f"{what} is not contiguous; call .contiguous() first")


def _update(kind: str, table, states: list, ids, grads, coeffs: list) -> None:
    _require()
    import torch

    _check_tensor(table, "table", None, ("float32",))
    if table.dim() < 1 or table.numel() == 0:
        raise ValueError(f"table must have at least one row, got shape {tuple(table.shape)}")
    for name, s in states:
        _check_tensor(s, name, table.device, ("float32",))
        if s.shape != table.shape:
            raise ValueError(f"{name} has shape {tuple(s.shape)}, the table {tuple(table.shape)}")
    _check_tensor(ids, "ids", table.device, ("int64", "int32"))
    _check_tensor(grads, "grads", table.device, ("float32",))
    if ids.dim() != 1:
        raise ValueError(f"ids must be 1-D, got shape {tuple(ids.shape)}")
    want = (ids.numel(), *table.shape[1:])
    if tuple(grads.shape) != want:
        raise ValueError(f"grads have shape {tuple(grads.shape)}; {ids.numel()} ids need {want}")
    u = _request(kind, table, [s for _, s in states], ids, grads, coeffs)
    with torch.cuda.device(table.device):
        u.stream = torch.cuda.current_stream(table.device).cuda_stream
        _hogwild.cuda_sparse_update(u)


def _request(kind: str, table, states: list, ids, grads, coeffs: list) -> _hogwild.CudaSparseUpdate:
    """The binding's request for checked tensors (the stream is the caller's to set)."""
    u = _hogwild.CudaSparseUpdate()
    u.kind = _KINDS[kind]
    u.table, u.rows, u.dim = table.data_ptr(), table.shape[0], table.numel() // table.shape[0]
    u.state0, u.state1 = ([s.data_ptr() for s in states] + [0, 0])[:2]
    u.ids, u.num_ids, u.grads = ids.data_ptr(), ids.numel(), grads.data_ptr()
    u.ids_dtype = _DTYPES[str(ids.dtype).replace("torch.", "")]
    u.coeffs = [float(c) for c in coeffs]
    return u


def sgd(table, ids, grads, lr: float = 0.01) -> None:
    """table[ids[i]] -= lr * grads[i] on the GPU; repeated ids all apply."""
    _update("sgd", table, [], ids, grads, [lr])


def adagrad(table, state_sum, ids, grads, lr: float = 0.01, eps: float = 1e-10) -> None:
    """torch.optim.Adagrad's update of rows `ids`; state_sum is the accumulator (table's shape)."""
    _update("adagrad", table, [("state_sum", state_sum)], ids, grads, [lr, eps])


def adam(
    table,
    exp_avg,
    exp_avg_sq,
    ids,
    grads,
    lr: float = 1e-3,
    betas=(0.9, 0.999),
    eps: float = 1e-8,
    step: int = 1,
) -> None:
    """torch.optim.Adam's update of rows `ids` (no weight decay) at bias-correction `step`."""
    if not isinstance(step, int) or step < 1:
        raise ValueError(f"adam step must be an int >= 1, got {step!r}")
    states = [("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)]
    _update("adam", table, states, ids, grads, [lr, betas[0], betas[1], eps, step])
