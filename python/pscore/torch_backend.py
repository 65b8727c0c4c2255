"""pscore as a torch.distributed backend: `import pscore.torch_backend` (or `import pscore` after
torch) registers "pscore", and unmodified code - DDP included - runs on pscore's transports:

    dist.init_process_group("pscore", ...)
    model = torch.nn.parallel.DistributedDataParallel(model)

Every operation runs asynchronously: it returns at once, `wait()` waits on pscore directly, and
a completer thread resolves the Work's future when pscore finishes, so DDP's backward keeps
computing while gradient buckets are reduced.
"""

from __future__ import annotations

import datetime
import queue
import threading
import time

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup as _TorchProcessGroup
from torch._C._distributed_c10d import Work as _TorchWork

from . import collectives as c
from . import torch_barrier
from .group import build_group
from .store_base import Store
from .torch_sparse import all_reduce_sparse
from .torch_tensors import Staging, check_list_length, check_same_shape, chunks_of, op_name

BACKEND_NAME = "pscore"


def _seconds(timeout) -> float | None:
    if timeout is None:
        return None
    seconds = timeout.total_seconds() if isinstance(timeout, datetime.timedelta) else timeout
    return None if seconds <= 0 else seconds  # torch's "no timeout" is zero


class _AsyncWork(_TorchWork):
    """An operation still running in pscore; its future resolves on the completer thread, and
    wait() waits on pscore's works directly (no hand-off through that thread). `finish` (the
    write-back of staged outputs) runs once, on whichever thread sees the works done first."""

    def __init__(self, works, finish=None):
        super().__init__()
        self._works = works
        self._finish = finish
        self._finish_lock = threading.Lock()
        self._future = torch.futures.Future()

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self._works.wait(_seconds(timeout))  # raises the operation's error
        self._finished()
        return True

    def _finished(self) -> None:
        with self._finish_lock:
            finish, self._finish = self._finish, None
            if finish is not None:
                finish()

    def is_completed(self) -> bool:
        return self._works.is_completed()

    def source_rank(self) -> int:
        """The sender of a receive (known once it is done), -1 for other operations."""
        return self._works.source_rank()

    _source_rank = source_rank  # what torch.distributed.recv(src=None) asks

    def is_success(self) -> bool:
        return self.is_completed() and self.exception() is None

    def exception(self):
        """The operation's failure, or None (also while it runs)."""
        if not self.is_completed():
            return None
        try:
            self._works.wait(None)
        except Exception as e:  # noqa: BLE001 - returned, not raised
            return e
        return None

    def get_future(self):
        return self._future


class _AllOf:
    """Waits for several pscore works, first error wins; a timeout bounds them all together."""

    def __init__(self, works):
        self._works = works

    def wait(self, timeout_s: float | None = None) -> None:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for w in self._works:
            w.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self._works)

    def source_rank(self) -> int:
        return self._works[0].source_rank() if self._works else -1


class _Completer:
    """One thread per group that waits for pscore's works in submission order (the order they
    complete in) and resolves their torch futures."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, name="pscore-torch-completer", daemon=True
        )
        self._thread.start()

    def track(self, work, result, finish=None) -> _AsyncWork:
        torch_work = _AsyncWork(work, finish)
        self._queue.put((work, result, torch_work))
        return torch_work

    def _run(self) -> None:
        while True:
            work, result, torch_work = self._queue.get()
            try:
                work.wait()
                torch_work._finished()
            except Exception as e:  # noqa: BLE001 - handed to whoever waits on the future
                torch_work.get_future().set_exception(e)
            else:
                torch_work.get_future().set_result(result)


class TorchStore(Store):
    """A pscore Store over a torch.distributed Store (TCPStore, FileStore, PrefixStore...).
    torch's own errors (e.g. its timeouts, which subclass RuntimeError) pass through."""

    def __init__(self, store):
        self._store = store

    def _set(self, key: str, value: bytes) -> None:
        self._store.set(key, value)

    def _get(self, key: str) -> bytes:
        return self._store.get(key)

    def _add(self, key: str, amount: int) -> int:
        return self._store.add(key, amount)

    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        return self._store.compare_set(key, expected, desired)

    def _wait(self, keys: list[str], timeout_s: float) -> None:
        self._store.wait(keys, datetime.timedelta(seconds=timeout_s))

    def _check(self, keys: list[str]) -> bool:
        return self._store.check(keys)

    def _delete_key(self, key: str) -> bool:
        return self._store.delete_key(key)

    def _num_keys(self) -> int:
        return self._store.num_keys()

    def _get_timeout(self) -> float:
        return self._store.timeout.total_seconds()

    def _set_timeout(self, seconds: float) -> None:
        self._store.set_timeout(datetime.timedelta(seconds=seconds))


class PscoreProcessGroup(_TorchProcessGroup):
    """A torch ProcessGroup whose collectives run on a pscore group."""

    def __init__(self, store, rank: int, world_size: int, timeout: datetime.timedelta):
        super().__init__(rank, world_size)
        self._completer = _Completer()
        self._group = build_group(
            TorchStore(store),
            rank,
            world_size,
            timeout.total_seconds(),
            "torch",
            list(range(world_size)),
        )

    # Set by torch after __init__; a Python group has no backend object to hold them.
    _name = ""
    _desc = ""
    _monitored_barriers = 0

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def getGroupName(self) -> str:
        return self._name

    def setGroupName(self, name: str) -> None:
        self._name = name

    def getGroupDesc(self) -> str:
        return self._desc

    def setGroupDesc(self, desc: str) -> None:
        self._desc = desc

    def _start_coalescing(self, device) -> None:
        raise RuntimeError(
            "pscore backend: no device-level coalescing (nor on gloo); "
            "_coalescing_manager() without a device coalesces all_reduce, "
            "all_gather_into_tensor and reduce_scatter_tensor"
        )

    _end_coalescing = _start_coalescing

    def _run(self, name: str, start, result=(), staging: Staging | None = None) -> _AsyncWork:
        """Starts operation `name`: start() issues pscore's calls and returns their works. The
        returned Work's future resolves to `result` once staged outputs are written back;
        a profiler sees the operation as "pscore:<name>" from here until it completes."""
        profiled = torch.autograd._profiler_enabled()
        if profiled:
            span = torch.autograd.profiler.record_function(f"{BACKEND_NAME}:{name}")
            span.__enter__()
        finish = staging.finish if staging is not None else None
        work = self._completer.track(_AllOf(start()), list(result), finish)
        if profiled:
            span._call_end_callbacks_on_future(work.get_future())
            span.__exit__(None, None, None)
        return work

    def _reduce_ops(self, opts, tensors) -> list[str]:
        """pscore's op for each tensor (bool tensors reduce by other names)."""
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if op == dist.ReduceOp.PREMUL_SUM:
            raise ValueError("pscore backend: ReduceOp.PREMUL_SUM is not supported (nor by gloo)")
        return [op_name(op, t.dtype) for t in tensors]

    def allreduce(self, tensors, opts=None):
        if any(t.is_sparse for t in tensors):
            return self._sparse_allreduce(tensors, opts)
        ops, g, st = self._reduce_ops(opts, tensors), self._group, Staging()
        bufs = [st.output(t) for t in tensors]
        return self._run(
            "all_reduce",
            lambda: [c.all_reduce(t, op=op, group=g, async_op=True) for t, op in zip(bufs, ops)],
            tensors,
            st,
        )

    def _sparse_allreduce(self, tensors, opts):
        op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
        if op != dist.ReduceOp.SUM:
            raise ValueError("pscore backend: sparse all_reduce supports ReduceOp.SUM only")

        def start():
            for t in tensors:
                all_reduce_sparse(t, self._group)
            return []

        return self._run("all_reduce_sparse", start, tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        root, g, st = opts.rootRank, self._group, Staging()
        bufs = [st.output(t) for t in tensors]
        return self._run(
            "broadcast",
            lambda: [c.broadcast(t, src=root, group=g, async_op=True) for t in bufs],
            tensors,
            st,
        )

    def reduce(self, tensors, opts):
        root, ops, g, st = opts.rootRank, self._reduce_ops(opts, tensors), self._group, Staging()
        bufs = [st.output(t) for t in tensors]
        return self._run(
            "reduce",
            lambda: [
                c.reduce(t, dst=root, op=op, group=g, async_op=True) for t, op in zip(bufs, ops)
            ],
            tensors,
            st,
        )

    def allgather(self, output_lists, inputs, opts=None):
        g, st = self._group, Staging()
        for outs, t in zip(output_lists, inputs):
            check_list_length(outs, g.size, "all_gather's output list")
            check_same_shape(outs, t, "all_gather's output list")
        pairs = [
            ([st.output(o) for o in outs], st.input(t)) for outs, t in zip(output_lists, inputs)
        ]
        return self._run(
            "all_gather",
            lambda: [c.all_gather(outs, t, group=g, async_op=True) for outs, t in pairs],
            [o for outs in output_lists for o in outs],
            st,
        )

    def allgather_coalesced(self, output_lists, inputs, opts=None):
        """output_lists[r][i] receives rank r's inputs[i]."""
        check_list_length(output_lists, self._group.size, "all_gather_coalesced's output lists")
        for outs in output_lists:
            check_list_length(outs, len(inputs), "all_gather_coalesced's output list")
        per_input = [[outs[i] for outs in output_lists] for i in range(len(inputs))]
        work = self.allgather(per_input, inputs, opts)
        return work

    def all_gather_single(self, output, input, opts=None):
        return self.all_gather_single_coalesced([output], [input], opts)

    _allgather_base = all_gather_single  # the name torch used before 2.13

    def all_gather_single_coalesced(self, outputs, inputs, opts=None):
        """Each output holds every rank's matching input, stacked along the first dimension."""
        g, st = self._group, Staging()
        chunks = [
            chunks_of(o, g.size, t, "all_gather_into_tensor's output")
            for o, t in zip(outputs, inputs)
        ]
        pairs = [(st.output(o), st.input(t)) for o, t in zip(outputs, inputs)]
        return self._run(
            "all_gather_into_tensor",
            lambda: [c.all_gather_into_tensor(o, t, group=g, async_op=True) for o, t in pairs],
            [piece for pieces in chunks for piece in pieces],
            st,
        )

    allgather_into_tensor_coalesced = all_gather_single_coalesced  # the name before 2.13

    def reduce_scatter(self, outputs, input_lists, opts):
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
            lambda: [
                c.reduce_scatter(o, ins, op=op, group=g, async_op=True) for o, ins, op in calls
            ],
            outputs,
            st,
        )

    def reduce_scatter_single(self, output, input, opts):
        return self.reduce_scatter_single_coalesced([output], [input], opts)

    _reduce_scatter_base = reduce_scatter_single  # the name torch used before 2.13

    def reduce_scatter_single_coalesced(self, outputs, inputs, opts):
        """Each output gets the reduction of its slice (first dimension) of every rank's input."""
        ops, g, st = self._reduce_ops(opts, outputs), self._group, Staging()
        for o, t in zip(outputs, inputs):
            chunks_of(t, g.size, o, "reduce_scatter_tensor's input")
        calls = [(st.output(o), st.input(t), op) for o, t, op in zip(outputs, inputs, ops)]
        return self._run(
            "reduce_scatter_tensor",
            lambda: [
                c.reduce_scatter_tensor(o, t, op=op, group=g, async_op=True) for o, t, op in calls
            ],
            outputs,
            st,
        )

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced  # the name before 2.13

    def gather(self, output_lists, inputs, opts):
        """output_lists is [[one tensor per rank]] on the destination and [] elsewhere."""
        root, g, st = opts.rootRank, self._group, Staging()
        check_list_length(inputs, 1, "gather's input")
        outs = None
        if g.rank == root:
            check_list_length(output_lists, 1, "gather's output lists")
            check_list_length(output_lists[0], g.size, "gather's output list")
            check_same_shape(output_lists[0], inputs[0], "gather's output list")
            outs = [st.output(o) for o in output_lists[0]]
        elif output_lists:
            raise ValueError("pscore backend: gather's output list is for the destination only")
        t = st.input(inputs[0])
        return self._run(
            "gather",
            lambda: [c.gather(t, outs, dst=root, group=g, async_op=True)],
            output_lists[0] if outs is not None else [],
            st,
        )

    def scatter(self, outputs, input_lists, opts):
        """input_lists is [[one tensor per rank]] on the source and [] elsewhere."""
        root, g, st = opts.rootRank, self._group, Staging()
        check_list_length(outputs, 1, "scatter's output")
        ins = None
        if g.rank == root:
            check_list_length(input_lists, 1, "scatter's input lists")
            check_list_length(input_lists[0], g.size, "scatter's input list")
            check_same_shape(input_lists[0], outputs[0], "scatter's input list")
            ins = [st.input(i) for i in input_lists[0]]
        elif input_lists:
            raise ValueError("pscore backend: scatter's input list is for the source only")
        out = st.output(outputs[0])
        return self._run(
            "scatter",
            lambda: [c.scatter(out, ins, src=root, group=g, async_op=True)],
            outputs,
            st,
        )

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        g, st = self._group, Staging()
        out, inp = st.output(output), st.input(input)
        if output.dtype != input.dtype:
            raise TypeError(
                f"pscore backend: all_to_all_single's output is {output.dtype}, input {input.dtype}"
            )
        return self._run(
            "all_to_all_single",
            lambda: [
                c.all_to_all_single(
                    out,
                    inp,
                    list(output_split_sizes) or None,
                    list(input_split_sizes) or None,
                    group=g,
                    async_op=True,
                )
            ],
            [output],
            st,
        )

    alltoall_base = all_to_all_single  # the name torch used before 2.13

    def alltoall(self, outputs, inputs, opts=None):
        g, st = self._group, Staging()
        check_list_length(outputs, g.size, "all_to_all's output list")
        check_list_length(inputs, g.size, "all_to_all's input list")
        outs, ins = [st.output(o) for o in outputs], [st.input(i) for i in inputs]
        return self._run(
            "all_to_all", lambda: [c.all_to_all(outs, ins, group=g, async_op=True)], outputs, st
        )

    def barrier(self, opts=None):
        return self._run("barrier", lambda: [c.barrier(group=self._group, async_op=True)])

    def monitored_barrier(self, timeout=None, wait_all_ranks: bool = False) -> None:
        """A barrier where rank 0 names the ranks that did not arrive within `timeout`."""
        self._monitored_barriers += 1
        with torch.autograd.profiler.record_function(f"{BACKEND_NAME}:monitored_barrier"):
            torch_barrier.monitored_barrier(
                self._group,
                self._monitored_barriers,
                _seconds(timeout) or self._group.timeout_s,
                wait_all_ranks,
            )

    def send(self, tensors, dst: int, tag: int):
        g, st = self._group, Staging()
        bufs = [st.input(t) for t in tensors]
        return self._run(
            "send", lambda: [c.isend(t, dst, group=g, tag=tag) for t in bufs], tensors, st
        )

    def recv(self, tensors, src: int | None, tag: int):
        g, st = self._group, Staging()
        bufs = [st.output(t) for t in tensors]
        return self._run(
            "recv", lambda: [c.irecv(t, src, group=g, tag=tag) for t in bufs], tensors, st
        )

    def recv_anysource(self, tensors, tag: int):
        return self.recv(tensors, None, tag)


def _create(store, rank: int, world_size: int, timeout: datetime.timedelta):
    return PscoreProcessGroup(store, rank, world_size, timeout)


def register() -> None:
    """Registers the "pscore" backend with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu"])
    torch_barrier.install(PscoreProcessGroup)


register()
