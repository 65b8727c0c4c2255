"""torch.distributed calls on CPU tensors, each a case run once over gloo and once over pscore by
test_torch_backend_vs_gloo.py, which compares the results rank by rank.

A case is `fn(rank, world) -> result`, run after init_process_group; results are tensors,
plain values, and Raised(...) where a call raised. Cases run in the order written, in one
process group per backend, so each leaves every rank ready for the next."""

from __future__ import annotations

import dataclasses
import datetime

import torch
import torch.distributed as dist

CASES: dict = {}
# Cases whose results are checked against the values they should have rather than against gloo:
# they return {key: (got, expected)}. Gloo gives wrong values for non-contiguous tensors (it
# reduces and sends their storage's leading elements) and lacks some calls pscore serves.
SELF_CHECKED: set = set()

OPS = ["SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "AVG", "PREMUL_SUM"]
DTYPES = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
    torch.bool,
    torch.complex64,
]


@dataclasses.dataclass(frozen=True)
class Raised:
    """A call raised; `what` is shown when the backends disagree, never compared."""

    what: str


def case(fn):
    CASES[fn.__name__] = fn
    return fn


def self_checked(fn):
    SELF_CHECKED.add(fn.__name__)
    return case(fn)


def attempt(fn):
    """fn()'s result, or Raised for its exception (the run goes on with the next call)."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 - compared with the other backend's outcome
        return Raised(f"{type(e).__name__}: {e}".splitlines()[0][:200])


def data(rank: int, n: int = 6, dtype=torch.float32, shape=None) -> torch.Tensor:
    """Small values that differ by rank and stay exact in every dtype (products included)."""
    t = torch.arange(n) % 3 + rank + 1
    if dtype == torch.bool:
        t = (torch.arange(n) + rank) % 2 == 0
    t = t.to(dtype)
    return t.reshape(shape) if shape is not None else t


def _reduce_op(name: str):
    if name == "PREMUL_SUM":
        return dist._make_nccl_premul_sum(2.0)
    return getattr(dist.ReduceOp, name)


def _all_reduce(op_name: str, rank: int, dtype) -> torch.Tensor:
    t = data(rank, dtype=dtype)
    dist.all_reduce(t, op=_reduce_op(op_name))
    return t


for _op in OPS:

    def _case(rank, _world, _op=_op):
        return {str(d): attempt(lambda d=d: _all_reduce(_op, rank, d)) for d in DTYPES}

    _case.__name__ = f"all_reduce_{_op.lower()}"
    case(_case)


@case
def all_reduce_shapes(rank, _world):
    """A 0-d tensor, an empty one, a 3-d one and a transposed (dense, non-contiguous) one."""
    out = {}
    for name, t in {
        "scalar": torch.tensor(float(rank + 1)),
        "empty": torch.empty(0),
        "3d": data(rank, 24, shape=(2, 3, 4)),
        "transposed": data(rank, 12, shape=(3, 4)).t(),
    }.items():
        out[name] = attempt(lambda t=t: (dist.all_reduce(t), t)[1])
    return out


@case
def all_reduce_async(rank, _world):
    t = data(rank)
    work = dist.all_reduce(t, async_op=True)
    fut = work.get_future()
    chained = fut.then(lambda f: [x * 10 for x in f.value()])
    value = fut.wait()
    done = work.wait()
    return {
        "wait": done,
        "future": value,
        "then": chained.wait(),
        "completed": work.is_completed(),
        "success": work.is_success(),
        "exception": work.exception(),
        "result": work.result(),
        "tensor": t,
    }


@case
def futures_of_every_op(rank, world):
    """What each operation's future resolves to (gloo has none for some: compared as raising)."""
    outs = [torch.empty(6) for _ in range(world)]
    gathered = [torch.empty(6) for _ in range(world)] if rank == 0 else None
    scattered = torch.empty(6)
    to_scatter = [data(i) for i in range(world)] if rank == 0 else None
    a2a_out = [torch.empty(2) for _ in range(world)]
    ops = {
        "all_reduce": lambda: dist.all_reduce(data(rank), async_op=True),
        "broadcast": lambda: dist.broadcast(data(rank), src=0, async_op=True),
        "reduce": lambda: dist.reduce(data(rank), dst=0, async_op=True),
        "all_gather": lambda: dist.all_gather(outs, data(rank), async_op=True),
        "all_gather_into_tensor": lambda: dist.all_gather_into_tensor(
            torch.empty(6 * world), data(rank), async_op=True
        ),
        "gather": lambda: dist.gather(data(rank), gathered, dst=0, async_op=True),
        "scatter": lambda: dist.scatter(scattered, to_scatter, src=0, async_op=True),
        "all_to_all": lambda: dist.all_to_all(a2a_out, [data(rank, 2)] * world, async_op=True),
        "all_to_all_single": lambda: dist.all_to_all_single(
            torch.empty(2 * world), data(rank, 2 * world), async_op=True
        ),
        "all_reduce_coalesced": lambda: dist.all_reduce_coalesced(
            [data(rank, 2), data(rank, 3)], async_op=True
        ),
        "barrier": lambda: dist.barrier(async_op=True),
    }
    results = {}
    for name, start in ops.items():
        work = start()
        results[name] = attempt(lambda w=work: w.get_future().wait())
        work.wait()
    if rank != 0:
        results["reduce"] = None  # gloo leaves scratch values on the other ranks
    return results


@self_checked
def futures_gloo_lacks(rank, world):
    """Futures of the operations whose gloo Work has none: each resolves to its outputs."""
    rs, rs_tensor, got, sent = torch.empty(2), torch.empty(2), torch.empty(6), data(rank)
    works = {
        "reduce_scatter": (
            dist.reduce_scatter(rs, [data(rank, 2)] * world, async_op=True),
            [rs],
            [sum(data(r, 2) for r in range(world))],
        ),
        "reduce_scatter_tensor": (
            dist.reduce_scatter_tensor(rs_tensor, data(rank, 2 * world), async_op=True),
            [rs_tensor],
            [sum(data(r, 2 * world) for r in range(world))[2 * rank : 2 * rank + 2]],
        ),
        "send": (dist.isend(sent, (rank + 1) % world), [sent], [data(rank)]),
        "recv": (dist.irecv(got, (rank - 1) % world), [got], [data((rank - 1) % world)]),
    }
    out = {}
    for name, (work, outputs, expected) in works.items():
        value = attempt(lambda w=work: w.get_future().wait())
        work.wait()
        out[name] = (value, outputs)
        out[f"{name} values"] = (outputs, expected)
    return out


@case
def broadcast(rank, world):
    out = {}
    for src in range(world):
        for dtype in (torch.float32, torch.int64, torch.bool, torch.float16):
            t = data(rank, dtype=dtype)
            out[f"{src}/{dtype}"] = attempt(lambda t=t, src=src: (dist.broadcast(t, src), t)[1])
    return out


@case
def reduce(rank, world):
    """The destination's result (gloo leaves scratch values in the other ranks' tensors)."""
    out = {}
    for dst in range(world):
        for op in ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "AVG"):
            dtype = torch.int32 if op == "BAND" else torch.float32
            t = data(rank, dtype=dtype)
            r = attempt(lambda t=t, dst=dst, op=op: dist.reduce(t, dst, op=_reduce_op(op)))
            out[f"{dst}/{op}"] = r if isinstance(r, Raised) or rank != dst else t
    return out


@case
def all_gather(rank, world):
    out = {}
    for dtype in (torch.float32, torch.int8, torch.bool, torch.bfloat16):
        outs = [torch.empty(6, dtype=dtype) for _ in range(world)]
        out[str(dtype)] = attempt(
            lambda outs=outs, d=dtype: (dist.all_gather(outs, data(rank, dtype=d)), outs)[1]
        )
    uneven = [torch.zeros(r + 1) for r in range(world)]
    out["uneven"] = attempt(lambda: (dist.all_gather(uneven, torch.ones(rank + 1)), uneven)[1])
    return out


@case
def all_gather_into_tensor(rank, world):
    flat = torch.empty(6 * world)
    stacked = torch.empty(world, 2, 3)
    return {
        "flat": attempt(lambda: (dist.all_gather_into_tensor(flat, data(rank)), flat)[1]),
        "stacked": attempt(
            lambda: (
                dist.all_gather_into_tensor(stacked, data(rank, shape=(2, 3))),
                stacked,
            )[1]
        ),
        "wrong_size": attempt(lambda: dist.all_gather_into_tensor(torch.empty(1), data(rank))),
    }


@case
def reduce_scatter(rank, world):
    out = {}
    for op in ("SUM", "MAX", "PRODUCT"):
        o = torch.empty(3)
        ins = [data(rank + i, 3) for i in range(world)]
        out[op] = attempt(
            lambda o=o, ins=ins, op=op: (dist.reduce_scatter(o, ins, op=_reduce_op(op)), o)[1]
        )
    return out


@case
def reduce_scatter_tensor(rank, world):
    """Gloo takes only the flat form (input's first dimension = world x output's)."""
    o = torch.empty(2, 2)
    return attempt(
        lambda: (dist.reduce_scatter_tensor(o, data(rank, 4 * world, shape=(-1, 2))), o)[1]
    )


@case
def gather(rank, world):
    out = {}
    for dst in range(world):
        for form in ("empty", "none"):
            lst = [torch.empty(6) for _ in range(world)] if rank == dst else None
            if form == "empty" and rank != dst:
                lst = []
            r = attempt(lambda lst=lst, dst=dst: dist.gather(data(rank), lst, dst=dst))
            out[f"{dst}/{form}"] = r if isinstance(r, Raised) else lst
    return out


@case
def scatter(rank, world):
    out = {}
    for src in range(world):
        for form in ("empty", "none"):
            t = torch.full((6,), -1.0)
            lst = [data(10 * src + i) for i in range(world)] if rank == src else None
            if form == "empty" and rank != src:
                lst = []
            r = attempt(lambda t=t, lst=lst, src=src: dist.scatter(t, lst, src=src))
            out[f"{src}/{form}"] = r if isinstance(r, Raised) else t
    return out


@self_checked
def blocking_lists(rank, world):
    """Blocking list collectives on contiguous entries of four dtypes (the backend hands them to
    pscore as they are), and entries of the right size but the wrong shape, which are rejected
    on every rank as gloo rejects them."""
    out = {}
    for dtype in (torch.float32, torch.int8, torch.bool, torch.bfloat16):

        def d(r, dtype=dtype):
            return data(r, 6, dtype=dtype)

        gathered = [torch.zeros(6, dtype=dtype) for _ in range(world)] if rank == 0 else None
        dist.gather(d(rank), gathered, dst=0)
        if rank == 0:
            out[f"gather {dtype}"] = (gathered, [d(r) for r in range(world)])
        scattered, src = torch.zeros(6, dtype=dtype), world - 1
        dist.scatter(scattered, [d(10 + r) for r in range(world)] if rank == src else None, src)
        out[f"scatter {dtype}"] = (scattered, d(10 + rank))
        reduced = torch.zeros(6, dtype=dtype)
        dist.reduce_scatter(reduced, [d(rank + j) for j in range(world)])
        total = sum(d(r + rank).to(torch.int64) for r in range(world)).to(dtype)  # bool: any
        out[f"reduce_scatter {dtype}"] = (reduced, total)
        swapped = [torch.zeros(6, dtype=dtype) for _ in range(world)]
        dist.all_to_all(swapped, [d(rank * world + j) for j in range(world)])
        out[f"all_to_all {dtype}"] = (swapped, [d(r * world + rank) for r in range(world)])
    squares = [torch.zeros(2, 3) for _ in range(world)]
    out["all_gather wrong shape"] = (
        attempt(lambda: dist.all_gather(squares, torch.ones(6))),
        Raised("gloo rejects it"),
    )
    out["reduce_scatter wrong shape"] = (
        attempt(lambda: dist.reduce_scatter(torch.zeros(6), squares)),
        Raised("gloo rejects it"),
    )
    return out


@case
def all_to_all(rank, world):
    ins = [data(rank * world + i, 3) for i in range(world)]
    outs = [torch.empty(3) for _ in range(world)]
    return attempt(lambda: (dist.all_to_all(outs, ins), outs)[1])


@self_checked
def all_to_all_uneven(rank, world):
    """Rank r sends 2 + j elements to rank j (gloo takes equal sizes only)."""
    ins = [data(rank * world + j, 2 + j) for j in range(world)]
    outs = [torch.empty(2 + rank) for _ in range(world)]
    got = attempt(lambda: (dist.all_to_all(outs, ins), outs)[1])
    return {"outputs": (got, [data(r * world + rank, 2 + rank) for r in range(world)])}


@case
def all_to_all_single(rank, world):
    even_out = torch.empty(2 * world, 3)
    even = attempt(
        lambda: (dist.all_to_all_single(even_out, data(rank, 6 * world, shape=(-1, 3))), even_out)[
            1
        ]
    )
    # Rank r sends r + j + 1 rows to rank j.
    in_splits = [rank + j + 1 for j in range(world)]
    out_splits = [i + rank + 1 for i in range(world)]
    inp = data(rank, sum(in_splits) * 2, shape=(-1, 2))
    out = torch.empty(sum(out_splits), 2)
    uneven = attempt(lambda: (dist.all_to_all_single(out, inp, out_splits, in_splits), out)[1])
    return {"even": even, "uneven": uneven}


@case
def barriers(_rank, _world):
    t = datetime.timedelta(seconds=30)
    return {
        "barrier": attempt(dist.barrier),
        "monitored": attempt(lambda: dist.monitored_barrier(timeout=t)),
        "monitored_all": attempt(lambda: dist.monitored_barrier(timeout=t, wait_all_ranks=True)),
    }


@case
def send_recv(rank, world):
    peer_to, peer_from = (rank + 1) % world, (rank - 1) % world
    got = torch.empty(6, dtype=torch.int64)
    if rank % 2 == 0:
        dist.send(data(rank, dtype=torch.int64), peer_to)
        dist.recv(got, peer_from)
    else:
        dist.recv(got, peer_from)
        dist.send(data(rank, dtype=torch.int64), peer_to)
    tagged = torch.empty(3)
    reqs = [dist.isend(data(rank, 3) * 7, peer_to, tag=5), dist.irecv(tagged, peer_from, tag=5)]
    for r in reqs:
        r.wait()
    return {"ring": got, "tagged": tagged}


@case
def recv_any_source(rank, world):
    """Rank 0 receives from whichever rank sends first (tagged: gloo keeps a receive posted
    to every peer, which would catch an untagged message of a later case)."""
    if rank == 0:
        values = []
        for _ in range(world - 1):
            t = torch.empty(4)
            values.append((dist.recv(t, tag=3), t))
        return sorted(values, key=lambda sv: sv[0])
    dist.send(torch.full((4,), float(rank)), 0, tag=3)
    return None


@case
def batch_isend_irecv(rank, world):
    got = [torch.empty(5) for _ in range(world)]
    ops = []
    for peer in range(world):
        if peer != rank:
            ops.append(dist.P2POp(dist.isend, data(rank, 5) + 100 * peer, peer))
            ops.append(dist.P2POp(dist.irecv, got[peer], peer))
    for req in dist.batch_isend_irecv(ops):
        req.wait()
    got[rank] = None
    return got


@case
def object_collectives(rank, world):
    obj = {"rank": rank, "items": list(range(rank + 1)), "text": "x" * (rank * 50)}
    gathered = [None] * world
    dist.all_gather_object(gathered, obj)
    at_dst = [None] * world if rank == world - 1 else None
    dist.gather_object(obj, at_dst, dst=world - 1)
    received = [None]
    src_list = [{"to": r} for r in range(world)] if rank == 0 else [None] * world
    dist.scatter_object_list(received, src_list, src=0)
    shared = [obj, rank] if rank == 1 else [None, None]
    dist.broadcast_object_list(shared, src=1)
    return {"all": gathered, "gather": at_dst, "scatter": received, "broadcast": shared}


@case
def object_send_recv(rank, world):
    """send_object_list / recv_object_list around a ring."""
    outgoing = [{"from": rank, "payload": list(range(rank * 3))}, f"rank {rank}"]
    incoming = [None, None]
    if rank % 2 == 0:
        dist.send_object_list(outgoing, dst=(rank + 1) % world)
        dist.recv_object_list(incoming, src=(rank - 1) % world)
    else:
        dist.recv_object_list(incoming, src=(rank - 1) % world)
        dist.send_object_list(outgoing, dst=(rank + 1) % world)
    return incoming


@case
def coalesced(rank, world):
    ins = [data(rank, 3), data(rank + 5, 4)]
    outs = [[torch.empty(3), torch.empty(4)] for _ in range(world)]
    reduced = [data(rank, 3), data(rank, 5)]
    return {
        "all_gather": attempt(lambda: (dist.all_gather_coalesced(outs, ins), outs)[1]),
        "all_reduce": attempt(lambda: (dist.all_reduce_coalesced(reduced), reduced)[1]),
        "all_reduce_max": attempt(
            lambda: (dist.all_reduce_coalesced(reduced, op=dist.ReduceOp.MAX), reduced)[1]
        ),
    }


@case
def coalescing_manager(rank, world):
    from torch.distributed.distributed_c10d import _coalescing_manager

    sums = [data(rank, 3), data(rank, 7)]
    with _coalescing_manager():
        for t in sums:
            dist.all_reduce(t)
    gathered = [torch.empty(3 * world), torch.empty(2 * world)]
    with _coalescing_manager(async_ops=True) as cm:
        dist.all_gather_into_tensor(gathered[0], data(rank, 3))
        dist.all_gather_into_tensor(gathered[1], data(rank, 2))
    cm.wait()
    scattered = [torch.empty(2), torch.empty(1)]
    with _coalescing_manager():
        dist.reduce_scatter_tensor(scattered[0], data(rank, 2 * world))
        dist.reduce_scatter_tensor(scattered[1], data(rank, world))
    return {"all_reduce": sums, "all_gather": gathered, "reduce_scatter": scattered}


@case
def coalescing_manager_with_device(rank, _world):
    """The older form that hands the device to the group (gloo refuses it). torch leaves the
    group marked as coalescing when the group refuses, and would then drop every later
    all_reduce silently: the mark is cleared here."""
    from torch.distributed.distributed_c10d import _coalescing_manager, _world

    t = data(rank, 3)

    def run():
        with _coalescing_manager(device=torch.device("cpu")):
            dist.all_reduce(t)
        return t

    outcome = attempt(run)
    _world.pg_coalesce_state.pop(dist.group.WORLD, None)
    return outcome


@case
def sparse_all_reduce(rank, world):
    idx = torch.tensor([[rank, rank + 1, 0], [0, 1, rank]])
    t = torch.sparse_coo_tensor(idx, torch.tensor([1.0, 2.0, 3.0]) * (rank + 1), (world + 1, 4))
    r = attempt(lambda: dist.all_reduce(t))
    vec = torch.sparse_coo_tensor(torch.tensor([[rank]]), torch.tensor([rank + 1.0]), (world,))
    r2 = attempt(lambda: dist.all_reduce(vec))
    return {
        "matrix": r if isinstance(r, Raised) else t.coalesce().to_dense(),
        "vector": r2 if isinstance(r2, Raised) else vec.coalesce().to_dense(),
        "max": attempt(lambda: dist.all_reduce(t.clone(), op=dist.ReduceOp.MAX)),
    }


@case
def subgroups(rank, world):
    """A group of the even ranks, used and destroyed; then subgroups of (up to) two ranks."""
    members = list(range(0, world, 2))
    g = dist.new_group(members)
    out = {"ranks": dist.get_process_group_ranks(g) if rank in members else None}
    if rank in members:
        t = data(rank)
        dist.all_reduce(t, group=g)
        objs = [None] * len(members)
        dist.all_gather_object(objs, rank * 3, group=g)
        out.update(
            sum=t,
            objects=objs,
            size=dist.get_world_size(g),
            rank=dist.get_rank(g),
            backend_is_the_worlds=dist.get_backend(g) == dist.get_backend(),
        )
    out["destroy"] = attempt(lambda: dist.destroy_process_group(g))
    pairs = [list(range(r, min(r + 2, world))) for r in range(0, world, 2)]
    mine, _ = dist.new_subgroups_by_enumeration(pairs)
    t = data(rank)
    dist.all_reduce(t, group=mine)
    out["subgroup_sum"] = t
    got = torch.empty(6)
    if dist.get_world_size(mine) > 1:
        dist.broadcast(got.fill_(rank), src=dist.get_process_group_ranks(mine)[0], group=mine)
        out["subgroup_broadcast"] = got
        me = dist.get_rank(mine)
        message = data(rank, 3) * 11 if me == 0 else torch.empty(3)
        if me == 0:
            dist.send(message, group=mine, group_dst=1)
        else:
            out["subgroup_sender"] = dist.recv(message, group=mine, group_src=0)
        out["subgroup_message"] = message
    dist.barrier()
    return out


@self_checked
def noncontiguous(rank, world):
    """Strided views give what their contiguous copies give (gloo raises or reduces the wrong
    elements: not run there)."""
    if dist.get_backend() == "gloo":
        return {}

    def strided(r, dtype=torch.float32):
        return data(r, 24, dtype=dtype, shape=(4, 6))[:, 1::2]

    def reduced(dtype):
        t = strided(rank, dtype)
        dist.all_reduce(t)
        return t, sum(strided(r, torch.int64) for r in range(world)).to(dtype)

    src = world - 1
    cast = strided(rank)
    dist.broadcast(cast, src=src)
    gathered = [torch.zeros(4, 6)[:, ::2] for _ in range(world)]
    dist.all_gather(gathered, strided(rank))
    scattered = torch.zeros(6, 2).t()
    dist.scatter(
        scattered, [data(i, 12, shape=(2, 6)) for i in range(world)] if rank == 0 else None
    )
    at_root = [torch.zeros(4, 6)[:, ::2] for _ in range(world)] if rank == src else None
    dist.gather(strided(rank), at_root, dst=src)
    reduced_parts = torch.zeros(3, 4).t()
    dist.reduce_scatter(reduced_parts, [strided(rank + j) for j in range(world)])
    swapped = [torch.zeros(4, 6)[:, 1::2] for _ in range(world)]
    dist.all_to_all(swapped, [strided(rank * world + j) for j in range(world)])
    received = torch.zeros(4, 6)[:, 1::2]
    peer_to, peer_from = (rank + 1) % world, (rank - 1) % world
    reqs = [dist.isend(strided(rank) * 5, peer_to), dist.irecv(received, peer_from)]
    for r in reqs:
        r.wait()
    out = {} if rank != src else {"gather": (at_root, [strided(r) for r in range(world)])}
    return out | {
        "all_reduce float32": reduced(torch.float32),
        "all_reduce bool": reduced(torch.bool),
        "broadcast": (cast, strided(src)),
        "all_gather": (gathered, [strided(r) for r in range(world)]),
        "scatter": (scattered, data(rank, 12, shape=(2, 6))),
        "reduce_scatter": (reduced_parts, sum(strided(rank + r) for r in range(world))),
        "all_to_all": (swapped, [strided(r * world + rank) for r in range(world)]),
        "recv": (received, strided(peer_from) * 5),
    }


@case
def mismatched_arguments(rank, world):
    """Calls torch or the backend reject on every rank before any data moves."""
    return {
        "scatter_list_too_short": attempt(
            lambda: dist.scatter(torch.empty(2), [torch.ones(2)] * (world - 1), src=rank)
        ),
        "gather_list_on_non_root": attempt(
            lambda: dist.gather(torch.ones(2), [torch.empty(2)] * world, dst=(rank + 1) % world)
        ),
        "broadcast_bad_src": attempt(lambda: dist.broadcast(torch.ones(2), src=world)),
        "all_gather_wrong_length": attempt(
            lambda: dist.all_gather([torch.empty(2)] * (world + 1), torch.ones(2))
        ),
    }


@self_checked
def still_in_step(rank, world):
    """After every case above, the ranks still agree on their next collective (checked on both
    backends: a case that left torch's state broken would hide later differences)."""
    t = data(rank)
    dist.all_reduce(t)
    return {"sum": (t, sum(data(r) for r in range(world)))}
