"""The NCCL backend on a real GPU (marked gpu; skip without one): every collective and the Work
semantics on CUDA tensors with world 1, stream order, a timeout through a stuck stream, and
multi-rank NCCL where there are two GPUs or more."""

from __future__ import annotations

import textwrap

import pytest
from dist_helpers import run_rank_scripts

import pscore

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
needs_two_gpus = pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"
)
SLEEP_CYCLES = 4_000_000_000  # torch.cuda._sleep: a few seconds of GPU clock cycles


def join(backend: str = "nccl", timeout: float = 60.0):
    return pscore.init_process_group(
        backend, init_method="tcp://127.0.0.1:0", rank=0, world_size=1, timeout=timeout
    )


@pytest.fixture
def world():
    """The default group of one rank on backend nccl; the test may make its own instead."""
    g = join()
    try:
        yield g
    finally:
        torch.cuda.synchronize()
        pscore.destroy_process_group()


def cuda(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype, device="cuda")


def test_every_collective_of_one_rank(world):
    assert world.nccl is not None
    x = cuda([1.0, 2.0, 3.0, 4.0])
    pscore.all_reduce(x)
    pscore.all_reduce(x, op="avg")
    pscore.all_reduce(x, op="max")
    pscore.broadcast(x, src=0)
    pscore.reduce(x, dst=0)
    flat, parts = torch.zeros(4, device="cuda"), [torch.zeros(4, device="cuda")]
    pscore.all_gather_into_tensor(flat, x)
    pscore.all_gather(parts, x)
    rs, rs_list = torch.zeros(4, device="cuda"), torch.zeros(4, device="cuda")
    pscore.reduce_scatter_tensor(rs, x)
    pscore.reduce_scatter(rs_list, [x])
    gathered, scattered = [torch.zeros(4, device="cuda")], torch.zeros(4, device="cuda")
    pscore.gather(x, gathered, dst=0)
    pscore.scatter(scattered, [x], src=0)
    a2a, a2a_single = [torch.zeros(4, device="cuda")], torch.zeros(4, device="cuda")
    pscore.all_to_all(a2a, [x])
    pscore.all_to_all_single(a2a_single, x)
    for out in [x, flat, parts[0], rs, rs_list, gathered[0], scattered, a2a[0], a2a_single]:
        assert out.tolist() == [1.0, 2.0, 3.0, 4.0]
    for dtype in (torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.int64):
        y = cuda([1, 2], dtype)
        pscore.all_reduce(y, op="sum")
        assert y.tolist() == [1, 2]


@pytest.mark.usefixtures("world")
def test_cpu_tensors_of_an_nccl_group_take_tcp():
    x = torch.ones(3)
    pscore.all_reduce(x)
    assert x.tolist() == [1.0, 1.0, 1.0]


@pytest.mark.usefixtures("world")
def test_a_kernel_queued_before_the_collective_is_seen_by_it():
    stream = torch.cuda.Stream()
    x = torch.zeros(1 << 20, device="cuda")
    out = torch.empty(1 << 20, device="cuda")
    # The group's first CUDA op makes its communicator, and a kernel's first launch loads its
    # module (CUDA's lazy loading), which waits for the device: either outlasts the sleep below.
    pscore.all_gather_into_tensor(out, x)
    torch.cuda._sleep(1)
    x.add_(0)
    torch.cuda.synchronize()
    with torch.cuda.stream(stream):
        torch.cuda._sleep(SLEEP_CYCLES // 8)  # the add runs late
        x.add_(1)
        work = pscore.all_gather_into_tensor(out, x, async_op=True)  # on `stream`, after add_
    assert not work.is_completed()  # returned once enqueued
    work.wait()  # the current (default) stream now waits for it on the GPU
    total = out.sum()  # a kernel on the default stream: sees the result
    assert total.item() == float(1 << 20)
    assert work.is_completed() and work.is_success()


@pytest.mark.usefixtures("world")
def test_blocking_calls_return_once_enqueued_and_order_on_the_stream():
    x = torch.zeros(1 << 16, device="cuda")
    torch.cuda._sleep(SLEEP_CYCLES // 8)
    x.add_(2)
    pscore.all_reduce(x)
    pscore.all_reduce(x, op="max")
    assert x.sum().item() == 2.0 * (1 << 16)


@pytest.mark.usefixtures("world")
def test_a_stuck_stream_times_out_naming_the_op_and_aborts():
    pscore.destroy_process_group()
    join(timeout=1.0)
    x = cuda([1.0])
    pscore.all_reduce(x, async_op=True).wait(timeout=30)
    torch.cuda._sleep(SLEEP_CYCLES)  # the stream reaches the next op after ~the timeout
    work = pscore.all_reduce(x, async_op=True)
    with pytest.raises(
        pscore.TimeoutError, match=r"nccl allreduce #2 \(group world, ranks \[0\]\)"
    ):
        work.wait(timeout=60)
    with pytest.raises(pscore.TimeoutError, match="the NCCL communicator was aborted"):
        pscore.all_reduce(x)


@pytest.mark.usefixtures("world")
def test_auto_sends_cuda_tensors_to_nccl():
    pscore.destroy_process_group()
    assert join("auto").nccl is not None
    x = cuda([3.0])
    work = pscore.all_reduce(x, async_op=True)
    assert isinstance(work, pscore.collectives.nccl_link.NcclWork)
    work.wait()
    assert x.item() == 3.0


RANK = textwrap.dedent(
    """
    import sys
    import torch
    import pscore
    from pscore.store import TCPStore

    rank, port = int(sys.argv[1]), int(sys.argv[2])
    torch.cuda.set_device(rank)
    store = TCPStore("127.0.0.1", port, is_master=False, timeout=60)
    pscore.init_process_group("nccl", store=store, rank=rank, world_size=2, timeout=60)
    first = torch.full((3,), 5.0, device="cuda") if rank == 0 else torch.zeros(3, device="cuda")
    if rank == 0:  # a send/recv before any collective: the pair's own communicator
        pscore.send(first, dst=1)
    else:
        pscore.recv(first, src=0)
        assert first.tolist() == [5.0] * 3
    x = torch.full((1000,), float(rank + 1), device="cuda")
    pscore.all_reduce(x)
    assert x[0].item() == 3.0, x
    y = torch.full((8,), float(rank), device="cuda")
    pscore.broadcast(y, src=1)
    assert y.tolist() == [1.0] * 8
    parts = [torch.zeros(2, device="cuda") for _ in range(2)]
    pscore.all_gather(parts, torch.full((2,), float(rank), device="cuda"))
    assert [p.tolist() for p in parts] == [[0.0, 0.0], [1.0, 1.0]]
    out = torch.zeros(2, device="cuda")
    pscore.reduce_scatter(out, [torch.ones(2, device="cuda"), torch.full((2,), 2.0, device="cuda")])
    assert out.tolist() == [2.0 * (rank + 1)] * 2
    gathered = [torch.zeros(1, device="cuda") for _ in range(2)] if rank == 0 else None
    pscore.gather(torch.full((1,), float(rank), device="cuda"), gathered, dst=0)
    if rank == 0:
        assert [g.item() for g in gathered] == [0.0, 1.0]
    a2a = torch.zeros(2, device="cuda")
    pscore.all_to_all_single(a2a, torch.tensor([10.0 * rank, 10.0 * rank + 1], device="cuda"))
    assert a2a.tolist() == [float(rank), 10.0 + rank]
    z = torch.full((4,), 7.0, device="cuda") if rank == 0 else torch.zeros(4, device="cuda")
    if rank == 0:
        pscore.send(z, dst=1)
    else:
        assert pscore.recv(z, src=0) == 0
        assert z.tolist() == [7.0] * 4
    try:  # the ranks disagree: the header check says so instead of hanging
        pscore.all_reduce(torch.ones(4 + rank, device="cuda"))
    except ValueError as e:
        assert "the ranks' calls differ" in str(e), e
    else:
        raise AssertionError("no header check")
    torch.cuda.synchronize()
    pscore.destroy_process_group()
    print("OK", rank)
    """
)


@needs_two_gpus
def test_two_ranks_on_two_gpus():
    outs = run_rank_scripts(RANK, 2, 300)
    for r, out in enumerate(outs):
        assert f"OK {r}" in out, out
