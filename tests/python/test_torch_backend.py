"""pscore as a torch.distributed backend: unmodified DDP code trains to the same weights as on
gloo, and the torch.distributed collectives dispatch to pscore."""

import datetime
import multiprocessing as mp

import pytest
import torch
import torch.distributed as dist

import pscore.torch_backend  # noqa: F401 - registers "pscore"

_ctx = mp.get_context("fork")


def parent_store():
    """A torch TCPStore served by the test process on a port the kernel picked, so no rank
    races another process for a port probed earlier."""
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def init(backend, rank, world, port, timeout_s):
    timeout = datetime.timedelta(seconds=timeout_s)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)


def run_ranks(target, world, *args, timeout_s):
    """Runs target(rank, world, *args, port, queue) in forked ranks; returns {rank: reply}.
    Ranks still running when the replies are in, or the time is up, are killed."""
    store = parent_store()
    queue = _ctx.Queue()
    procs = [
        _ctx.Process(target=target, args=(r, world, *args, store.port, queue)) for r in range(world)
    ]
    try:
        for p in procs:
            p.start()
        replies = [queue.get(timeout=timeout_s) for _ in procs]
        for p in procs:
            p.join(10)
        return {reply[0]: reply[1:] for reply in replies}
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
                p.join()


def ddp_train(rank, world, backend, port, queue):
    try:
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
        assert all(
            torch.equal(o, torch.arange(6, dtype=torch.float32) + r) for r, o in enumerate(outs)
        )
        queue.put((rank, flat.numpy().copy(), dist.get_backend()))
        dist.destroy_process_group()
    except BaseException as e:  # noqa: BLE001
        queue.put((rank, repr(e), None))


def run(backend, world):
    out = run_ranks(ddp_train, world, backend, timeout_s=120)
    for r, (w, b) in out.items():
        assert b is not None, f"rank {r}: {w}"
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_matches_gloo(world):
    ours = run("pscore", world)
    gloo = run("gloo", world)
    assert {b for _, b in ours.values()} == {"pscore"}
    for r in range(world):
        assert (ours[r][0] == ours[0][0]).all(), "pscore ranks diverged"
        assert torch.allclose(
            torch.from_numpy(ours[r][0]), torch.from_numpy(gloo[r][0]), rtol=1e-5, atol=1e-6
        )


def silent_peer(rank, world, port, queue):
    try:
        init("pscore", rank, world, port, timeout_s=2)
        if rank == 1:
            import time

            time.sleep(4)  # alive but silent
            queue.put((rank, "slept", None))
            return
        try:
            dist.all_reduce(torch.ones(4))
            queue.put((rank, "no error", None))
        except Exception as e:  # noqa: BLE001 - reported to the test
            queue.put((rank, f"{type(e).__name__}: {e}", None))
    except BaseException as e:  # noqa: BLE001
        queue.put((rank, repr(e), None))


def test_failure_reaches_the_torch_caller():
    out = {r: reply[0] for r, reply in run_ranks(silent_peer, 2, timeout_s=60).items()}
    assert "rank 0 <- rank 1: allreduce #" in out[0] and "timed out after 2000 ms" in out[0], out
