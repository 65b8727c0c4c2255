"""The collectives on one tensor split by rank (all_gather_into_tensor, reduce_scatter_tensor,
all_to_all_single): the core splits the whole buffer (csrc/bindings/rank_blocks.h), into uneven
and empty blocks too, checks the sizes itself, and stages a CUDA buffer whole."""

from __future__ import annotations

import numpy as np
from dist_helpers import run_ranks
from fake_cuda import (  # noqa: F401 - fake_cudart is a fixture
    FakeCudaBuffer,
    caller_stream,
    fake_cudart,
    use_fake_runtime,
)

import pscore
from pscore.buffer import device_view
from pscore.collectives.group import resolve

STREAM = 0x5EED


def _rows(sender: int, receiver: int) -> int:
    """Rows of 2 elements `sender` sends `receiver`: 0, 1 or 2 (some blocks empty)."""
    return (sender + 2 * receiver) % 3


def _exchange(rank: int, world: int, wrap) -> dict:
    """Every single-tensor collective on buffers made by wrap(ndarray), uneven and empty blocks
    included; the buffers by name."""
    sends = [_rows(rank, p) for p in range(world)]
    recvs = [_rows(p, rank) for p in range(world)]
    blocks = [np.full((n, 2), 10 * rank + p, np.float32) for p, n in enumerate(sends)]
    bufs = {
        "uneven": wrap(np.full((sum(recvs), 2), -1, np.float32)),
        "empty": wrap(np.zeros((0, 2), np.float32)),
        "gathered": wrap(np.zeros(3 * world, np.float32)),
        "scattered": wrap(np.zeros(3, np.float32)),
        "gathered_empty": wrap(np.zeros(0, np.float32)),
    }
    pscore.all_to_all_single(bufs["uneven"], wrap(np.concatenate(blocks)), recvs, sends)
    empty_in = wrap(np.zeros((0, 2), np.float32))
    pscore.all_to_all_single(bufs["empty"], empty_in, [0] * world, [0] * world)
    pscore.all_gather_into_tensor(bufs["gathered"], wrap(np.arange(3, dtype=np.float32) + rank))
    whole = np.arange(3 * world, dtype=np.float32) * (rank + 1)
    pscore.reduce_scatter_tensor(bufs["scattered"], wrap(whole))
    pscore.all_gather_into_tensor(bufs["gathered_empty"], wrap(np.zeros(0, np.float32)))
    return bufs


def _expected(rank: int, world: int) -> dict:
    recvs = [_rows(p, rank) for p in range(world)]
    from_each = [np.full((n, 2), 10 * p + rank, np.float32) for p, n in enumerate(recvs)]
    total = sum(r + 1 for r in range(world))
    return {
        "uneven": np.concatenate(from_each),
        "empty": np.zeros((0, 2), np.float32),
        "gathered": np.concatenate([np.arange(3, dtype=np.float32) + p for p in range(world)]),
        "scattered": np.arange(3 * rank, 3 * rank + 3, dtype=np.float32) * total,
        "gathered_empty": np.zeros(0, np.float32),
    }


def _on_host(rank, world):
    got = _exchange(rank, world, lambda a: a)
    # The native call with element counts, as the torch backend's ranks reach it.
    sends = [2 * _rows(rank, p) for p in range(world)]
    recvs = [2 * _rows(p, rank) for p in range(world)]
    inp = np.concatenate([np.full(n, 10 * rank + p, np.float32) for p, n in enumerate(sends)])
    out = np.full(sum(recvs), -1, np.float32)
    resolve(None).native.all_to_all_single(
        device_view(inp, False), device_view(out), sends, recvs, False
    )
    got["native_uneven"] = out.reshape(-1, 2)
    # split sizes as numpy integers (through __index__)
    rows = np.array([_rows(rank, p) for p in range(world)]), np.array([r // 2 for r in recvs])
    got["numpy_sizes"] = np.full((sum(recvs) // 2, 2), -1, np.float32)
    pscore.all_to_all_single(got["numpy_sizes"], inp.reshape(-1, 2), rows[1], rows[0])
    return got


def test_uneven_and_empty_blocks_on_three_ranks():
    for rank, got in run_ranks(_on_host, 3).items():
        want = _expected(rank, 3)
        want["native_uneven"] = want["numpy_sizes"] = want["uneven"]
        assert got.keys() == want.keys()
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"rank {rank} {name}")


def _refusal(call) -> str:
    """The ValueError or TypeError (a dtype mismatch) call() raises, as text."""
    try:
        call()
    except (ValueError, TypeError) as e:
        return str(e)
    return "no error"


def _core_refusals(rank, world):
    """The core's own checks, which the CPU path meets first (Python passes the buffers on)."""
    native = resolve(None).native
    three, five = device_view(np.ones(3, np.float32)), device_view(np.zeros(5, np.float32))
    four, f64 = device_view(np.zeros(4, np.float32)), device_view(np.zeros(6))
    calls = [
        lambda: native.allgather_into(three, five, False),
        lambda: native.allgather_into(three, f64, False),
        lambda: native.reduce_scatter_from(five, three, pscore._types.ReduceOp.SUM, False),
        lambda: native.all_to_all_single(three, three, None, None, False),
        lambda: native.all_to_all_single(three, four, [1, 1], None, False),
        lambda: native.all_to_all_single(three, four, [1, 2], [2, 2, 0], False),
    ]
    messages = [_refusal(call) for call in calls]
    out = np.zeros(2 * world, np.float32)  # the group is still usable
    native.allgather_into(device_view(np.full(2, rank, np.float32)), device_view(out), False)
    return messages, out


def test_the_core_refuses_sizes_that_do_not_split_naming_the_operation():
    for messages, out in run_ranks(_core_refusals, 2).values():
        assert messages == [
            "all_gather_into_tensor: output has 5 elements, expected 2 x 3",
            "all_gather_into_tensor: output is float64, input is float32",
            "reduce_scatter_tensor: input has 5 elements, expected 2 x 3",
            "all_to_all_single: input's first dimension 3 is not divisible by the group size 2",
            "all_to_all_single: input of 3 elements: 2 counts summing to 2, expected 2 "
            "summing to 3",
            "all_to_all_single: output of 4 elements: 3 counts summing to 4, expected 2 "
            "summing to 4",
        ]
        np.testing.assert_array_equal(out, [0, 0, 1, 1])


def _python_refusals(_rank, _world):
    messages = [
        _refusal(lambda s=sizes: pscore.all_to_all_single(np.zeros(2), np.zeros(2), None, s))
        for sizes in ([3, -1], [1], [1, 0])
    ]
    messages.append(_refusal(lambda: pscore.all_to_all_single(np.zeros((3, 2)), np.zeros((3, 2)))))
    return messages


def test_split_sizes_that_do_not_cover_the_first_dimension_are_refused():
    for messages in run_ranks(_python_refusals, 2).values():
        assert messages == [
            "input split sizes [3, -1] must have 2 entries >= 0 summing to 2",
            "input split sizes [1] must have 2 entries >= 0 summing to 2",
            "input split sizes [1, 0] must have 2 entries >= 0 summing to 2",
            # equal splits are the core's to check (the call's latency path)
            "all_to_all_single: input's first dimension 3 is not divisible by the group size 2",
        ]


def _staged(rank, world, fake_path):
    fake = use_fake_runtime(fake_path)
    with caller_stream(STREAM):
        bufs = _exchange(rank, world, FakeCudaBuffer)
        out = FakeCudaBuffer(np.zeros(2 * world, np.float32))
        mixed = _refusal(lambda: pscore.all_gather_into_tensor(out, np.ones(2, np.float32)))
    fake.synchronize()
    copies = fake.copies()
    return {k: v.array.copy() for k, v in bufs.items()}, mixed, copies, fake.log()


def test_cuda_buffers_are_staged_whole_and_split_on_the_host(fake_cudart):  # noqa: F811
    results = run_ranks(_staged, 2, fake_cudart)
    for rank, (got, mixed, copies, log) in results.items():
        want = _expected(rank, 2)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"rank {rank} {name}")
        assert mixed.startswith("all_gather_into_tensor: tensors on ")
        assert {c["stream"] for _, c in copies} == {STREAM}, "a copy off the caller's stream"
        # One copy each way per non-empty buffer: whole, not one per rank's block.
        assert len(copies) == 6
        assert not [line for line in log if line.startswith("VIOLATION")]


def _objects_as_passed(rank, world):
    """The core views what the caller passed (bindings/user_buffer.h): a torch tensor before
    pscore.buffer has met one, numpy arrays and BufferViews; anything else goes through
    pscore.buffer, whose error names the argument."""
    import torch

    native, total = resolve(None).native, pscore._types.ReduceOp.SUM
    first = torch.full((2,), float(rank + 1))  # the first tensor this process hands pscore
    native.allreduce(first, total, False)
    array, view = np.full(3, rank + 1, np.int64), device_view(np.full(4, rank + 1.0))
    native.allreduce(array, total, False)
    native.allreduce(view, total, False)
    gathered = torch.zeros((world, 2), dtype=torch.int32)
    native.allgather_into(torch.full((2,), rank, dtype=torch.int32), gathered, False)
    # The methods' refusals and _C.fast_calls' functions' (the latency path's).
    refusals = {"method": _refusals(native, rank), "function": _refusals(resolve(None).core, rank)}
    return first.tolist(), array.tolist(), view.owner.tolist(), gathered.tolist(), refusals


def _refusals(calls, rank: int) -> list[str]:
    """What the group's collectives `calls` raise for buffers they cannot take."""
    import torch

    read_only = np.zeros(4, np.float32)
    read_only.flags.writeable = False
    total, bxor = pscore._types.ReduceOp.SUM, pscore._types.ReduceOp.BXOR
    return [
        _refusal(lambda: calls.allreduce([1.0, 2.0], total, False)),
        _refusal(lambda: calls.allgather_into(np.ones(2, np.float32), read_only, False)),
        _refusal(lambda: calls.broadcast(torch.ones(4)[::2], 0, False)),
        _refusal(lambda: calls.allreduce(torch.ones(2), bxor, False)),
        _refusal(lambda: calls.gather(np.ones(2), [np.ones(2)], rank, False)),
    ]


def test_the_core_views_the_objects_the_caller_passed():
    for first, array, view, gathered, refusals in run_ranks(_objects_as_passed, 2).values():
        assert (first, array, view) == ([3.0, 3.0], [3, 3, 3], [3.0] * 4)
        assert gathered == [[0, 0], [1, 1]]
        assert refusals["function"] == refusals["method"], "the latency path refuses otherwise"
        assert refusals["method"] == [
            "tensor: expected a numpy array or a torch tensor (or a __dlpack__ object), got list",
            "output is read-only; the operation writes its result in place",
            "tensor is not contiguous; call .contiguous() or np.ascontiguousarray first "
            "(strides (2,) elements are not C-contiguous for shape (2,))",
            "reduce op bxor needs an integer dtype, got float32",
            "gather: the destination needs a gather_list of 2 tensors",
        ]
