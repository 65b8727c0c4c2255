"""Collectives and point-to-point calls with torch.distributed's names and semantics, on numpy
arrays and contiguous torch tensors, in place and without copies. `src` and `dst` are global
ranks; `group` defaults to the world. With `async_op=True` a call returns a Work at once,
otherwise None when it has finished. CUDA tensors go to the group's NCCL communicator on a group
with NCCL (backends "nccl" and "auto"; nccl_link.py), where a call returns once enqueued on the
caller's stream, as torch's NCCL backend does; elsewhere the core stages them through pinned
host memory (csrc/gpu/staging.h; docs/gpu.md)."""

from __future__ import annotations

from typing import Any

from .. import _C, _types
from .._enums import by_name
from ..buffer import CUDA, BufferView
from ..buffer import device_view as view
from ..errors import NetworkError
from ..errors import TimeoutError as PscoreTimeoutError
from .group import _world, default_group, resolve
from .work import CollectiveWork, CompletedWork, Work

__all__ = [
    "ReduceOp",
    "all_gather",
    "all_gather_into_tensor",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "gather",
    "get_backend",
    "get_rank",
    "get_world_size",
    "irecv",
    "isend",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "send",
]


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


_REDUCE_OPS = by_name(_types.ReduceOp)  # csrc/common/dtype.h


_OPS_SEEN: dict = {}  # op as callers pass it -> (code, name): parsed once per distinct op


def _parse_op(op: Any) -> tuple:
    name = op if isinstance(op, str) else str(op).split(".")[-1].split(":")[0]
    name = name.strip("<> ").lower()
    name = {"product": "prod"}.get(name, name)
    code = _REDUCE_OPS.get(name)
    if code is None:
        raise ValueError(f"reduce op {op!r} is not supported; use one of {sorted(_REDUCE_OPS)}")
    return code, name


def op_code(op: Any) -> _types.ReduceOp:
    """The core's code for op; the core checks it applies to the buffers' dtype."""
    try:
        return _OPS_SEEN[op][0]
    except KeyError:
        return _OPS_SEEN.setdefault(op, _parse_op(op))[0]
    except TypeError:  # an unhashable op object
        return _parse_op(op)[0]


# A failure of a native call carries what the other ranks reported about it (g.explain).
_FAILURES = (NetworkError, PscoreTimeoutError)

# The latency path. On a group without NCCL every buffer goes to the core, which views the
# caller's objects itself (bindings/user_buffer.h: a numpy array or a CPU tensor costs no Python
# view), so all_reduce, broadcast, reduce, all_gather_into_tensor, reduce_scatter_tensor,
# all_to_all_single and barrier call it inline, and every call reads the default group straight
# from `_world`: the frames of `resolve` and `_finish` cost 0.2 us of a 0.6 us call
# (all_reduce of 4 KB on a group of one, docs/collectives.md). The list collectives (all_gather,
# reduce_scatter, gather, scatter, all_to_all) pass their lists to the core as they are, which
# views and checks every entry (bindings/buffer_lists.h); a view per entry made here cost 3 us.


def _not_a_member(group, async_op: bool):
    """What a call returns on a rank outside `group`; resolve raises when pscore is not
    initialised (group None)."""
    resolve(group)
    return CompletedWork() if async_op else None


def _finish(g, keep: Any, async_op: bool, call, *args):
    """Runs the native call(*args), explaining its failure: a Work keeping `keep` alive until it
    is done, or None when the call blocked."""
    try:
        h = call(*args)
    except _FAILURES as e:
        raise g.explain(e) from None
    return CollectiveWork(h, keep, g) if async_op else None


def _cuda(g, *views: BufferView) -> bool:
    """Whether the call goes to the group's NCCL communicator: CUDA buffers on a group with one."""
    return g.nccl is not None and any(v.device_type == CUDA for v in views)


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduces `tensor` across the group in place: every rank ends with the result of `op`."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    code = op_code(op)
    if g.nccl is None:  # the latency path
        try:
            h = g.core.allreduce(tensor, code, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, tensor, g) if async_op else None
    b = view(tensor)
    if b.device_type == CUDA:
        sig = (b.dtype, b.numel, code.name)
        return g.nccl.run("allreduce", sig, b, b, async_op, lambda c: c.allreduce(b, code))
    return _finish(g, b, async_op, g.native.allreduce, b, code, async_op)


def all_reduce_blocking(g, tensor, code: _types.ReduceOp) -> None:
    """all_reduce on group `g` (resolved, this rank a member, no NCCL) with the core's op code,
    blocking: the torch backend's latency path, which has read both already."""
    try:
        g.core.allreduce(tensor, code, False)
    except _FAILURES as e:
        raise g.explain(e) from None


def broadcast(tensor, src: int = 0, group=None, async_op: bool = False):
    """Copies rank `src`'s `tensor` into every other rank's `tensor`."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    root = g.group_rank(src, "src")
    if g.nccl is None:  # the latency path
        try:
            h = g.core.broadcast(tensor, root, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, tensor, g) if async_op else None
    b = view(tensor)
    if _cuda(g, b):
        sig = (b.dtype, b.numel, root)
        return g.nccl.run("broadcast", sig, b, b, async_op, lambda c: c.broadcast(b, root))
    return _finish(g, b, async_op, g.native.broadcast, b, root, async_op)


def reduce(tensor, dst: int = 0, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduces `tensor` across the group into rank `dst`'s `tensor`."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    root = g.group_rank(dst, "dst")
    code = op_code(op)
    if g.nccl is None:  # the latency path
        try:
            h = g.core.reduce(tensor, code, root, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, tensor, g) if async_op else None
    b = view(tensor)
    if _cuda(g, b):
        sig = (b.dtype, b.numel, code.name, root)
        return g.nccl.run("reduce", sig, b, b, async_op, lambda c: c.reduce(b, code, root))
    return _finish(g, b, async_op, g.native.reduce, b, code, root, async_op)


def all_gather(tensor_list: list, tensor, group=None, async_op: bool = False):
    """Fills `tensor_list[i]` on every rank with rank i's `tensor` (one entry per group rank)."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    if g.nccl is None:  # the latency path: the core views and checks the list
        try:
            h = g.core.allgather(tensor, tensor_list, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, (tensor, tuple(tensor_list)), g) if async_op else None
    b = view(tensor, writable=False)
    outs = [view(t, what=f"tensor_list[{i}]") for i, t in enumerate(tensor_list)]
    _C.check_all_gather(b, outs, g.size)
    if _cuda(g, b, *outs):
        sig = (b.dtype, b.numel)
        return g.nccl.run("allgather", sig, b, (b, outs), async_op, lambda c: c.allgather(b, outs))
    return _finish(g, (b, outs), async_op, g.native.allgather, b, outs, async_op)


def all_gather_into_tensor(output_tensor, input_tensor, group=None, async_op: bool = False):
    """As all_gather into one `output_tensor` of `group size x input_tensor` elements, in rank
    order."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    # The core checks the sizes and splits the output by rank (and stages a CUDA one whole).
    if g.nccl is None:  # the latency path
        try:
            h = g.core.allgather_into(input_tensor, output_tensor, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, (input_tensor, output_tensor), g) if async_op else None
    b = view(input_tensor, writable=False)
    out = view(output_tensor, what="output_tensor")
    if _cuda(g, b, out):
        outs = out.rows([b.numel] * g.size, "output")  # checks the sizes
        if out.dtype != b.dtype:
            raise TypeError(f"all_gather_into_tensor: output is {out.dtype}, input is {b.dtype}")
        sig = (b.dtype, b.numel)
        return g.nccl.run("allgather", sig, b, (b, out), async_op, lambda c: c.allgather(b, outs))
    return _finish(g, (b, out), async_op, g.native.allgather_into, b, out, async_op)


def reduce_scatter(output, input_list: list, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduces `input_list[i]` across the group into rank i's `output`."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    code = op_code(op)
    if g.nccl is None:  # the latency path: the core views and checks the list
        try:
            h = g.core.reduce_scatter(output, input_list, code, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, (output, tuple(input_list)), g) if async_op else None
    out = view(output, what="output")
    ins = [view(t, writable=False, what=f"input_list[{i}]") for i, t in enumerate(input_list)]
    _C.check_reduce_scatter(out, ins, g.size)
    if _cuda(g, out, *ins):
        return _nccl_reduce_scatter(g, ins, out, (out, ins), code, async_op)
    return _finish(g, (out, ins), async_op, g.native.reduce_scatter, out, ins, code, async_op)


def _nccl_reduce_scatter(g, ins: list[BufferView], out: BufferView, keep, code, async_op: bool):
    sig = (out.dtype, out.numel, code.name)
    call = lambda c: c.reduce_scatter(ins, out, code)  # noqa: E731
    return g.nccl.run("reduce_scatter", sig, out, keep, async_op, call)


def reduce_scatter_tensor(output, input, op=ReduceOp.SUM, group=None, async_op: bool = False):
    """As reduce_scatter with `input` one tensor of `group size x output` elements, split in rank
    order."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    code = op_code(op)
    # The core checks the sizes and splits the input by rank (and stages a CUDA one whole).
    if g.nccl is None:  # the latency path
        try:
            h = g.core.reduce_scatter_from(input, output, code, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, (output, input), g) if async_op else None
    out = view(output, what="output")
    inp = view(input, writable=False, what="input")
    if _cuda(g, out, inp):
        ins = inp.rows([out.numel] * g.size, "input")  # checks the sizes
        if inp.dtype != out.dtype:
            raise TypeError(f"reduce_scatter_tensor: input is {inp.dtype}, output is {out.dtype}")
        return _nccl_reduce_scatter(g, ins, out, (out, inp), code, async_op)
    return _finish(g, (out, inp), async_op, g.native.reduce_scatter_from, inp, out, code, async_op)


def gather(
    tensor, gather_list: list | None = None, dst: int = 0, group=None, async_op: bool = False
):
    """Collects every rank's `tensor` into `gather_list` on rank `dst` (only `dst` passes one)."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    root = g.group_rank(dst, "dst")
    if g.nccl is None:  # the latency path: the core views and checks the list
        try:
            h = g.core.gather(tensor, gather_list, root, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, (tensor, tuple(gather_list or ())), g) if async_op else None
    b = view(tensor, writable=False)
    outs = [view(t, what=f"gather_list[{i}]") for i, t in enumerate(gather_list or ())]
    _C.check_gather(b, outs, gather_list is not None, g.rank == root, g.size)
    if _cuda(g, b, *outs):
        sig = (b.dtype, b.numel, root)
        call = lambda c: c.gather(b, outs, root)  # noqa: E731
        return g.nccl.run("gather", sig, b, (b, outs), async_op, call)
    return _finish(g, (b, outs), async_op, g.native.gather, b, outs, root, async_op)


def scatter(
    tensor, scatter_list: list | None = None, src: int = 0, group=None, async_op: bool = False
):
    """Sends `scatter_list[i]` from rank `src` (only `src` passes one) into rank i's `tensor`."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    root = g.group_rank(src, "src")
    if g.nccl is None:  # the latency path: the core views and checks the list
        try:
            h = g.core.scatter(tensor, scatter_list, root, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, (tensor, tuple(scatter_list or ())), g) if async_op else None
    out = view(tensor)
    ins = [
        view(t, writable=False, what=f"scatter_list[{i}]") for i, t in enumerate(scatter_list or ())
    ]
    _C.check_scatter(out, ins, scatter_list is not None, g.rank == root, g.size)
    if _cuda(g, out, *ins):
        sig = (out.dtype, out.numel, root)
        call = lambda c: c.scatter(ins, out, root)  # noqa: E731
        return g.nccl.run("scatter", sig, out, (out, ins), async_op, call)
    return _finish(g, (out, ins), async_op, g.native.scatter, out, ins, root, async_op)


def all_to_all(
    output_tensor_list: list, input_tensor_list: list, group=None, async_op: bool = False
):
    """Sends `input_tensor_list[i]` to rank i and receives rank i's into `output_tensor_list[i]`."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    if g.nccl is None:  # the latency path: the core views and checks the lists
        try:
            h = g.core.all_to_all(output_tensor_list, input_tensor_list, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        keep = (tuple(output_tensor_list), tuple(input_tensor_list))
        return CollectiveWork(h, keep, g) if async_op else None
    ins = [
        view(t, writable=False, what=f"input_tensor_list[{i}]")
        for i, t in enumerate(input_tensor_list)
    ]
    outs = [view(t, what=f"output_tensor_list[{i}]") for i, t in enumerate(output_tensor_list)]
    _C.check_all_to_all(outs, ins, g.size)
    if _cuda(g, *ins, *outs):
        return _nccl_all_to_all(g, ins, outs, (ins, outs), async_op)
    return _finish(g, (ins, outs), async_op, g.native.all_to_all, outs, ins, async_op)


def _nccl_all_to_all(g, ins: list[BufferView], outs: list[BufferView], keep, async_op: bool):
    sig = (ins[0].dtype,)  # split sizes may differ between ranks
    call = lambda c: c.all_to_all(ins, outs)  # noqa: E731
    return g.nccl.run("all_to_all", sig, ins[0], keep, async_op, call)


def _counts(buf: BufferView, sizes, n: int, what: str) -> list[int] | None:
    """Elements per rank of buf cut along its first dimension into pieces of `sizes` rows; None
    for `n` equal pieces (sizes None)."""
    rows = buf.shape[0] if buf.shape else 1
    if sizes is None:
        if rows % n:
            raise ValueError(
                f"{what}: first dimension {rows} is not divisible by the group size {n}"
            )
        return None
    sizes = list(sizes)
    if len(sizes) != n or sum(sizes) != rows or min(sizes) < 0:
        raise ValueError(f"{what} split sizes {sizes} must have {n} entries >= 0 summing to {rows}")
    row = buf.numel // rows if rows else 0
    return sizes if row == 1 else [s * row for s in sizes]


def all_to_all_single(
    output,
    input,
    output_split_sizes=None,
    input_split_sizes=None,
    group=None,
    async_op: bool = False,
):
    """all_to_all on single tensors split along their first dimension: evenly, or into
    `input_split_sizes` / `output_split_sizes` rows per rank."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    if g.nccl is None and output_split_sizes is None and input_split_sizes is None:
        # The latency path: the core splits both into equal blocks of rows (checking they do).
        try:
            h = g.core.all_to_all_single(input, output, None, None, async_op)
        except _FAILURES as e:
            raise g.explain(e) from None
        return CollectiveWork(h, (output, input), g) if async_op else None
    out = view(output, what="output")
    inp = view(input, writable=False, what="input")
    if out.dtype != inp.dtype:
        raise TypeError(f"all_to_all_single: output is {out.dtype}, input is {inp.dtype}")
    n = g.size
    sends = _counts(inp, input_split_sizes, n, "input")
    recvs = _counts(out, output_split_sizes, n, "output")
    if _cuda(g, inp, out):
        ins = inp.rows(sends or [inp.numel // n] * n, "input")
        outs = out.rows(recvs or [out.numel // n] * n, "output")
        return _nccl_all_to_all(g, ins, outs, (out, inp), async_op)
    # The core splits both by rank (equally where the counts are None).
    call = g.native.all_to_all_single
    return _finish(g, (out, inp), async_op, call, inp, out, sends, recvs, async_op)


def barrier(group=None, async_op: bool = False):
    """Returns once every rank of the group has called it."""
    g = _world["group"] if group is None else resolve(group)
    if g is None:
        return _not_a_member(group, async_op)
    try:
        h = g.core.barrier(async_op)
    except _FAILURES as e:
        raise g.explain(e) from None
    return CollectiveWork(h, None, g) if async_op else None


def isend(tensor, dst: int, group=None, tag: int = 0) -> Work:
    """Starts sending `tensor` to rank `dst`, matched by `tag` on the receiver; returns its Work."""
    g = resolve(group)
    if g is None:
        raise ValueError("isend: this rank is not in the group")
    b = view(tensor, writable=False)
    peer = g.group_rank(dst, "dst")
    if _cuda(g, b):
        # On the pair's communicator of two ranks, the peer is the other one: 1 - its rank.
        call = lambda c: c.send(b, 1 - c.rank)  # noqa: E731
        return g.nccl.run("send", None, b, b, True, call, peer=peer)
    return _finish(g, b, True, g.native.send, b, peer, tag, True)


def irecv(tensor, src: int | None = None, group=None, tag: int = 0) -> Work:
    """Receives into `tensor` from `src`, or with src=None from whichever rank sends first;
    the returned Work's source_rank() names the sender."""
    g = resolve(group)
    if g is None:
        raise ValueError("irecv: this rank is not in the group")
    b = view(tensor)
    if _cuda(g, b):
        if src is None:
            raise ValueError(
                "irecv: NCCL cannot receive from any source; pass src for a CUDA tensor"
            )
        peer = g.group_rank(src, "src")
        call = lambda c: c.recv(b, 1 - c.rank)  # noqa: E731 - the pair's other rank
        return g.nccl.run("recv", None, b, b, True, call, source=src, peer=peer)
    if src is None:
        return _finish(g, b, True, g.native.recv_any, b, tag, True)
    return _finish(g, b, True, g.native.recv, b, g.group_rank(src, "src"), tag, True)


def send(tensor, dst: int, group=None, tag: int = 0) -> None:
    """Sends `tensor` to rank `dst` and waits for the send to complete (isend(...).wait())."""
    isend(tensor, dst, group, tag).wait()


def recv(tensor, src: int | None = None, group=None, tag: int = 0) -> int:
    """Blocks until `tensor` holds a message from `src` (None: any rank); returns the sender."""
    work = irecv(tensor, src, group, tag)
    work.wait()
    return work.source_rank()


def get_rank(group=None) -> int:
    """This process's rank in `group` (default: the world); -1 when it is not a member."""
    g = resolve(group)
    return -1 if g is None else g.rank


def get_world_size(group=None) -> int:
    """The number of ranks in `group` (default: the world); -1 when this rank is not a member."""
    g = resolve(group)
    return -1 if g is None else g.size


def get_backend(group=None) -> str:
    """The group's transport, as "pscore/tcp" or "pscore/shm"."""
    return "pscore/" + (resolve(group) or default_group()).transport
