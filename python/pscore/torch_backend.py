"""pscore as a torch.distributed backend: `import pscore.torch_backend` (or `import pscore` after
torch) registers "pscore", and unmodified code - DDP included - runs on pscore's transports:

    dist.init_process_group("pscore", ...)
    model = torch.nn.parallel.DistributedDataParallel(model)

allreduce (DDP's gradient buckets) runs asynchronously: it returns at once and a completer
thread resolves the Work's future when pscore finishes, so backward keeps computing while
buckets are reduced. The other operations run synchronously and return completed Work objects.
"""

from __future__ import annotations

import datetime
import queue
import threading

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroup as _TorchProcessGroup
from torch._C._distributed_c10d import Work as _TorchWork

from . import collectives as c
from .group import build_group
from .store_base import Store

BACKEND_NAME = "pscore"

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


class _DoneWork(_TorchWork):
    """A finished operation; its future already holds the result tensors."""

    def __init__(self, result, source: int = -1):
        super().__init__()
        self._future = torch.futures.Future()
        self._future.set_result(result)
        self._source = source

    def source_rank(self) -> int:
        return self._source

    _source_rank = source_rank  # what torch.distributed.recv(src=None) asks

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        return True

    def is_completed(self) -> bool:
        return True

    def is_success(self) -> bool:
        return True

    def get_future(self):
        return self._future


class _AsyncWork(_TorchWork):
    """An operation still running in pscore; its future resolves on the completer thread."""

    def __init__(self):
        super().__init__()
        self._future = torch.futures.Future()

    def wait(self, timeout: datetime.timedelta | None = None) -> bool:
        self._future.wait()  # raises the operation's error
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
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


class _Completer:
    """One thread per group that waits for pscore's works in submission order (the order they
    complete in) and resolves their torch futures."""

    def __init__(self):
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(
            target=self._run, name="pscore-torch-completer", daemon=True
        )
        self._thread.start()

    def track(self, work, result) -> _AsyncWork:
        torch_work = _AsyncWork()
        self._queue.put((work, result, torch_work))
        return torch_work

    def _run(self) -> None:
        while True:
            work, result, torch_work = self._queue.get()
            try:
                work.wait()
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

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def allreduce(self, tensors, opts=None):
        op = _op_name(opts.reduceOp) if opts is not None else "sum"
        works = [c.all_reduce(t, op=op, group=self._group, async_op=True) for t in tensors]
        return self._completer.track(_AllOf(works), tensors)

    def allreduce_coalesced(self, tensors, opts=None):
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors, opts):
        for t in tensors:
            c.broadcast(t, src=opts.rootRank, group=self._group)
        return _DoneWork(tensors)

    def reduce(self, tensors, opts):
        for t in tensors:
            c.reduce(t, dst=opts.rootRank, op=_op_name(opts.reduceOp), group=self._group)
        return _DoneWork(tensors)

    def allgather(self, output_lists, inputs, opts=None):
        for outs, t in zip(output_lists, inputs):
            c.all_gather(outs, t, group=self._group)
        return _DoneWork(output_lists)

    def _allgather_base(self, output, input, opts=None):
        c.all_gather_into_tensor(output, input, group=self._group)
        return _DoneWork([output])

    def reduce_scatter(self, outputs, input_lists, opts):
        for out, ins in zip(outputs, input_lists):
            c.reduce_scatter(out, ins, op=_op_name(opts.reduceOp), group=self._group)
        return _DoneWork(outputs)

    def _reduce_scatter_base(self, output, input, opts):
        c.reduce_scatter_tensor(output, input, op=_op_name(opts.reduceOp), group=self._group)
        return _DoneWork([output])

    def gather(self, output_lists, inputs, opts):
        root = opts.rootRank
        for i, t in enumerate(inputs):
            outs = output_lists[i] if self.rank() == root else None
            c.gather(t, outs, dst=root, group=self._group)
        return _DoneWork(output_lists)

    def scatter(self, outputs, input_lists, opts):
        root = opts.rootRank
        for i, t in enumerate(outputs):
            ins = input_lists[i] if self.rank() == root else None
            c.scatter(t, ins, src=root, group=self._group)
        return _DoneWork(outputs)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes, opts=None):
        c.all_to_all_single(
            output, input, output_split_sizes or None, input_split_sizes or None, group=self._group
        )
        return _DoneWork([output])

    def alltoall(self, outputs, inputs, opts=None):
        c.all_to_all(outputs, inputs, group=self._group)
        return _DoneWork(outputs)

    def barrier(self, opts=None):
        c.barrier(group=self._group)
        return _DoneWork([])

    def send(self, tensors, dst: int, tag: int):
        for t in tensors:
            c.send(t, dst, group=self._group, tag=tag)
        return _DoneWork(tensors)

    def recv(self, tensors, src: int, tag: int):
        for t in tensors:
            c.recv(t, src, group=self._group, tag=tag)
        return _DoneWork(tensors, src)

    def recv_anysource(self, tensors, tag: int):
        (t,) = tensors
        return _DoneWork(tensors, c.recv(t, None, group=self._group, tag=tag))


def _create(store, rank: int, world_size: int, timeout: datetime.timedelta):
    return PscoreProcessGroup(store, rank, world_size, timeout)


def register() -> None:
    """Registers the "pscore" backend with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create, devices=["cpu"])


register()
