"""CUDA buffers on the TCP and shared-memory collectives, staged through pinned host memory, on
the host with the fake CUDA runtime (tests/fakes/fake_cudart.c): its copies run only when the
host waits for them, so a result read before its copy-in finished, or written back other than
through the caller's stream, shows as wrong values here."""

from __future__ import annotations

import contextlib
import gc

import numpy as np
import pytest
from dist_helpers import run_ranks
from fake_cuda import (  # noqa: F401 - fake_cudart is a fixture
    COPY_CALLS,
    FakeCudaBuffer,
    caller_stream,
    fake_cudart,
    run_python,
    use_fake_runtime,
)

import pscore

STREAM = 0x5EED  # the caller's stream the ranks pretend torch has current
N = 300  # float32 elements: 1200 bytes, several chunks of CHUNK
CHUNK = 256


def _ops(rank: int, world: int, wrap, sync) -> dict[str, np.ndarray]:
    """Every collective and send/recv on buffers made by wrap(ndarray); the results as arrays
    once sync() has run the copies queued on the caller's stream."""
    base = np.arange(N, dtype=np.float32) * (rank + 1)
    bufs = {}

    def buf(name, array):
        bufs[name] = wrap(np.array(array))
        return bufs[name]

    pscore.all_reduce(buf("all_reduce", base))
    pscore.all_reduce(buf("all_reduce_max", base), op="max")
    pscore.broadcast(buf("broadcast", base), src=1)
    pscore.reduce(buf("reduce", base), dst=0)
    outs = [buf(f"all_gather{r}", np.zeros(N, np.float32)) for r in range(world)]
    pscore.all_gather(outs, buf("all_gather_in", base[:N]))
    flat = buf("all_gather_flat", np.zeros(N * world, np.float32))
    pscore.all_gather_into_tensor(flat, buf("all_gather_flat_in", base))
    pscore.reduce_scatter_tensor(
        buf("reduce_scatter", np.zeros(N, np.float32)),
        buf("reduce_scatter_in", np.concatenate([base + b for b in range(world)])),
    )
    pscore.all_to_all_single(
        buf("all_to_all", np.zeros(N * world, np.float32)),
        buf("all_to_all_in", np.concatenate([base + 1000 * b for b in range(world)])),
    )
    glist = (
        [buf(f"gather{r}", np.zeros(N, np.float32)) for r in range(world)] if rank == 0 else None
    )
    pscore.gather(buf("gather_in", base), glist, dst=0)
    slist = [buf(f"scatter_in{r}", base + r) for r in range(world)] if rank == 1 else None
    pscore.scatter(buf("scatter", np.zeros(N, np.float32)), slist, src=1)
    if rank == 0:
        pscore.send(buf("sent", base), dst=1)
        pscore.recv(buf("received", np.zeros(N, np.float32)), src=1)
    else:
        pscore.recv(buf("received", np.zeros(N, np.float32)), src=0)
        pscore.send(buf("sent", base + 7), dst=0)
    work = pscore.all_reduce(buf("all_reduce_async", base), async_op=True)
    work.wait()
    sync()
    return {k: np.array(getattr(v, "array", v)) for k, v in bufs.items()}


def _staged_vs_cpu(rank, world, fake_path):
    fake = use_fake_runtime(fake_path)
    with caller_stream(STREAM):
        staged = _ops(rank, world, FakeCudaBuffer, fake.synchronize)
    cpu = _ops(rank, world, lambda a: a, lambda: None)
    copies = fake.copies()
    return staged, cpu, copies, fake.log()


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_every_collective_on_cuda_buffers_gives_the_cpu_results(fake_cudart, transport):  # noqa: F811
    env = {"PSCORE_STAGING_CHUNK_BYTES": str(CHUNK)}
    results = run_ranks(_staged_vs_cpu, 2, fake_cudart, transport=transport, env=env)
    for rank, (staged, cpu, copies, log) in results.items():
        assert staged.keys() == cpu.keys()
        for name in cpu:
            np.testing.assert_array_equal(staged[name], cpu[name], err_msg=f"rank {rank} {name}")
        assert {c["stream"] for _, c in copies} == {STREAM}, "a copy off the caller's stream"
        assert not [line for line in log if line.startswith("VIOLATION")]


def _chunks_and_reuse(rank, _world, fake_path):
    fake = use_fake_runtime(fake_path)
    buf = FakeCudaBuffer(np.full(N, rank + 1, np.float32))
    with caller_stream(STREAM):
        pscore.all_reduce(buf)
        first = fake.calls()
        fake.reset()
        pscore.all_reduce(buf)
        second = fake.calls()
    fake.synchronize()
    return buf.array, first, second


def _kinds(calls):
    return [c["kind"] for name, c in calls if name in COPY_CALLS]


def test_large_buffers_move_in_chunks_through_reused_pinned_blocks(fake_cudart):  # noqa: F811
    env = {"PSCORE_STAGING_CHUNK_BYTES": str(CHUNK)}
    results = run_ranks(_chunks_and_reuse, 2, fake_cudart, env=env)
    chunks = -(-N * 4 // CHUNK)  # 5 chunks of 64 floats
    for array, first, second in results.values():
        np.testing.assert_array_equal(array, np.full(N, 6, np.float32))  # 1 + 2, then 3 + 3
        for calls in (first, second):
            kinds = _kinds(calls)
            assert kinds.count(2) == chunks and kinds.count(1) == chunks
            # Pipelined: the copies-in of the first chunks are queued before any copy back,
            # and each copy back follows its chunk's host collective, in chunk order.
            assert kinds[:3] == [2, 2, 2] and kinds.index(1) == 3
            back = [(name, c) for name, c in calls if name in COPY_CALLS and c["kind"] == 1]
            assert [c["bytes"] for _, c in back] == [64 * 4] * 4 + [(N - 4 * 64) * 4]
            # small copies to the device go in rows (cudaMemcpy2DAsync)
            assert {name for name, _ in back} == {"cudaMemcpy2DAsync"}
        allocs = [name for name, _ in first if name == "cudaHostAlloc"]
        assert len(allocs) == 3, "one pinned block per chunk in flight"
        assert not [name for name, _ in second if name == "cudaHostAlloc"], "blocks not reused"


def _result_only_through_the_stream(rank, _world, fake_path):
    fake = use_fake_runtime(fake_path)
    buf = FakeCudaBuffer(np.full(8, rank + 1, np.float32))
    with caller_stream(STREAM):
        pscore.all_reduce(buf)
    before = buf.array.copy()  # the copy back is queued on the stream, not run yet
    fake.synchronize()
    calls = fake.calls()
    order = [
        ("d2h" if c["kind"] == 2 else "h2d") if name in COPY_CALLS else name
        for name, c in calls
        if name in (*COPY_CALLS, "cudaEventQuery", "cudaStreamSynchronize")
    ]
    return before, buf.array, order


def test_the_copy_in_waits_for_the_stream_and_the_result_comes_back_on_it(fake_cudart):  # noqa: F811
    results = run_ranks(_result_only_through_the_stream, 2, fake_cudart)
    for rank, (before, after, order) in results.items():
        np.testing.assert_array_equal(before, np.full(8, rank + 1, np.float32))
        np.testing.assert_array_equal(after, np.full(8, 3, np.float32))
        # D2H queued, the host waits for it (event query), the H2D is queued after the
        # collective, and only the caller's synchronize runs it.
        assert order[0] == "d2h" and order[1] == "cudaEventQuery"
        assert order.index("h2d") > order.index("cudaEventQuery")
        assert order[-1] == "cudaStreamSynchronize"


def _failing_copy(_rank, _world, fake_path):
    fake = use_fake_runtime(fake_path)
    fake.fail("cudaMemcpyAsync", 700)
    try:
        pscore.all_reduce(FakeCudaBuffer(np.ones(4, np.float32)))
    except pscore.Error as e:
        return str(e)
    return "no error"


def test_a_cuda_error_names_the_operation_and_the_call(fake_cudart):  # noqa: F811
    for message in run_ranks(_failing_copy, 2, fake_cudart).values():
        assert message.startswith("all_reduce: cudaMemcpyAsync device to host of 16 bytes")
        assert "an illegal memory access was encountered (CUDA error 700)" in message


def _stuck_stream(rank, _world, fake_path):
    fake = use_fake_runtime(fake_path)
    fake.set_stuck(True)
    buf = FakeCudaBuffer(np.full(4, rank + 1, np.float32))
    messages, allocations = [], []
    for _ in range(2):
        fake.reset()
        try:
            pscore.all_reduce(buf)
        except pscore.TimeoutError as e:
            messages.append(str(e))
        allocations.append(len(fake.calls("cudaHostAlloc")))
    fake.set_stuck(False)
    fake.reset()
    pscore.all_reduce(buf)  # the group is still usable
    allocations.append(len(fake.calls("cudaHostAlloc")))
    fake.synchronize()
    return messages, allocations, buf.array, fake.log()


def test_a_stuck_stream_times_out_and_its_blocks_wait_for_it(fake_cudart):  # noqa: F811
    results = run_ranks(_stuck_stream, 2, fake_cudart, timeout=3.0)
    for messages, allocations, array, log in results.values():
        assert len(messages) == 2
        for message in messages:
            assert message.startswith("all_reduce: the copy of cuda:0 memory to the host did not")
            assert "within 3000 ms" in message
        # The second stuck call cannot have the first one's block (a copy is still queued on
        # it): it pins a new one; once the stream moved on, the next call reuses one.
        assert allocations == [1, 1, 0]
        np.testing.assert_array_equal(array, np.full(4, 3, np.float32))
        assert not [line for line in log if line.startswith("VIOLATION")]


def _mixed(_rank, world, fake_path):
    use_fake_runtime(fake_path)
    errors = []
    for outs, inp in [
        ([np.zeros(4, np.float32)] * world, FakeCudaBuffer(np.ones(4, np.float32))),
        (
            [FakeCudaBuffer(np.zeros(4, np.float32), device=1) for _ in range(world)],
            FakeCudaBuffer(np.ones(4, np.float32), device=0),
        ),
    ]:
        try:
            pscore.all_gather(outs, inp)
        except ValueError as e:
            errors.append(str(e))
    return errors


def test_mixed_devices_in_one_call_are_refused(fake_cudart):  # noqa: F811
    results = run_ranks(_mixed, 2, fake_cudart, env={"FAKE_CUDART_DEVICES": "2"})
    for errors in results.values():
        assert errors == [
            "all_gather: tensors on cuda:0 and cpu in one call; pass every tensor on one device",
            "all_gather: tensors on cuda:0 and cuda:1 in one call; pass every tensor on one device",
        ]


def _destroyed_while_stuck(rank, _world, fake_path):
    fake = use_fake_runtime(fake_path)
    done = FakeCudaBuffer(np.full(4, rank + 1, np.float32))
    pscore.all_reduce(done)
    fake.synchronize()  # its block is free again
    fake.set_stuck(True)
    big = FakeCudaBuffer(np.ones(1 << 16, np.float32))  # another block, left in flight
    with contextlib.suppress(pscore.TimeoutError):
        pscore.all_reduce(big)
    fake.reset()
    pscore.destroy_process_group()
    gc.collect()
    return fake.calls("cudaFreeHost"), fake.log()


def test_destroying_the_group_frees_only_the_blocks_no_copy_uses(fake_cudart):  # noqa: F811
    results = run_ranks(_destroyed_while_stuck, 2, fake_cudart, timeout=3.0)
    for frees, log in results.values():
        assert len(frees) == 1, log
        assert not [line for line in log if line.startswith("VIOLATION")]


def test_a_chunk_size_below_one_byte_is_refused_naming_the_variable(fake_cudart):  # noqa: F811
    result = run_python(
        "import numpy as np, pscore\n"
        "from fake_cuda import FakeCudaBuffer\n"
        "try:\n"
        "    pscore.buffer.view(FakeCudaBuffer(np.ones(4, np.float32)), host=None)\n"
        "except ValueError as e:\n"
        "    print(e)\n",
        fake_cudart,
        PSCORE_STAGING_CHUNK_BYTES="0",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "PSCORE_STAGING_CHUNK_BYTES=0: a chunk holds at least 1 byte"
