"""torch tensors as the pscore torch backend hands them to pscore's collectives, and the checks
and reduce-op names it applies on the way (the rules gloo applies, with gloo's errors' meaning).

pscore's collectives take contiguous tensors of its own dtypes in place. A bool tensor is passed
as its uint8 view and a complex one as its real view (no copies); a non-contiguous tensor goes
through a contiguous copy that `Staging.finish` writes back once the operation is done (for a
CUDA tensor, on the stream that was current when the operation started, behind the operation's
own copy back: csrc/gpu/staging.h)."""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist

from ..collectives.functions import op_code

__all__ = [
    "PLAIN_OP_CODES",
    "Staging",
    "carried",
    "carried_list",
    "check_list_length",
    "check_same_shape",
    "check_stacked",
    "op_key",
    "op_name",
    "plain_op_code",
]

_BITWISE = {dist.ReduceOp.BAND: "band", dist.ReduceOp.BOR: "bor", dist.ReduceOp.BXOR: "bxor"}
_ARITHMETIC = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.PRODUCT: "prod",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.AVG: "avg",
}
# On 0/1 values, a sum that saturates is a max and a product is a min.
_BOOL_OPS = {"sum": "max", "prod": "min"}


_NAMES_SEEN: dict = {}  # (op's number, dtype) -> pscore's name: looked up once per pair


def _number(op) -> int:
    """The number of a ReduceOp's type (or of a RedOpType)."""
    return int(getattr(op, "op", op))


# A ReduceOp and a RedOpType hash to that number in the torch versions seen (0.07 us, where
# reading it takes 0.3); the cache keys on hash() only while this torch still does so.
_OPS = (_ARITHMETIC | _BITWISE).keys()
op_key = hash if all(hash(dist.ReduceOp(o)) == hash(o) == _number(o) for o in _OPS) else _number


def op_name(op, dtype: torch.dtype) -> str:
    """pscore's name for a torch ReduceOp (or its RedOpType) applied to `dtype`; raises where
    gloo does."""
    key = (op_key(op), dtype)
    name = _NAMES_SEEN.get(key)
    if name is None:
        name = _NAMES_SEEN[key] = _looked_up(op, dtype)
    return name


# (op key, dtype) -> the core's code of the op, for the dtypes the core carries as they are: the
# all_reduce latency path reads it in one lookup (op_name and carried() cost ~0.9 us a call).
PLAIN_OP_CODES: dict = {}


def plain_op_code(op, dtype: torch.dtype):
    """The core's code for `op` on a tensor of `dtype` passed as it is, kept in PLAIN_OP_CODES;
    None for the dtypes carried() converts. Raises where op_name does."""
    name = op_name(op, dtype)
    if dtype in _CARRIED_AS:
        return None
    return PLAIN_OP_CODES.setdefault((op_key(op), dtype), op_code(name))


def _looked_up(op, dtype: torch.dtype) -> str:
    if op == dist.ReduceOp.PREMUL_SUM:
        raise ValueError("pscore backend: ReduceOp.PREMUL_SUM is not supported (nor by gloo)")
    for table in (_ARITHMETIC, _BITWISE):
        for torch_op, name in table.items():
            if op == torch_op:
                return _checked(name, table is _BITWISE, dtype)
    raise ValueError(f"pscore backend: reduce op {op} is not supported")


def _checked(name: str, bitwise: bool, dtype: torch.dtype) -> str:
    label = f"ReduceOp.{'PRODUCT' if name == 'prod' else name.upper()}"
    if bitwise and (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"pscore backend: {label} needs an integral dtype, got {dtype}")
    if name == "avg" and not (dtype.is_floating_point or dtype.is_complex):
        raise TypeError(f"pscore backend: {label} needs a floating-point dtype, got {dtype}")
    if dtype == torch.bool:
        return _BOOL_OPS.get(name, name)
    return name


# dtype -> its view in a dtype pscore carries: bool as uint8, complex as its real pairs.
_CARRIED_AS = {
    torch.bool: lambda t: t.view(torch.uint8),
    **dict.fromkeys((torch.complex32, torch.complex64, torch.complex128), torch.view_as_real),
}


def carried(t: torch.Tensor) -> torch.Tensor:
    """The same memory in a dtype pscore carries (bool as uint8, complex as its real pairs)."""
    as_carried = _CARRIED_AS.get(t.dtype)
    return t if as_carried is None else as_carried(t)


def carried_list(tensors, dtype: torch.dtype):
    """carried() of each of `tensors`, all of `dtype`: the list itself for a dtype pscore carries
    as it is."""
    return tensors if dtype not in _CARRIED_AS else [carried(t) for t in tensors]


class Staging:
    """The tensors one operation hands to pscore, and the write-back of staged outputs."""

    __slots__ = ("_write_back",)

    def __init__(self):
        self._write_back: list[tuple[torch.Tensor, torch.Tensor, object]] = []

    def input(self, t: torch.Tensor) -> torch.Tensor:
        return carried(t.contiguous())

    def output(self, t: torch.Tensor) -> torch.Tensor:
        """A tensor pscore may write (and read: in-place operations start from its values)."""
        if t.is_contiguous():
            return carried(t)
        staged = t.contiguous()
        stream = torch.cuda.current_stream(t.device) if t.is_cuda else None
        self._write_back.append((t, staged, stream))
        return carried(staged)

    def finish(self) -> None:
        for t, staged, stream in self._write_back:
            with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                t.copy_(staged)
        self._write_back.clear()


def check_same_shape(tensors, ref: torch.Tensor, what: str) -> None:
    for i, t in enumerate(tensors):
        if t.dtype != ref.dtype or t.shape != ref.shape:
            raise ValueError(
                f"pscore backend: {what}[{i}] is {t.dtype} {tuple(t.shape)}, "
                f"expected {ref.dtype} {tuple(ref.shape)}"
            )


def check_list_length(tensors, n: int, what: str) -> None:
    if len(tensors) != n:
        raise ValueError(f"pscore backend: {what} has {len(tensors)} tensors, expected {n}")


def check_stacked(output: torch.Tensor, world: int, input: torch.Tensor, what: str) -> None:
    """output must stack `world` tensors shaped like `input` along its first dimension (without
    cutting it: output.chunk costs microseconds)."""
    shape = input.shape
    if not (len(shape) and output.shape == (world * shape[0], *shape[1:])):
        raise ValueError(
            f"pscore backend: {what} {tuple(output.shape)} must stack {world} tensors "
            f"of shape {tuple(input.shape)} along its first dimension"
        )
    if output.dtype != input.dtype:
        raise TypeError(f"pscore backend: {what} is {output.dtype}, input is {input.dtype}")
