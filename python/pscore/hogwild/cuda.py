"""Sparse Hogwild updates for tables in GPU memory (torch CUDA tensors), with the same SGD,
Adagrad and Adam arithmetic as the CPU kernels; rows repeated in a batch are combined with
atomicAdd. Available when pscore was built with a CUDA compiler and a device is present;
otherwise every call raises RuntimeError saying which of the two is missing."""

from __future__ import annotations

from typing import Any

from .. import _hogwild
from ..buffer import CUDA, BufferView, view

__all__ = ["adagrad", "adam", "is_available", "is_built", "peak_memory_bandwidth", "sgd"]


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


def _cuda_view(x: Any, what: str, device: int | None, dtypes: tuple) -> BufferView:
    """x viewed in place (any CUDA __dlpack__ object; torch tensors take the fast path), on CUDA
    device `device` (None: any) and of one of `dtypes`."""
    v = view(x, what=what, host=None)
    if v.device_type != CUDA:
        raise ValueError(f"{what} is on {v.device}; the GPU kernels take CUDA tensors")
    if device is not None and v.device_index != device:
        raise ValueError(f"{what} is on {v.device} but the table is on cuda:{device}")
    if v.dtype not in dtypes:
        raise TypeError(f"{what} is {v.dtype}; expected {' or '.join(dtypes)}")
    return v


def _update(entry, table, states: list, ids, grads, options) -> None:
    """Checks the tensors, then runs `entry` (a _hogwild.cuda_* binding) on their views."""
    _require()
    t = _cuda_view(table, "table", None, ("float32",))
    if len(t.shape) < 1 or t.numel == 0:
        raise ValueError(f"table must have at least one row, got shape {t.shape}")
    device = t.device_index
    views = []
    for name, s in states:
        v = _cuda_view(s, name, device, ("float32",))
        if v.shape != t.shape:
            raise ValueError(f"{name} has shape {v.shape}, the table {t.shape}")
        views.append(v)
    i = _cuda_view(ids, "ids", device, ("int64", "int32"))
    g = _cuda_view(grads, "grads", device, ("float32",))
    if len(i.shape) != 1:
        raise ValueError(f"ids must be 1-D, got shape {i.shape}")
    want = (i.numel, *t.shape[1:])
    if g.shape != want:
        raise ValueError(f"grads have shape {g.shape}; {i.numel} ids need {want}")
    entry(t, *views, i, g, options)


# The defaults are the C++ option structs' (torch.optim's), read once.
_SGD, _ADAGRAD, _ADAM = _hogwild.SgdOptions(), _hogwild.AdagradOptions(), _hogwild.AdamOptions()


def sgd(table, ids, grads, lr: float = _SGD.lr) -> None:
    """table[ids[i]] -= lr * grads[i] on the GPU; repeated ids all apply."""
    _update(_hogwild.cuda_sgd, table, [], ids, grads, _hogwild.SgdOptions(lr=lr))


def adagrad(
    table, state_sum, ids, grads, lr: float = _ADAGRAD.lr, eps: float = _ADAGRAD.eps
) -> None:
    """torch.optim.Adagrad's update of rows `ids`; state_sum is the accumulator (the table's
    shape)."""
    options = _hogwild.AdagradOptions(lr=lr, eps=eps)
    _update(_hogwild.cuda_adagrad, table, [("state_sum", state_sum)], ids, grads, options)


def adam(
    table,
    exp_avg,
    exp_avg_sq,
    ids,
    grads,
    lr: float = _ADAM.lr,
    betas=(_ADAM.beta1, _ADAM.beta2),
    eps: float = _ADAM.eps,
    step: int = 1,
) -> None:
    """torch.optim.Adam's update of rows `ids` (no weight decay) at bias-correction `step`."""
    if not isinstance(step, int) or step < 1:
        raise ValueError(f"adam step must be an int >= 1, got {step!r}")
    options = _hogwild.AdamOptions(lr=lr, beta1=betas[0], beta2=betas[1], eps=eps, step=step)
    states = [("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)]
    _update(_hogwild.cuda_adam, table, states, ids, grads, options)
