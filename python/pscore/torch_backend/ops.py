"""The operations of pscore's torch ProcessGroup (torch_backend.PscoreProcessGroup): each
checks its arguments as gloo does, stages the tensors (torch_backend.tensors), and starts pscore's
collectives through the group's `_run`, which tracks them to completion."""

from __future__ import annotations

import torch
import torch.distributed as dist

from ..collectives import functions as c
from .barrier import monitored_barrier
from .sparse import all_reduce_sparse
from .tensors import (
    PLAIN_OP_CODES,
    Staging,
    carried,
    carried_list,
    check_list_length,
    check_same_shape,
    check_stacked,
    op_key,
    op_name,
    plain_op_code,
)

__all__ = ["TorchOperations"]


def _blocking_one(tensors, opts):
    """The tensor of a blocking call (torch waits at once) on one contiguous dense tensor while
    no profiler runs: the latency path, which calls pscore directly on the caller's thread (no
    staging, closures or Work) and returns None, torch's "done already". None otherwise."""
    if getattr(opts, "asyncOp", True) or len(tensors) != 1 or _profiling():
        return None
    t = tensors[0]
    return t if t.is_contiguous() else None  # False for a sparse (COO) tensor


_profiling = torch.autograd._profiler_enabled


def _blocking_pair(output, input, opts) -> bool:
    """As _blocking_one for a call on one output and one input tensor: True when pscore can
    take both as they are, on the caller's thread."""
    if getattr(opts, "asyncOp", True) or _profiling():
        return False
    return output.is_contiguous() and input.is_contiguous()  # False for sparse (COO) ones


def _blocking_like(lists, like, n: int, opts) -> bool:
    """As _blocking_pair for a call on one tensor `like` and one list of tensors (lists is
    [that list], or [] on a rank that passes none, where n is 0): True when the list holds n
    contiguous tensors of like's dtype and shape. Anything else takes the staged path, which
    checks the arguments and raises."""
    if getattr(opts, "asyncOp", True) or _profiling() or not like.is_contiguous():
        return False
    if not n:
        return not lists
    if len(lists) != 1 or len(lists[0]) != n:
        return False
    dtype, shape = like.dtype, like.shape
    for t in lists[0]:
        if t.dtype != dtype or t.shape != shape or not t.is_contiguous():
            return False
    return True


def _blocking_lists(outputs, inputs, opts) -> bool:
    """As _blocking_pair for a call on a list of outputs and a list of inputs."""
    if getattr(opts, "asyncOp", True) or _profiling():
        return False
    return all(t.is_contiguous() for t in outputs) and all(t.is_contiguous() for t in inputs)


class TorchOperations:
    """torch.distributed's ProcessGroup operations on `self._group` (a pscore group)."""

    _monitored_barriers = 0

    def _start_coalescing(self, device) -> None:
        raise RuntimeError(
            "pscore backend: no device-level coalescing (nor on gloo); "
            "_coalescing_manager() without a device coalesces all_reduce, "
            "all_gather_into_tensor and reduce_scatter_tensor"
        )

    _end_coalescing = _start_coalescing

    def _reduce_ops(self, opts, tensors) -> list[str]:
        """pscore's op for each tensor (bool tensors reduce by other names)."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        return [op_name(op, t.dtype) for t in tensors]

    def allreduce(self, tensors, opts=None):
        # The latency path, as _blocking_one's with the op's core code in one lookup (a miss
        # fills it, or says the dtype needs carried()); the group has no NCCL for CPU tensors.
        t = _blocking_one(tensors, opts)
        if t is not None:
            op = opts.reduceOp
            code = PLAIN_OP_CODES.get((op_key(op), t.dtype)) or plain_op_code(op, t.dtype)
            g = self._group
            if code is not None and g.nccl is None:
                c.all_reduce_blocking(g, t, code)
            else:
                c.all_reduce(carried(t), op=op_name(op, t.dtype), group=g)
            return None
        if any(t.is_sparse for t in tensors):
            return self._sparse_allreduce(tensors, opts)
        ops, g, st = self._reduce_ops(opts, tensors), self._group, Staging()
        bufs = [st.output(t) for t in tensors]
        return self._run(
            "all_reduce",
            lambda async_op: [
                c.all_reduce(t, op=op, group=g, async_op=async_op) for t, op in zip(bufs, ops)
            ],
            tensors,
            st,
            opts,
        )

    def _sparse_allreduce(self, tensors, opts):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if op != dist.ReduceOp.SUM:
            raise ValueError("pscore backend: sparse all_reduce supports ReduceOp.SUM only")

        def start(_async_op):  # complete when they return
            for t in tensors:
                all_reduce_sparse(t, self._group)
            return []

        return self._run("all_reduce_sparse", start, tensors, opts=opts)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        t = _blocking_one(tensors, opts)
        if t is not None:
            c.broadcast(carried(t), src=opts.rootRank, group=self._group)
            return None
        root, g, st = opts.rootRank, self._group, Staging()
        bufs = [st.output(t) for t in tensors]
        return self._run(
            "broadcast",
            lambda async_op: [c.broadcast(t, src=root, group=g, async_op=async_op) for t in bufs],
            tensors,
            st,
            opts,
        )

    def reduce(self, tensors, opts):
        t = _blocking_one(tensors, opts)
        if t is not None:
            op = op_name(opts.reduceOp, t.dtype)
            c.reduce(carried(t), dst=opts.rootRank, op=op, group=self._group)
            return None
        root, ops, g, st = opts.rootRank, self._reduce_ops(opts, tensors), self._group, Staging()
        bufs = [st.output(t) for t in tensors]
        return self._run(
            "reduce",
            lambda async_op: [
                c.reduce(t, dst=root, op=op, group=g, async_op=async_op) for t, op in zip(bufs, ops)
            ],
            tensors,
            st,
            opts,
        )

    def allgather(self, output_lists, inputs, opts=None):
        g = self._group
        if len(inputs) == 1 and _blocking_like(output_lists, inputs[0], g.size, opts):
            t = inputs[0]
            c.all_gather(carried_list(output_lists[0], t.dtype), carried(t), group=g)
            return None
        st = Staging()
        for outs, t in zip(output_lists, inputs):
            check_list_length(outs, g.size, "all_gather's output list")
            check_same_shape(outs, t, "all_gather's output list")
        pairs = [
            ([st.output(o) for o in outs], st.input(t)) for outs, t in zip(output_lists, inputs)
        ]
        return self._run(
            "all_gather",
            lambda async_op: [
                c.all_gather(outs, t, group=g, async_op=async_op) for outs, t in pairs
            ],
            [o for outs in output_lists for o in outs],
            st,
            opts,
        )

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """output_lists[r][i] receives rank r's inputs[i]."""
        check_list_length(output_lists, self._group.size, "all_gather_coalesced's output lists")
        for outs in output_lists:
            check_list_length(outs, len(inputs), "all_gather_coalesced's output list")
        per_input = [[outs[i] for outs in output_lists] for i in range(len(inputs))]
        return self.allgather(per_input, inputs, opts)

    def all_gather_single(self, output, input, opts=None):
        if _blocking_pair(output, input, opts):
            check_stacked(output, self._group.size, input, "all_gather_into_tensor's output")
            c.all_gather_into_tensor(carried(output), carried(input), group=self._group)
            return None
        return self.all_gather_single_coalesced([output], [input], opts)

    _allgather_base = all_gather_single  # the name torch used before 2.13

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """Each output holds every rank's matching input, stacked along the first dimension."""
        g, st = self._group, Staging()
        for o, t in zip(outputs, inputs):
            check_stacked(o, g.size, t, "all_gather_into_tensor's output")
        pairs = [(st.output(o), st.input(t)) for o, t in zip(outputs, inputs)]
        return self._run(
            "all_gather_into_tensor",
            lambda async_op: [
                c.all_gather_into_tensor(o, t, group=g, async_op=async_op) for o, t in pairs
            ],
            (piece for o in outputs for piece in o.chunk(g.size)),  # cut for a Work only
            st,
            opts,
        )

    allgather_into_tensor_coalesced = all_gather_single_coalesced  # the name before 2.13

    def reduce_scatter(self, outputs, input_lists, opts):
        g = self._group
        if len(outputs) == 1 and _blocking_like(input_lists, outputs[0], g.size, opts):
            out = outputs[0]
            ins = carried_list(input_lists[0], out.dtype)
            c.reduce_scatter(carried(out), ins, op=op_name(opts.reduceOp, out.dtype), group=g)
            return None
        ops, g, st = self._reduce_ops(opts, outputs), self._group, Staging()
        for o, ins in zip(outputs, input_lists):
            check_list_length(ins, g.size, "reduce_scatter's input list")
            check_same_shape(ins, o, "reduce_scatter's input list")
        calls = [
            (st.output(o), [st.input(i) for i in ins], op)
            for o, ins, op in zip(outputs, input_lists, ops)
        ]
        return self._run(
            "reduce_scatter",
            lambda async_op: [
                c.reduce_scatter(o, ins, op=op, group=g, async_op=async_op) for o, ins, op in calls
            ],
            outputs,
            st,
            opts,
        )

    def reduce_scatter_single(self, output, input, opts):
        if _blocking_pair(output, input, opts):
            check_stacked(input, self._group.size, output, "reduce_scatter_tensor's input")
            op = op_name(opts.reduceOp, output.dtype)
            c.reduce_scatter_tensor(carried(output), carried(input), op=op, group=self._group)
            return None
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    _reduce_scatter_base = reduce_scatter_single  # the name torch used before 2.13

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        """Each output gets the reduction of its slice (first dimension) of every rank's input."""
        ops, g, st = self._reduce_ops(opts, outputs), self._group, Staging()
        for o, t in zip(outputs, inputs):
            check_stacked(t, g.size, o, "reduce_scatter_tensor's input")
        calls = [(st.output(o), st.input(t), op) for o, t, op in zip(outputs, inputs, ops)]
        return self._run(
            "reduce_scatter_tensor",
            lambda async_op: [
                c.reduce_scatter_tensor(o, t, op=op, group=g, async_op=async_op)
                for o, t, op in calls
            ],
            outputs,
            st,
            opts,
        )

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced  # the name before 2.13

    def _root_list(self, lists, root, like, what, role, stage):
        """A rooted call's per-rank list: checked and staged on the root (torch passes
        [[one tensor per rank]] there), None elsewhere (where torch passes [])."""
        g = self._group
        if g.rank != root:
            if lists:
                raise ValueError(f"pscore backend: {what} list is for the {role} only")
            return None
        check_list_length(lists, 1, f"{what} lists")
        check_list_length(lists[0], g.size, f"{what} list")
        check_same_shape(lists[0], like, f"{what} list")
        return [stage(t) for t in lists[0]]

    def gather(self, output_lists, inputs, opts):
        """output_lists is [[one tensor per rank]] on the destination and [] elsewhere."""
        root, g = opts.rootRank, self._group
        check_list_length(inputs, 1, "gather's input")
        t = inputs[0]
        if _blocking_like(output_lists, t, g.size if g.rank == root else 0, opts):
            outs = carried_list(output_lists[0], t.dtype) if output_lists else None
            c.gather(carried(t), outs, dst=root, group=g)
            return None
        st = Staging()
        outs = self._root_list(
            output_lists, root, inputs[0], "gather's output", "destination", st.output
        )
        t = st.input(inputs[0])
        return self._run(
            "gather",
            lambda async_op: [c.gather(t, outs, dst=root, group=g, async_op=async_op)],
            output_lists[0] if outs is not None else [],
            st,
            opts,
        )

    def scatter(self, outputs, input_lists, opts):
        """input_lists is [[one tensor per rank]] on the source and [] elsewhere."""
        root, g = opts.rootRank, self._group
        check_list_length(outputs, 1, "scatter's output")
        out = outputs[0]
        if _blocking_like(input_lists, out, g.size if g.rank == root else 0, opts):
            ins = carried_list(input_lists[0], out.dtype) if input_lists else None
            c.scatter(carried(out), ins, src=root, group=g)
            return None
        st = Staging()
        ins = self._root_list(input_lists, root, outputs[0], "scatter's input", "source", st.input)
        out = st.output(outputs[0])
        return self._run(
            "scatter",
            lambda async_op: [c.scatter(out, ins, src=root, group=g, async_op=async_op)],
            outputs,
            st,
            opts,
        )

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        g = self._group
        if output.dtype != input.dtype:
            raise TypeError(
                f"pscore backend: all_to_all_single's output is {output.dtype}, input {input.dtype}"
            )
        recvs, sends = list(output_split_sizes) or None, list(input_split_sizes) or None
        if _blocking_pair(output, input, opts):
            c.all_to_all_single(carried(output), carried(input), recvs, sends, group=g)
            return None
        st = Staging()
        out, inp = st.output(output), st.input(input)
        return self._run(
            "all_to_all_single",
            lambda async_op: [
                c.all_to_all_single(out, inp, recvs, sends, group=g, async_op=async_op)
            ],
            [output],
            st,
            opts,
        )

    alltoall_base = all_to_all_single  # the name torch used before 2.13

    def alltoall(self, outputs, inputs, opts=None):
        g = self._group
        check_list_length(outputs, g.size, "all_to_all's output list")
        check_list_length(inputs, g.size, "all_to_all's input list")
        if _blocking_lists(outputs, inputs, opts):
            c.all_to_all([carried(o) for o in outputs], [carried(i) for i in inputs], group=g)
            return None
        st = Staging()
        outs, ins = [st.output(o) for o in outputs], [st.input(i) for i in inputs]
        return self._run(
            "all_to_all",
            lambda async_op: [c.all_to_all(outs, ins, group=g, async_op=async_op)],
            outputs,
            st,
            opts,
        )

    def barrier(self, opts=None):
        if not getattr(opts, "asyncOp", True) and not _profiling():  # the latency path
            c.barrier(group=self._group)
            return None
        return self._run(
            "barrier",
            lambda async_op: [c.barrier(group=self._group, async_op=async_op)],
            opts=opts,
        )

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False) -> None:
        """A barrier where rank 0 names the ranks that did not arrive within `timeout`."""
        self._monitored_barriers += 1
        seconds = timeout.total_seconds() if timeout is not None else 0
        with torch.autograd.profiler.record_function(f"{self.getBackendName()}:monitored_barrier"):
            monitored_barrier(
                self._group,
                self._monitored_barriers,
                seconds if seconds > 0 else self._group.timeout_s,
                wait_all_ranks,
            )

    def send(self, tensors, dst: int, tag: int):
        g, st = self._group, Staging()
        bufs = [st.input(t) for t in tensors]
        return self._run(
            "send", lambda _async_op: [c.isend(t, dst, group=g, tag=tag) for t in bufs], tensors, st
        )

    def recv(self, tensors, src: int | None, tag: int):
        g, st = self._group, Staging()
        bufs = [st.output(t) for t in tensors]
        return self._run(
            "recv", lambda _async_op: [c.irecv(t, src, group=g, tag=tag) for t in bufs], tensors, st
        )

    def recv_anysource(self, tensors, tag: int):
        return self.recv(tensors, None, tag)
