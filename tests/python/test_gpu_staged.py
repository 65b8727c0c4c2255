"""CUDA tensors on pscore's TCP and shared-memory paths on a real GPU, staged through pinned host
memory: every collective with 2 and 4 ranks on one device against the same calls on CPU
tensors, stream order with a real kernel, PSClient push/pull, and DDP on a CUDA model through
the pscore torch backend against DDP on gloo. Marked gpu: they skip without a CUDA device
(benchmarks/gpu_check.sh runs them on one). Ranks are spawned: the test process never
initializes CUDA."""

from __future__ import annotations

import datetime
import os

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist
from torch_ranks import KEEP_ALIVE, run_ranks
from torch_ranks import init as init_torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]

N = 100_000  # float32 elements: 400 KB, several staging chunks of CHUNK
CHUNK = 64 << 10
TIMEOUT_S = 120


def _join_pscore(rank, world, port, transport="tcp"):
    os.environ["PSCORE_TRANSPORT"] = transport
    os.environ["PSCORE_STAGING_CHUNK_BYTES"] = str(CHUNK)
    import pscore
    from pscore.store.torch_store import TorchStore

    timeout = datetime.timedelta(seconds=TIMEOUT_S)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    pscore.init_process_group(store=TorchStore(store), rank=rank, world_size=world, timeout=60)
    torch.cuda.set_device(0)
    return pscore


def _every_op(pscore, rank, world, device):
    """Every collective and send/recv on `device` tensors; the results on the CPU."""
    base = torch.arange(N, dtype=torch.float32, device=device) * (rank + 1)
    zeros = lambda n=N: torch.zeros(n, device=device)  # noqa: E731
    out = {}
    t = base.clone()
    pscore.all_reduce(t)
    out["all_reduce"] = t
    t = base.clone()
    pscore.all_reduce(t, op="max")
    out["all_reduce_max"] = t
    t = base.clone()
    pscore.broadcast(t, src=world - 1)
    out["broadcast"] = t
    t = base.clone()
    pscore.reduce(t, dst=0)
    out["reduce"] = t
    outs = [zeros() for _ in range(world)]
    pscore.all_gather(outs, base)
    out["all_gather"] = torch.cat(outs)
    flat = zeros(N * world)
    pscore.all_gather_into_tensor(flat, base)
    out["all_gather_into_tensor"] = flat
    t = zeros()
    pscore.reduce_scatter_tensor(t, torch.cat([base + b for b in range(world)]))
    out["reduce_scatter"] = t
    t = zeros(N * world)
    pscore.all_to_all_single(t, torch.cat([base + 1000 * b for b in range(world)]))
    out["all_to_all"] = t
    glist = [zeros() for _ in range(world)] if rank == 0 else None
    pscore.gather(base, glist, dst=0)
    out["gather"] = torch.cat(glist) if glist else base
    slist = [base + r for r in range(world)] if rank == 1 else None
    t = zeros()
    pscore.scatter(t, slist, src=1)
    out["scatter"] = t
    received = zeros()
    send_to, recv_from = (rank + 1) % world, (rank - 1) % world
    if rank % 2 == 0:
        pscore.send(base, dst=send_to)
        pscore.recv(received, src=recv_from)
    else:
        pscore.recv(received, src=recv_from)
        pscore.send(base, dst=send_to)
    out["send_recv"] = received
    t = base.clone()
    pscore.all_reduce(t, async_op=True).wait()
    out["all_reduce_async"] = t
    if device == "cuda":
        torch.cuda.synchronize()
    return {k: v.cpu() for k, v in out.items()}


def _cuda_against_cpu(rank, world, transport, port):
    pscore = _join_pscore(rank, world, port, transport)
    return _every_op(pscore, rank, world, "cuda"), _every_op(pscore, rank, world, "cpu")


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("world", [2, 4])
def test_every_collective_on_cuda_tensors_gives_the_cpu_results(world, transport):
    replies = run_ranks(_cuda_against_cpu, world, transport, timeout_s=300)
    for rank, (cuda, cpu) in replies.items():
        for name in cpu:
            torch.testing.assert_close(cuda[name], cpu[name], msg=f"rank {rank}: {name}")


def _stream_order(rank, world, port):
    pscore = _join_pscore(rank, world, port)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        t = torch.zeros(N, device="cuda")
        torch.cuda._sleep(200_000_000)  # the stream is busy for a while before the add
        t.add_(rank + 1)
        pscore.all_reduce(t)  # must see the add queued before it
        t.mul_(2)  # queued after the call: must see the reduced values
    stream.synchronize()
    return t.cpu()


def test_a_kernel_queued_before_the_collective_is_seen_and_one_after_sees_it():
    world = 2
    for t in run_ranks(_stream_order, world, timeout_s=TIMEOUT_S).values():
        assert torch.equal(t, torch.full((N,), 2.0 * sum(range(1, world + 1))))


def _ps_push_pull(rank, world, port):
    del rank, world, port
    torch.cuda.set_device(0)
    from test_ps_support import addresses, start_cluster, stop_cluster

    from pscore.ps import SGD, PSClient

    servers = start_cluster(2)
    client = PSClient(addresses(servers), worker_id=0)
    results = {}
    for device in ("cuda", "cpu"):
        dense, sparse = f"{device}_d", f"{device}_s"
        client.create_dense(dense, (1000, 8), optimizer=SGD(lr=0.5))
        client.create_sparse(sparse, 16, optimizer=SGD(lr=1.0))
        client.push(dense, torch.arange(8000.0, device=device).reshape(1000, 8))
        pulled = torch.zeros(1000, 8, device=device)
        client.pull(dense, pulled)
        ids = torch.tensor([3, 9, 3, 100_000], device=device)
        client.push_sparse(sparse, ids, torch.ones(4, 16, device=device))
        rows = client.pull_sparse(sparse, ids, torch.zeros(4, 16, device=device))
        both = torch.zeros(4, 16, device=device)
        client.push_pull_sparse(sparse, ids, torch.full((4, 16), 2.0, device=device), both)
        torch.cuda.synchronize()
        results[device] = [pulled.cpu(), rows.cpu(), both.cpu()]
    client.close()
    stop_cluster(servers)
    return results


def test_ps_push_and_pull_of_cuda_tensors_give_the_cpu_results():
    results = run_ranks(_ps_push_pull, 1, timeout_s=TIMEOUT_S)[0]
    for got, want in zip(results["cuda"], results["cpu"]):
        assert torch.equal(got, want)
    assert results["cpu"][0][0, 1].item() == -0.5  # the update went through


def _ddp(rank, world, backend, port):
    init_torch(backend, rank, world, port, TIMEOUT_S)
    torch.cuda.set_device(0)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)
    ).cuda()
    ddp = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0], bucket_cap_mb=0.005)
    KEEP_ALIVE.append(ddp)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    data = torch.Generator().manual_seed(100 + rank)
    for _ in range(5):
        x = torch.randn(16, 32, generator=data).cuda()
        y = torch.randn(16, 4, generator=data).cuda()
        opt.zero_grad()
        ((ddp(x) - y) ** 2).mean().backward()
        opt.step()
    torch.cuda.synchronize()
    return [p.detach().cpu() for p in model.parameters()]


def test_ddp_on_a_cuda_model_through_pscore_matches_gloo():
    ours = run_ranks(_ddp, 2, "pscore", timeout_s=TIMEOUT_S)
    gloo = run_ranks(_ddp, 2, "gloo", timeout_s=TIMEOUT_S)
    for rank in range(2):
        for a, b in zip(ours[rank], gloo[rank]):
            torch.testing.assert_close(a, b)
    for a, b in zip(ours[0], ours[1]):
        assert torch.equal(a, b), "the ranks' weights diverged"
