"""pscore as a torch.distributed backend: unmodified DDP code trains to the same weights as on
gloo, and the torch.distributed collectives dispatch to pscore."""

import datetime
import re
import time

import pytest
import torch
import torch.distributed as dist
from torch_ranks import KEEP_ALIVE, init, run_ranks


def ddp_train(rank, world, backend, port):
    init(backend, rank, world, port, timeout_s=60)
    torch.manual_seed(rank)  # different starting weights: DDP syncs rank 0's
    model = torch.nn.parallel.DistributedDataParallel(
        torch.nn.Sequential(torch.nn.Linear(20, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)),
        bucket_cap_mb=0.001,  # several buckets
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(100 + rank)
    for _ in range(10):
        x = torch.randn(16, 20, generator=g)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    t = torch.arange(6, dtype=torch.float32) + rank
    outs = [torch.empty(6) for _ in range(world)]
    dist.all_gather(outs, t)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert torch.equal(t, torch.arange(6, dtype=torch.float32) + world - 1)
    assert all(torch.equal(o, torch.arange(6, dtype=torch.float32) + r) for r, o in enumerate(outs))
    reply = (flat.numpy().copy(), dist.get_backend())
    dist.destroy_process_group()
    KEEP_ALIVE.append(model)
    return reply


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_matches_gloo(world):
    ours = run_ranks(ddp_train, world, "pscore", timeout_s=120)
    gloo = run_ranks(ddp_train, world, "gloo", timeout_s=120)
    assert {b for _, b in ours.values()} == {"pscore"}
    for r in range(world):
        assert (ours[r][0] == ours[0][0]).all(), "pscore ranks diverged"
        assert torch.allclose(
            torch.from_numpy(ours[r][0]), torch.from_numpy(gloo[r][0]), rtol=1e-5, atol=1e-6
        )


def blocking_and_async(rank, world, port):
    """What the group's methods return: None for the calls torch makes blocking (done already,
    outputs written back), a Work for async_op=True and for DDP's bucket reductions."""
    from torch._C._distributed_c10d import AllreduceOptions, BroadcastOptions

    init("pscore", rank, world, port, timeout_s=30)
    pg = dist.group.WORLD
    returned = []
    allreduce = type(pg).allreduce

    def recording(self, tensors, opts=None):
        work = allreduce(self, tensors, opts)
        returned.append(type(work).__name__)
        return work

    type(pg).allreduce = recording  # what DDP's C++ reducer calls too
    blocking = AllreduceOptions()
    blocking.asyncOp = False
    one, strided = torch.ones(3), torch.ones(4, 2).t()
    got = [pg.allreduce([one], blocking), pg.allreduce([strided, torch.ones(2)], blocking)]
    bopts = BroadcastOptions()
    bopts.rootRank, bopts.asyncOp = 1, False
    sent = torch.full((2,), float(rank))
    got.append(pg.broadcast([sent], bopts))
    work = dist.all_reduce(torch.ones(2), async_op=True)
    future_value = work.get_future().wait()[0].tolist()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2))
    del returned[:]
    model(torch.ones(3, 4)).sum().backward()
    KEEP_ALIVE.append(model)
    values = (one.tolist(), strided.tolist(), sent.tolist(), future_value)
    dist.destroy_process_group()
    return got, values, sorted(set(returned)), len(returned)


def test_blocking_calls_return_done_and_ddp_buckets_stay_asynchronous():
    for got, values, ddp_works, buckets in run_ranks(blocking_and_async, 2, timeout_s=60).values():
        assert got == [None, None, None]
        assert values == ([2.0] * 3, [[2.0] * 4] * 2, [1.0, 1.0], [2.0, 2.0])
        assert ddp_works == ["_AsyncWork"] and buckets >= 1, (ddp_works, buckets)


def silent_peer(rank, world, backend, port):
    """Rank 1 stays silent; rank 0's all_reduce fails: what its Work and future then say."""
    init(backend, rank, world, port, timeout_s=2)
    if rank == 1:
        time.sleep(4)  # alive but silent
        return "slept"
    work = dist.all_reduce(torch.ones(4), async_op=True)
    future = work.get_future()
    try:
        work.wait()
    except Exception as e:  # noqa: BLE001 - reported to the test
        waited = f"{type(e).__name__}: {e}"
    else:
        waited = "no error"
    try:
        future.wait()
    except Exception:  # noqa: BLE001 - reported to the test
        future_raised = True
    else:
        future_raised = False
    return {
        "wait": waited,
        "future raised": future_raised,
        "completed": work.is_completed(),
        "success": work.is_success(),
        "exception": work.exception() is not None,
    }


def test_failure_reaches_the_torch_caller():
    """The error names the silent rank; the Work and its future fail as gloo's do."""
    ours = run_ranks(silent_peer, 2, "pscore", timeout_s=60)[0]
    gloo = run_ranks(silent_peer, 2, "gloo", timeout_s=60)[0]
    assert "rank 0 <- rank 1: allreduce #" in ours["wait"], ours
    assert "timed out after 2000 ms" in ours["wait"], ours
    assert {k: v for k, v in ours.items() if k != "wait"} == {
        k: v for k, v in gloo.items() if k != "wait"
    }, (ours, gloo)


def any_source(rank, world, port):
    init("pscore", rank, world, port, timeout_s=30)
    t = torch.full((3,), float(rank))
    senders = None
    if rank == 0:
        senders = []
        for _ in range(world - 1):
            senders.append(dist.recv(t))  # src=None: whichever rank sends first
            assert torch.equal(t, torch.full((3,), float(senders[-1])))
    else:
        dist.send(t, 0)
    dist.destroy_process_group()
    return senders


def test_recv_from_any_source_returns_the_sender():
    out = run_ranks(any_source, 3, timeout_s=60)
    assert sorted(out[0]) == [1, 2], out


def async_ops(rank, world, port):
    """Several operations in flight at once through torch.distributed's async_op=True."""
    init("pscore", rank, world, port, timeout_s=30)
    b = torch.full((5,), float(rank))
    gathered = torch.empty(world * 3)
    scattered = torch.empty(2)
    swapped = torch.empty(world)
    got = torch.empty(4, dtype=torch.int64)
    works = [
        dist.broadcast(b, src=1, async_op=True),
        dist.all_gather_into_tensor(gathered, torch.full((3,), float(rank)), async_op=True),
        dist.reduce_scatter_tensor(scattered, torch.arange(world * 2.0), async_op=True),
        dist.all_to_all_single(swapped, torch.full((world,), float(rank)), async_op=True),
        dist.isend(torch.full((4,), rank, dtype=torch.int64), (rank + 1) % world),
        dist.irecv(got, (rank - 1) % world),
        dist.barrier(async_op=True),
    ]
    for w in works:
        w.wait()
    assert torch.equal(b, torch.full((5,), 1.0))
    assert torch.equal(gathered, torch.arange(world).repeat_interleave(3).float())
    assert torch.equal(scattered, torch.arange(rank * 2.0, rank * 2.0 + 2) * world)
    assert torch.equal(swapped, torch.arange(world).float())
    assert torch.equal(got, torch.full((4,), (rank - 1) % world, dtype=torch.int64))
    assert works[5].source_rank() == (rank - 1) % world
    assert all(w.is_completed() and w.is_success() for w in works)
    for w in works:
        w.get_future().wait()  # resolved by the completer thread
    dist.destroy_process_group()
    return True


def test_operations_run_asynchronously_through_the_backend():
    assert all(run_ranks(async_ops, 3, timeout_s=60).values())


def profiled_ops(rank, world, backend, port):
    """The profiler's event names for a run of operations, from its events and its trace."""
    import json
    import pathlib
    import tempfile

    from torch.profiler import profile

    init(backend, rank, world, port, timeout_s=30)
    t = torch.ones(8)
    outs = [torch.empty(8) for _ in range(world)]
    with profile() as prof:
        dist.all_reduce(t)
        dist.all_reduce(t, async_op=True).wait()
        dist.broadcast(t, src=0)
        dist.all_gather(outs, t)
        dist.reduce_scatter_tensor(torch.empty(2), torch.ones(2 * world))
        if rank == 0:
            dist.send(t, 1)
        elif rank == 1:
            dist.recv(t, 0)
        dist.barrier()
    with tempfile.TemporaryDirectory() as tmp:
        trace = pathlib.Path(tmp, "trace.json")
        prof.export_chrome_trace(str(trace))
        traced = {e.get("name") for e in json.loads(trace.read_text())["traceEvents"]}
    names = {e.name for e in prof.events()}
    dist.destroy_process_group()
    return names, traced


def test_profiler_shows_the_backends_operations():
    """Each operation gloo's profile names `gloo:<op>` shows as `pscore:<op>` in the events and
    in the exported trace."""
    gloo = run_ranks(profiled_ops, 2, "gloo", timeout_s=120)
    ours = run_ranks(profiled_ops, 2, "pscore", timeout_s=120)
    for rank in range(2):
        gloo_ops = {n.split(":", 1)[1] for n in gloo[rank][0] if n.startswith("gloo:")}
        assert {"all_reduce", "broadcast", "all_gather", "barrier"} <= gloo_ops, gloo_ops
        for names in ours[rank]:
            shown = {n.split(":", 1)[1] for n in names if n and n.startswith("pscore:")}
            assert gloo_ops <= shown, (rank, gloo_ops - shown)


def absent_ranks(rank, world, backend, absent, wait_all, port):
    """monitored_barrier with the ranks in `absent` never arriving; returns the error or None."""
    init(backend, rank, world, port, timeout_s=30)
    dist.barrier()
    if rank in absent:
        time.sleep(4)  # alive, but never reaching the barrier
        return None
    try:
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=2), wait_all_ranks=wait_all)
    except Exception as e:  # noqa: BLE001 - reported to the test
        return str(e)
    return "passed"


def named_ranks(message: str) -> list[int]:
    found = re.search(r"[Rr]anks? ([\d, ]+) (?:failed|did not)", message)
    return [int(r) for r in found.group(1).split(",")] if found else []


@pytest.mark.parametrize(
    ("absent", "wait_all", "named"), [((2,), False, [2]), ((1, 2), True, [1, 2])]
)
def test_monitored_barrier_names_the_absent_ranks_as_gloo_does(absent, wait_all, named):
    outcomes = {
        b: run_ranks(absent_ranks, 3, b, absent, wait_all, timeout_s=120)
        for b in ("gloo", "pscore")
    }
    for outcome in outcomes.values():
        assert named_ranks(outcome[0]) == named, outcome[0]
        for rank in set(range(1, 3)) - set(absent):  # arrived, never released: a timeout
            assert outcome[rank] not in (None, "passed"), outcome[rank]


def wait_with_timeout(rank, world, port):
    """A receive whose wait times out (nothing sent yet), completed by a later send."""
    init("pscore", rank, world, port, timeout_s=30)
    got = torch.zeros(3)
    if rank == 0:
        work = dist.irecv(got, 1, tag=9)
        try:
            work.wait(datetime.timedelta(milliseconds=200))
        except TimeoutError as e:
            first = str(e)
        else:
            first = "no timeout"
        dist.barrier()
        work.wait()
        reply = (first, work.is_completed(), got.tolist())
    else:
        dist.barrier()
        dist.send(torch.ones(3), 0, tag=9)
        reply = None
    dist.destroy_process_group()
    return reply


def test_wait_timeout_leaves_the_operation_running():
    first, completed, got = run_ranks(wait_with_timeout, 2, timeout_s=60)[0]
    assert "still running after waiting" in first, first
    assert completed and got == [1.0, 1.0, 1.0]
