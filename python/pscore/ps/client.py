"""PSClient: a worker's handle on the parameter servers (pscore.ps)."""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _config, _ps, errors, stall
from ..buffer import view_as, view_out
from . import discovery, environment
from .stall_watch import ClientWatch
from .tables import TableInfo, build_spec, table_info
from .work import PSWork

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["REQUEST_TIMEOUT_S", "PSClient"]

REQUEST_TIMEOUT_S = 60.0  # PSClient's default request timeout


def _values(x, what: str):
    """x's values as float32 (a view, or a contiguous float32 copy when x is not one); CPU or
    CUDA (staged through pinned host memory: the call completes before it returns)."""
    return view_as(x, "float32", what=what, host=None)


def _output(x, what: str):
    """x as the float32 buffer a pull writes into (no copy: x must already be one)."""
    return view_out(x, "float32", what=what, host=None)


def _timeout_s(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    return float(value)


class PSClient:
    """Connects a worker to every shard of a parameter server.

    Servers are found in a store (``store=``: a Store or a URL as ``pserver --store`` takes,
    where each shard publishes its address and the shard count), from ``servers=["host:port",
    ...]`` in shard order, or, with neither, from the environment (pscore.ps.environment):
    ``PSCORE_STORE=URL``, else TF_CONFIG's ps tasks. Connecting retries until
    ``connect_timeout``, so servers and workers may start in any order. ``worker_id`` defaults
    to this process's rank (pscore-run, torchrun, TF_CONFIG's chief and workers, Slurm, MPI; 0
    with no launcher; -1, read-only, for TF's ps and evaluator tasks). Arrays are numpy
    arrays or CPU torch tensors, read and written in place (float32 values, int64 ids; other
    float/int inputs are converted), or CUDA tensors, staged through pinned host memory (such a
    call completes before it returns; docs/gpu.md). ``timeout``: a shard that does not
    answer a request within it fails the request with a TimeoutError naming the shard.
    ``retry_timeout``: how long a request keeps reconnecting to a shard that went away
    (restarted with --recover) before it raises NetworkError; retried pushes are applied once.
    """

    def __init__(
        self,
        servers: Iterable[str] | None = None,
        *,
        store=None,
        worker_id: int | None = None,
        job_id: str | None = None,
        auth_token: str | None = None,
        timeout: float = REQUEST_TIMEOUT_S,
        connect_timeout: float = 60.0,
        retry_timeout: float = 60.0,
    ):
        if servers is not None and store is not None:
            raise ValueError("PSClient takes servers=[...] or store=, not both")
        from_environment = servers is None and store is None
        if from_environment:
            servers, store = environment.find_servers()
        if worker_id is None:
            worker_id = environment.worker_id()
        if isinstance(worker_id, bool) or not isinstance(worker_id, int) or worker_id < -1:
            raise ValueError(
                f"worker_id must be an int >= 0 (or -1 for an observer), got {worker_id!r}"
            )
        self.timeout = _timeout_s(timeout, "timeout")
        self.retry_timeout = _timeout_s(retry_timeout, "retry_timeout")
        connect_timeout = _timeout_s(connect_timeout, "connect_timeout")
        try:
            self._store = None if store is None else discovery.open_store(store, connect_timeout)
        except ValueError as e:
            if not from_environment:
                raise
            raise ValueError(f"{_config.STORE.name}={store!r}: {e}") from None
        self._job_id = environment.job_id() if job_id is None else job_id
        self._servers = None if servers is None else [str(s) for s in servers]
        if self._servers is not None:
            if not self._servers:
                raise ValueError("servers must name at least one host:port")
            for s in self._servers:
                discovery.parse_address(s)
            num_shards = len(self._servers)
        else:
            num_shards = discovery.read_num_shards(self._store, self._job_id, connect_timeout)
        opts = _ps.ClientOptions()
        opts.worker = worker_id
        opts.job_id = self._job_id
        opts.auth_token = _config.auth_token() if auth_token is None else auth_token
        opts.timeout_ms = int(self.timeout * 1000)
        opts.connect_timeout_ms = int(min(connect_timeout, 10.0) * 1000)
        self.worker_id = worker_id
        self._cpp = _ps.Client(opts, num_shards)
        self._tables: dict[str, TableInfo] = {}
        self._inflight: list[PSWork] = []
        self._inflight_lock = threading.Lock()
        self._stall_watch = ClientWatch(self, self.timeout)
        with stall.waiting(
            f"worker {worker_id}: connecting to {num_shards} shard(s)",
            connect_timeout,
            self._unreached_shards,
        ):
            self._reconnect(range(num_shards), time.monotonic() + connect_timeout)

    # ----- connection management -----
    @property
    def num_shards(self) -> int:
        return self._cpp.num_shards

    def _reconnect(self, shards, deadline: float) -> None:
        for shard in shards:
            discovery.connect_shard(
                self._cpp,
                shard,
                store=self._store,
                job_id=self._job_id,
                servers=self._servers,
                deadline=deadline,
            )

    def _unreached_shards(self, waited: float) -> str | None:
        """The stall report of a connect that waits: the shards not connected yet, and whether
        they registered in the store."""
        lost = [s for s in range(self.num_shards) if not self._cpp.connected(s)]
        if not lost:
            return None
        unregistered = (
            [s for s in lost if not self._store.check([discovery.shard_key(self._job_id, s)])]
            if self._store is not None
            else []
        )
        why = f"; not registered in the store: {', '.join(map(str, unregistered))}"
        return (
            f"pscore: worker {self.worker_id} has waited {waited:.1f} s to connect; "
            f"{stall.format_ranks('shard', lost)} not reached yet{why if unregistered else ''}"
        )

    def _call(self, fn, *args):
        """Runs a blocking, idempotent C++ call, reconnecting lost shards while retry_timeout
        allows."""
        deadline = None
        while True:
            try:
                return fn(*args)
            except errors.NetworkError:
                deadline = deadline or time.monotonic() + self.retry_timeout
                lost = [s for s in range(self.num_shards) if not self._cpp.connected(s)]
                if not lost or time.monotonic() >= deadline:
                    raise
                self._reconnect(lost, deadline)

    def _track(self, work, keep: tuple, result=None, table: str | None = None) -> PSWork:
        """Holds the work (and the arrays C++ reads and writes) until it completes, even if the
        caller drops its handle. table: the table a push goes to (its timeout reports what the
        table's round waits for)."""
        w = PSWork(self, work, keep, result, table)
        with self._inflight_lock:
            self._inflight = [x for x in self._inflight if not x.is_completed()]
            self._inflight.append(w)
        return w

    # ----- tables -----
    def _info(self, layout) -> TableInfo:
        info = table_info(layout)
        self._tables[info.name] = info
        return info

    def create_dense(self, name: str, shape=None, *, init=None, **settings) -> TableInfo:
        """Creates (or, if it exists with the same settings, joins) a dense float32 table of
        `shape`, split over the shards balanced by bytes. `init` (an array) gives a new table's
        values. Settings (see pscore.ps.tables.build_spec): initializer ("zeros", "uniform"
        low/high, "normal" mean/std, "constant" value; seeded by seed), optimizer (default
        SGD()), consistency ("async"; "sync" with backup_workers; "ssp" with staleness),
        clip_norm, clip_value."""
        init_view = None
        if init is not None:
            init_view = _values(init, "init")
            shape = tuple(init.shape) if shape is None else shape
        if shape is None:
            raise ValueError(f"create_dense {name!r}: give a shape or an init array")
        shape = (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)
        spec = build_spec(name, False, shape, **settings)
        return self._info(self._call(self._cpp.create_table, spec, init_view))

    def create_sparse(self, name: str, dim: int, **settings) -> TableInfo:
        """Creates (or joins) a sparse table of rows of `dim` floats keyed by int64 ids of any
        value. A row is created, from the seeded initializer, the first time it is touched; rows
        hash to shards; optimizers update only the rows pushed. Settings as create_dense."""
        spec = build_spec(name, True, (int(dim),), **settings)
        return self._info(self._call(self._cpp.create_table, spec, None))

    def lookup_table(self, name: str) -> TableInfo:
        """The table `name` (KeyError when no worker created it)."""
        return self._info(self._call(self._cpp.lookup_table, name))

    def table(self, name: str) -> TableInfo:
        return self._tables.get(name) or self.lookup_table(name)

    def list_tables(self) -> dict[str, TableInfo]:
        """Every table the servers hold, by name, with its settings (TableInfo.settings)."""
        return {i.name: i for i in map(table_info, self._call(self._cpp.list_tables))}

    def drop_table(self, name: str) -> None:
        """Removes the table from every shard (values, optimizer state, catalog entry; with
        --recover the drop is logged, so a recovered shard does not bring the table back).
        Pushes parked in its sync round or ssp bound are answered as dropped.
        Using the name afterwards raises KeyError until a worker creates the table again (with
        any settings). KeyError when no shard holds it."""
        self._tables.pop(name, None)
        self._call(self._cpp.drop_table, name)

    def _waits_for(self, name: str) -> str:
        """What a sync or ssp table's shards wait for, said after a push to it timed out ("" for
        an async table)."""
        try:
            info = self.table(name)
            if info.consistency == "async":
                return ""
            lost = [s for s in range(self.num_shards) if not self._cpp.connected(s)]
            self._reconnect(lost, time.monotonic() + self.timeout)
            work = self._cpp.table_status(name)
            if not work.wait(int(self.timeout * 1000)):
                return "; the shards did not say what the table waits for"
            states = [json.loads(r) for r in work.replies()]
        except (errors.Error, KeyError) as e:
            return f"; the shards could not say what the table waits for ({e})"
        done = sorted({w for s in states for w in s["done"]})
        if info.consistency == "ssp":
            clocks = [max(s["clocks"][w] for s in states) for w in range(len(states[0]["clocks"]))]
            staleness = dict(info.settings)["staleness"]
            return (
                f"; ssp table {name!r} (staleness {staleness}) waits for slower workers: "
                f"worker clocks {clocks}, finished workers {done}"
            )
        rounds = sorted({s["round"] for s in states})
        waiting = sorted({w for s in states for w in s["waiting_for"]})
        pushed = sorted({w for s in states for w in s["pushed"]})
        return (
            f"; sync round {', '.join(map(str, rounds))} of table {name!r} still waits for "
            f"workers {waiting} (pushed: {pushed}, finished: {done})"
        )

    # ----- dense -----
    def push_async(self, name: str, grad) -> PSWork:
        g = _values(grad, "grad")
        return self._track(self._cpp.push(name, g), (g,), table=name)

    def pull_async(self, name: str, out=None) -> PSWork:
        if out is None:
            out = np.empty(self.table(name).shape, dtype=np.float32)
        o = _output(out, "out")
        return self._track(self._cpp.pull(name, o), (o,), lambda: out)

    def push_pull_async(self, name: str, grad, out=None) -> PSWork:
        g = _values(grad, "grad")
        if out is None:
            out = np.empty(self.table(name).shape, dtype=np.float32)
        o = _output(out, "out")
        if o.numel != g.numel:
            raise ValueError(f"push_pull {name!r}: grad has {g.numel} elements, out {o.numel}")
        return self._track(self._cpp.push_pull(name, g, o), (g, o), lambda: out, name)

    def assign_async(self, name: str, value) -> PSWork:
        v = _values(value, "value")
        return self._track(self._cpp.assign(name, v), (v,))

    def push(self, name: str, grad) -> None:
        """Sends a gradient; the table's server-side optimizer applies it."""
        self.push_async(name, grad).wait()

    def pull(self, name: str, out=None):
        """Copies the table's values into `out` (a new array when None) and returns it."""
        return self.pull_async(name, out).result()

    def push_pull(self, name: str, grad, out=None):
        """push then pull in one round trip (for sync tables, the values after the round)."""
        return self.push_pull_async(name, grad, out).result()

    def assign(self, name: str, value) -> None:
        """Overwrites a dense table's values (optimizer state is kept)."""
        self.assign_async(name, value).wait()

    # ----- sparse -----
    def _rows(self, name: str, ids, rows, what: str, output: bool):
        i = view_as(ids, "int64", what="ids", host=None)
        n, dim = i.numel, self.table(name).dim
        if dim == 0:
            raise ValueError(f"{what} {name!r}: the table is dense")
        if rows is None:
            rows = np.empty((n, dim), dtype=np.float32)
        r = _output(rows, "out") if output else _values(rows, "grads")
        if r.numel != n * dim:
            raise ValueError(
                f"{what} {name!r}: {n} ids need {n * dim} values ({n} x {dim}), got {r.numel}"
            )
        return i, r, rows

    def push_sparse_async(self, name: str, ids, grads) -> PSWork:
        i, g, _ = self._rows(name, ids, grads, "push_sparse", False)
        return self._track(self._cpp.push_sparse(name, i, g), (i, g), table=name)

    def pull_sparse_async(self, name: str, ids, out=None) -> PSWork:
        i, o, out = self._rows(name, ids, out, "pull_sparse", True)
        return self._track(self._cpp.pull_sparse(name, i, o), (i, o), lambda: out)

    def push_pull_sparse_async(self, name: str, ids, grads, out=None) -> PSWork:
        i, g, _ = self._rows(name, ids, grads, "push_pull_sparse", False)
        if out is None:
            out = np.empty((i.numel, self.table(name).dim), dtype=np.float32)
        o = _output(out, "out")
        if o.numel != g.numel:
            raise ValueError(
                f"push_pull_sparse {name!r}: out has {o.numel} values, grads {g.numel}"
            )
        work = self._cpp.push_pull_sparse(name, i, g, o)
        return self._track(work, (i, g, o), lambda: out, name)

    def push_sparse(self, name: str, ids, grads) -> None:
        """Sends gradient rows for `ids` (duplicate ids are summed before the update)."""
        self.push_sparse_async(name, ids, grads).wait()

    def push_pull_sparse(self, name: str, ids, grads, out=None):
        """push_sparse, then the rows of `ids` after the update, in one round trip."""
        return self.push_pull_sparse_async(name, ids, grads, out).result()

    def pull_sparse(self, name: str, ids, out=None):
        """Rows for `ids` into `out` (shape (len(ids), dim); new when None); returns it."""
        return self.pull_sparse_async(name, ids, out).result()

    # ----- many tables in one round trip -----
    def _batch(self, works: list[PSWork], result) -> PSWork:
        combined = _ps.Client.combine([w._handle for w in works])
        return self._track(combined, tuple(works), result)

    def push_many_async(self, grads: Mapping[str, Any]) -> PSWork:
        return self._batch([self.push_async(k, v) for k, v in grads.items()], None)

    def pull_many_async(self, outs: Mapping[str, Any] | Iterable[str]) -> PSWork:
        items = outs.items() if isinstance(outs, Mapping) else ((k, None) for k in outs)
        works = {k: self.pull_async(k, v) for k, v in items}
        return self._batch(list(works.values()), lambda: {k: w._result() for k, w in works.items()})

    def push_many(self, grads: Mapping[str, Any]) -> None:
        """Pushes to several tables with all requests in flight at once."""
        self.push_many_async(grads).wait()

    def pull_many(self, outs) -> dict:
        """Pulls several tables at once: a mapping name -> out (or names); returns name -> array."""
        return self.pull_many_async(outs).result()

    # ----- coordination -----
    def worker_done(self) -> None:
        """This worker has finished: sync rounds and ssp bounds stop waiting for it."""
        self._call(lambda: self._cpp.worker_done().wait(-1))

    def global_step(self) -> int:
        """The job's global step counter (kept by shard 0)."""
        return self._step_op(0)

    def increment_global_step(self, n: int = 1) -> int:
        """Adds n to the global step (typically by the chief once per step); returns it."""
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"n must be an int, not {type(n).__name__}")
        return self._step_op(n)

    def _step_op(self, delta: int) -> int:
        w = self._cpp.global_step(delta)
        w.wait(-1)
        return int(np.frombuffer(w.replies()[0], dtype=np.int64)[0])

    def table_step(self, name: str) -> int:
        """This worker's step for a sync/ssp table (the round it pushes to next)."""
        return self._cpp.table_step(name)

    def save(self, path: str) -> None:
        """Every shard writes its tables and optimizer state to
        path/shard-IIIII-of-NNNNN.safetensors (zero-padded, e.g. shard-00001-of-00002;
        atomically). The path must be reachable from every server."""
        self._call(lambda: self._cpp.save(os.path.abspath(path)).wait(-1))

    def load(self, path: str) -> None:
        """Every shard replaces its tables with those saved under path."""
        self._call(lambda: self._cpp.load(os.path.abspath(path)).wait(-1))
        self._tables.clear()

    def stats(self) -> list[dict]:
        """Per-shard counters: requests, bytes in/out, rows, queue depth, p50/p99 latency..."""
        w = self._call(lambda: _waited(self._cpp.stats()))
        return [json.loads(r) for r in w.replies()]

    def close(self) -> None:
        """Waits for in-flight requests, then closes the connections."""
        with self._inflight_lock:
            pending, self._inflight = self._inflight, []
        for w in pending:
            with contextlib.suppress(Exception):  # the caller collects errors from its works
                w.wait()
        self._cpp = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _waited(work):
    work.wait(-1)
    return work
