"""Collectives and point-to-point calls with torch.distributed's names and semantics, on numpy
arrays and contiguous CPU torch tensors, in place and without copies."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import _C
from ._enums import by_name
from .errors import NetworkError
from .errors import TimeoutError as PscoreTimeoutError
from .group import default_group, resolve
from .tensor import Buffer, as_buffer
from .work import CollectiveWork, CompletedWork, Work


class ReduceOp:
    """torch.distributed.ReduceOp's names; plain strings ("sum", ...) work too."""

    SUM = "sum"
    PRODUCT = "prod"
    MIN = "min"
    MAX = "max"
    AVG = "avg"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


_REDUCE_OPS = by_name(_C.ReduceOp)  # csrc/common/dtype.h
_BITWISE = ("band", "bor", "bxor")
_INTEGER_DTYPES = ("int8", "uint8", "int32", "int64")


def _op_code(op: Any, dtype: str) -> _C.ReduceOp:
    name = op if isinstance(op, str) else str(op).split(".")[-1].split(":")[0]
    name = name.strip("<> ").lower()
    name = {"product": "prod"}.get(name, name)
    code = _REDUCE_OPS.get(name)
    if code is None:
        raise ValueError(f"reduce op {op!r} is not supported; use one of {sorted(_REDUCE_OPS)}")
    if name in _BITWISE and dtype not in _INTEGER_DTYPES:
        raise TypeError(f"reduce op {name} needs an integer dtype, got {dtype}")
    return code


def _finish(g, call, async_op: bool, keep: Any):
    """Runs a native call; a failure carries what the other ranks reported about it."""
    try:
        handle = call()
    except (NetworkError, PscoreTimeoutError) as e:
        raise g.explain(e) from None
    return CollectiveWork(handle, keep, g) if async_op else None


def _same_kind(bufs: Sequence[Buffer], ref: Buffer, what: str) -> None:
    for i, b in enumerate(bufs):
        if b.dtype != ref.dtype:
            raise TypeError(f"{what}[{i}] is {b.dtype}, expected {ref.dtype}")
        if b.numel != ref.numel:
            raise ValueError(f"{what}[{i}] has {b.numel} elements, expected {ref.numel}")


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    b = as_buffer(tensor)
    return _finish(
        g,
        lambda: g.native.allreduce(b.ptr, b.numel, b.dtype_code, _op_code(op, b.dtype), async_op),
        async_op,
        b,
    )


def broadcast(tensor, src: int = 0, group=None, async_op: bool = False):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    b = as_buffer(tensor)
    return _finish(
        g,
        lambda: g.native.broadcast(
            b.ptr, b.numel, b.dtype_code, g.group_rank(src, "src"), async_op
        ),
        async_op,
        b,
    )


def reduce(tensor, dst: int = 0, op=ReduceOp.SUM, group=None, async_op: bool = False):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    b = as_buffer(tensor)
    root = g.group_rank(dst, "dst")
    return _finish(
        g,
        lambda: g.native.reduce(
            b.ptr, b.numel, b.dtype_code, _op_code(op, b.dtype), root, async_op
        ),
        async_op,
        b,
    )


def all_gather(tensor_list: list, tensor, group=None, async_op: bool = False):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    b = as_buffer(tensor, writable=False)
    if len(tensor_list) != g.size:
        raise ValueError(
            f"all_gather: tensor_list has {len(tensor_list)} entries, the group has {g.size} ranks"
        )
    outs = [as_buffer(t, what=f"tensor_list[{i}]") for i, t in enumerate(tensor_list)]
    _same_kind(outs, b, "tensor_list")
    return _finish(
        g,
        lambda: g.native.allgather(b.ptr, b.numel, b.dtype_code, [o.ptr for o in outs], async_op),
        async_op,
        (b, outs),
    )


def _split(buf: Buffer, parts: int, what: str) -> list[int]:
    if buf.numel % parts:
        raise ValueError(
            f"{what} has {buf.numel} elements, not divisible by the group size {parts}"
        )
    step = buf.nbytes // parts
    return [buf.ptr + i * step for i in range(parts)]


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    b = as_buffer(input_tensor, writable=False)
    out = as_buffer(output_tensor, what="output_tensor")
    if out.dtype != b.dtype or out.numel != b.numel * g.size:
        raise ValueError(
            f"all_gather_into_tensor: output must be {g.size} x {b.numel} {b.dtype}, "
            f"got {out.numel} {out.dtype}"
        )
    return _finish(
        g,
        lambda: g.native.allgather(
            b.ptr, b.numel, b.dtype_code, _split(out, g.size, "output"), async_op
        ),
        async_op,
        (b, out),
    )


def reduce_scatter(output, input_list: list, op=ReduceOp.SUM, group=None, async_op: bool = False):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    out = as_buffer(output, what="output")
    if len(input_list) != g.size:
        raise ValueError(
            f"reduce_scatter: input_list has {len(input_list)} entries, the group has {g.size} ranks"
        )
    ins = [as_buffer(t, writable=False, what=f"input_list[{i}]") for i, t in enumerate(input_list)]
    _same_kind(ins, out, "input_list")
    return _finish(
        g,
        lambda: g.native.reduce_scatter(
            [i.ptr for i in ins],
            out.ptr,
            out.numel,
            out.dtype_code,
            _op_code(op, out.dtype),
            async_op,
        ),
        async_op,
        (out, ins),
    )


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op: bool = False):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    out = as_buffer(output, what="output")
    inp = as_buffer(input, writable=False, what="input")
    if inp.dtype != out.dtype or inp.numel != out.numel * g.size:
        raise ValueError(
            f"reduce_scatter_tensor: input must be {g.size} x {out.numel} {out.dtype}, "
            f"got {inp.numel} {inp.dtype}"
        )
    return _finish(
        g,
        lambda: g.native.reduce_scatter(
            _split(inp, g.size, "input"),
            out.ptr,
            out.numel,
            out.dtype_code,
            _op_code(op, out.dtype),
            async_op,
        ),
        async_op,
        (out, inp),
    )


def gather(
    tensor, gather_list: list | None = None, dst: int = 0, group=None, async_op: bool = False
):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    b = as_buffer(tensor, writable=False)
    root = g.group_rank(dst, "dst")
    outs: list[Buffer] = []
    if g.rank == root:
        if gather_list is None or len(gather_list) != g.size:
            raise ValueError(f"gather: the destination needs a gather_list of {g.size} tensors")
        outs = [as_buffer(t, what=f"gather_list[{i}]") for i, t in enumerate(gather_list)]
        _same_kind(outs, b, "gather_list")
    elif gather_list:
        raise ValueError("gather: only the destination rank passes a gather_list")
    return _finish(
        g,
        lambda: g.native.gather(
            b.ptr, b.numel, b.dtype_code, [o.ptr for o in outs], root, async_op
        ),
        async_op,
        (b, outs),
    )


def scatter(
    tensor, scatter_list: list | None = None, src: int = 0, group=None, async_op: bool = False
):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    out = as_buffer(tensor)
    root = g.group_rank(src, "src")
    ins: list[Buffer] = []
    if g.rank == root:
        if scatter_list is None or len(scatter_list) != g.size:
            raise ValueError(f"scatter: the source needs a scatter_list of {g.size} tensors")
        ins = [
            as_buffer(t, writable=False, what=f"scatter_list[{i}]")
            for i, t in enumerate(scatter_list)
        ]
        _same_kind(ins, out, "scatter_list")
    elif scatter_list:
        raise ValueError("scatter: only the source rank passes a scatter_list")
    return _finish(
        g,
        lambda: g.native.scatter(
            [i.ptr for i in ins], out.ptr, out.numel, out.dtype_code, root, async_op
        ),
        async_op,
        (out, ins),
    )


def all_to_all(
    output_tensor_list: list, input_tensor_list: list, group=None, async_op: bool = False
):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    if len(output_tensor_list) != g.size or len(input_tensor_list) != g.size:
        raise ValueError(f"all_to_all: need {g.size} input and {g.size} output tensors")
    ins = [
        as_buffer(t, writable=False, what=f"input_tensor_list[{i}]")
        for i, t in enumerate(input_tensor_list)
    ]
    outs = [as_buffer(t, what=f"output_tensor_list[{i}]") for i, t in enumerate(output_tensor_list)]
    dtype = ins[0].dtype
    for b in ins + outs:
        if b.dtype != dtype:
            raise TypeError(f"all_to_all: mixed dtypes {b.dtype} and {dtype}")
    return _finish(
        g,
        lambda: g.native.all_to_all(
            [b.ptr for b in ins],
            [b.numel for b in ins],
            [b.ptr for b in outs],
            [b.numel for b in outs],
            ins[0].dtype_code,
            async_op,
        ),
        async_op,
        (ins, outs),
    )


def _splits(buf: Buffer, sizes, n: int, what: str) -> tuple[list[int], list[int]]:
    """Pointers and element counts of buf cut along its first dimension by `sizes` rows."""
    shape = tuple(getattr(buf.owner, "shape", (buf.numel,)))
    rows = shape[0] if shape else 1
    row = buf.numel // rows if rows else 0
    if sizes is None:
        if rows % n:
            raise ValueError(
                f"{what}: first dimension {rows} is not divisible by the group size {n}"
            )
        sizes = [rows // n] * n
    sizes = list(sizes)
    if len(sizes) != n or sum(sizes) != rows:
        raise ValueError(f"{what} split sizes {sizes} must have {n} entries summing to {rows}")
    esize = buf.nbytes // buf.numel if buf.numel else 0
    ptrs, counts, at = [], [], 0
    for s in sizes:
        ptrs.append(buf.ptr + at * row * esize)
        counts.append(s * row)
        at += s
    return ptrs, counts


def all_to_all_single(
    output,
    input,
    output_split_sizes=None,
    input_split_sizes=None,
    group=None,
    async_op: bool = False,
):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    out = as_buffer(output, what="output")
    inp = as_buffer(input, writable=False, what="input")
    if out.dtype != inp.dtype:
        raise TypeError(f"all_to_all_single: output is {out.dtype}, input is {inp.dtype}")
    in_ptrs, in_counts = _splits(inp, input_split_sizes, g.size, "input")
    out_ptrs, out_counts = _splits(out, output_split_sizes, g.size, "output")
    return _finish(
        g,
        lambda: g.native.all_to_all(
            in_ptrs, in_counts, out_ptrs, out_counts, inp.dtype_code, async_op
        ),
        async_op,
        (out, inp),
    )


def barrier(group=None, async_op: bool = False):
    g = resolve(group)
    if g is None:
        return CompletedWork() if async_op else None
    return _finish(g, lambda: g.native.barrier(async_op), async_op, None)


def isend(tensor, dst: int, group=None, tag: int = 0) -> Work:
    g = resolve(group)
    if g is None:
        raise ValueError("isend: this rank is not in the group")
    b = as_buffer(tensor, writable=False)
    peer = g.group_rank(dst, "dst")
    return _finish(g, lambda: g.native.send(b.ptr, b.numel, b.dtype_code, peer, tag, True), True, b)


def irecv(tensor, src: int | None = None, group=None, tag: int = 0) -> Work:
    """Receives into `tensor` from `src`, or with src=None from whichever rank sends first;
    the returned Work's source_rank() names the sender."""
    g = resolve(group)
    if g is None:
        raise ValueError("irecv: this rank is not in the group")
    b = as_buffer(tensor)
    if src is None:
        call = lambda: g.native.recv_any(b.ptr, b.numel, b.dtype_code, tag, True)
    else:
        peer = g.group_rank(src, "src")
        call = lambda: g.native.recv(b.ptr, b.numel, b.dtype_code, peer, tag, True)
    return _finish(g, call, True, b)


def send(tensor, dst: int, group=None, tag: int = 0) -> None:
    isend(tensor, dst, group, tag).wait()


def recv(tensor, src: int | None = None, group=None, tag: int = 0) -> int:
    """Blocks until `tensor` holds a message from `src` (None: any rank); returns the sender."""
    work = irecv(tensor, src, group, tag)
    work.wait()
    return work.source_rank()


def get_rank(group=None) -> int:
    g = resolve(group)
    return -1 if g is None else g.rank


def get_world_size(group=None) -> int:
    g = resolve(group)
    return -1 if g is None else g.size


def get_backend(group=None) -> str:
    return "pscore/" + (resolve(group) or default_group()).transport
