"""pscore as a torch.distributed backend: `import pscore.torch_backend` (or `import pscore` after
torch) registers "pscore", and unmodified code - DDP included - runs on pscore's transports:

    dist.init_process_group("pscore", ...)
    model = torch.nn.parallel.DistributedDataParallel(model)

Every operation runs asynchronously: it returns at once, `wait()` waits on pscore directly, and
a completer thread resolves the Work's future when pscore finishes, so DDP's backward keeps
computing while gradient buckets are reduced.
"""

from __future__ import annotations

import atexit
import datetime
import queue
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup as _TorchProcessGroup
from torch._C._distributed_c10d import Work as _TorchWork

from . import collectives as c
from .group import build_group
from .torch_store import TorchStore

BACKEND_NAME = "pscore"
STOP_WAIT_S = 5.0  # at exit, how long the completer may take to finish resolving a future

_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.PRODUCT: "prod",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.AVG: "avg",
}


def _op_name(op) -> str:
    for torch_op, name in _OPS.items():
        if op == torch_op:
            return name
    raise ValueError(f"pscore backend: reduce op {op} is not supported")


class _AsyncWork(_TorchWork):
    """An operation still running in pscore; its future resolves on the completer thread, and
    wait() waits on pscore's works directly (no hand-off through that thread)."""

    def __init__(self, works):
        super().__init__()
        self._works = works
        self._future = torch.futures.Future()

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self._works.wait()  # raises the operation's error
        return True

    def is_completed(self) -> bool:
        return self._works.is_completed()

    def source_rank(self) -> int:
        """The sender of a receive (known once it is done), -1 for other operations."""
        return self._works.source_rank()

    _source_rank = source_rank  # what torch.distributed.recv(src=None) asks

    def is_success(self) -> bool:
        if not self.is_completed():
            return False
        try:
            self._works.wait()
        except Exception:  # noqa: BLE001 - a failed operation is simply not a success
            return False
        return True

    def get_future(self):
        return self._future


class _AllOf:
    """Waits for several pscore works, first error wins."""

    def __init__(self, works):
        self._works = works

    def wait(self) -> None:
        for w in self._works:
            w.wait()

    def is_completed(self) -> bool:
        return all(w.is_completed() for w in self._works)

    def source_rank(self) -> int:
        return self._works[0].source_rank() if self._works else -1


class _Completer:
    """One thread per group that waits for pscore's works in submission order (the order they
    complete in) and resolves their torch futures.

    At interpreter exit it stops touching torch before the interpreter finalizes: resolving a
    future or freeing a torch Work releases the GIL, and a thread that takes it back from a
    finalizing interpreter is ended through a noexcept frame, which aborts the process
    ("terminate called without an active exception"). So torch objects are resolved and dropped
    only under `_resolving`, which exit takes; after that the thread keeps what it still gets,
    unresolved. Waiting on pscore is safe at exit (csrc/bindings/gil.h)."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._resolving = threading.Lock()
        self._stopped = False
        self._kept: list = []  # what arrived after stop: never freed on this thread
        self._thread = threading.Thread(
            target=self._run, name="pscore-torch-completer", daemon=True
        )
        self._thread.start()
        atexit.register(self.stop)

    def track(self, work, result) -> _AsyncWork:
        torch_work = _AsyncWork(work)
        self._queue.put((work, result, torch_work))
        return torch_work

    def stop(self) -> None:
        """The thread touches no torch object after this returns (it waits for one being
        resolved, at most STOP_WAIT_S)."""
        got = self._resolving.acquire(timeout=STOP_WAIT_S)
        self._stopped = True
        if got:
            self._resolving.release()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            error = None
            try:
                item[0].wait()
            except Exception as e:  # noqa: BLE001 - handed to whoever waits on the future
                error = e
            with self._resolving:
                if self._stopped:
                    self._kept.append((item, error))
                elif error is None:
                    item[2].get_future().set_result(item[1])
                else:
                    item[2].get_future().set_exception(error)
                del item, error


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

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def _track(self, works, result) -> _AsyncWork:
        return self._completer.track(_AllOf(works), result)

    def allreduce(self, tensors, opts=None):
        op = _op_name(opts.reduceOp) if opts is not None else "sum"
        g = self._group
        return self._track(
            [c.all_reduce(t, op=op, group=g, async_op=True) for t in tensors], tensors
        )

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        root, g = opts.rootRank, self._group
        return self._track(
            [c.broadcast(t, src=root, group=g, async_op=True) for t in tensors], tensors
        )

    def reduce(self, tensors, opts):
        root, op, g = opts.rootRank, _op_name(opts.reduceOp), self._group
        works = [c.reduce(t, dst=root, op=op, group=g, async_op=True) for t in tensors]
        return self._track(works, tensors)

    def allgather(self, output_lists, inputs, opts=None):
        g = self._group
        works = [c.all_gather(o, t, group=g, async_op=True) for o, t in zip(output_lists, inputs)]
        return self._track(works, output_lists)

    def all_gather_single(self, output, input, opts=None):
        work = c.all_gather_into_tensor(output, input, group=self._group, async_op=True)
        return self._track([work], [output])

    _allgather_base = all_gather_single  # the name torch used before 2.13

    def reduce_scatter(self, outputs, input_lists, opts):
        op, g = _op_name(opts.reduceOp), self._group
        works = [
            c.reduce_scatter(o, ins, op=op, group=g, async_op=True)
            for o, ins in zip(outputs, input_lists)
        ]
        return self._track(works, outputs)

    def reduce_scatter_single(self, output, input, opts):
        op = _op_name(opts.reduceOp)
        work = c.reduce_scatter_tensor(output, input, op=op, group=self._group, async_op=True)
        return self._track([work], [output])

    _reduce_scatter_base = reduce_scatter_single  # the name torch used before 2.13

    def _at_root(self, lists, root: int) -> list:
        """The root's tensor lists; None for each on the other ranks."""
        return lists if self.rank() == root else [None] * len(lists)

    def gather(self, output_lists, inputs, opts):
        root, g = opts.rootRank, self._group
        outs = self._at_root(output_lists, root)
        works = [c.gather(t, o, dst=root, group=g, async_op=True) for t, o in zip(inputs, outs)]
        return self._track(works, output_lists)

    def scatter(self, outputs, input_lists, opts):
        root, g = opts.rootRank, self._group
        ins = self._at_root(input_lists, root)
        works = [c.scatter(t, i, src=root, group=g, async_op=True) for t, i in zip(outputs, ins)]
        return self._track(works, outputs)

    def all_to_all_single(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        work = c.all_to_all_single(
            output,
            input,
            output_split_sizes or None,
            input_split_sizes or None,
            group=self._group,
            async_op=True,
        )
        return self._track([work], [output])

    alltoall_base = all_to_all_single  # the name torch used before 2.13

    def alltoall(self, outputs, inputs, opts=None):
        return self._track(
            [c.all_to_all(outputs, inputs, group=self._group, async_op=True)], outputs
        )

    def barrier(self, opts=None):
        return self._track([c.barrier(group=self._group, async_op=True)], [])

    def send(self, tensors, dst: int, tag: int):
        g = self._group
        return self._track([c.isend(t, dst, group=g, tag=tag) for t in tensors], tensors)

    def recv(self, tensors, src: int, tag: int):
        g = self._group
        return self._track([c.irecv(t, src, group=g, tag=tag) for t in tensors], tensors)

    def recv_anysource(self, tensors, tag: int):
        return self.recv(tensors, None, tag)


def _create(store, rank: int, world_size: int, timeout: datetime.timedelta):
    return PscoreProcessGroup(store, rank, world_size, timeout)


def register() -> None:
    """Registers the "pscore" backend with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu"])


register()
