"""pscore as a torch.distributed backend: unmodified DDP code trains to the same weights as on
gloo, and the torch.distributed collectives dispatch to pscore."""

import multiprocessing as mp
import os
import socket

import pytest
import torch
import torch.distributed as dist

import pscore.torch_backend  # noqa: F401 - registers "pscore"

_ctx = mp.get_context("fork")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ddp_train(rank, world, backend, port, queue):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group(backend, rank=rank, world_size=world)
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
    queue = _ctx.Queue()
    port = free_port()
    procs = [
        _ctx.Process(target=ddp_train, args=(r, world, backend, port, queue)) for r in range(world)
    ]
    for p in procs:
        p.start()
    out = {r: (w, b) for r, w, b in (queue.get(timeout=120) for _ in procs)}
    for p in procs:
        p.join(10)
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
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        import datetime

        dist.init_process_group(
            "pscore", rank=rank, world_size=world, timeout=datetime.timedelta(seconds=2)
        )
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
    queue = _ctx.Queue()
    port = free_port()
    procs = [_ctx.Process(target=silent_peer, args=(r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    out = dict(queue.get(timeout=60)[:2] for _ in procs)
    for p in procs:
        p.join(10)
    assert "rank 0 <- rank 1: allreduce #" in out[0] and "timed out after 2000 ms" in out[0], out
