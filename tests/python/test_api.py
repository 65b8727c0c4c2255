"""The torch.distributed-style API: p2p, async work, groups, numpy and torch inputs, bad input."""

import os
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
from dist_helpers import run_ranks

import pscore


def p2p(rank, world):
    right, left = (rank + 1) % world, (rank - 1) % world
    out = torch.arange(1000, dtype=torch.float64) + rank
    got = torch.empty(1000, dtype=torch.float64)
    # Both directions at once, large enough to fill socket buffers if they were blocking.
    big_out = np.full(3_000_000, rank, np.int32)
    big_in = np.empty(3_000_000, np.int32)
    works = [
        pscore.isend(out, right, tag=7),
        pscore.irecv(got, left, tag=7),
        pscore.isend(big_out, right),
        pscore.irecv(big_in, left),
    ]
    for w in works:
        assert w.wait(timeout=30)
    assert torch.equal(got, torch.arange(1000, dtype=torch.float64) + left)
    assert (big_in == left).all()
    # Blocking forms, ordered messages between a pair.
    if rank == 0:
        for i in range(5):
            pscore.send(np.full(3, i, np.int64), 1)
    elif rank == 1:
        for i in range(5):
            buf = np.empty(3, np.int64)
            assert pscore.recv(buf, 0) == 0
            assert (buf == i).all()
    return True


def test_point_to_point():
    assert all(run_ranks(p2p, 3).values())


def from_any_source(rank, world):
    """Ranks 1.. send 3 numbered messages each, staggered; rank 0 takes them as they come, with
    src=None, then once more from a named source; a sender's messages keep their order."""
    if rank > 0:
        time.sleep(0.05 * (world - rank))  # the highest rank sends first
        for i in range(3):
            pscore.send(np.full(5, 100 * rank + i, np.int64), 0)
        pscore.send(np.full(5, -rank, np.int64), 0, tag=9)
        return None
    seen = {r: [] for r in range(1, world)}
    buf = np.empty(5, np.int64)
    for _ in range(3 * (world - 1)):
        src = pscore.recv(buf, None)
        assert (buf == buf[0]).all() and buf[0] // 100 == src, (src, buf)
        seen[src].append(int(buf[0]) % 100)
    tagged = np.empty(5, np.int64)
    work = pscore.irecv(tagged, None, tag=9)  # skips no one: every sender's next has tag 9
    work.wait(timeout=30)
    first = work.source_rank()
    assert first in seen and (tagged == -first).all()
    for r in range(1, world):
        if r != first:
            assert pscore.recv(buf, r, tag=9) == r and (buf == -r).all()
    return seen


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_receive_from_any_source(transport):
    seen = run_ranks(from_any_source, 4, transport=transport)[0]
    assert seen == {r: [0, 1, 2] for r in range(1, 4)}, seen


def any_source_times_out(rank, _world):
    buf = np.zeros(4, np.float32)
    if rank == 0:
        start = time.monotonic()
        with pytest.raises(
            pscore.TimeoutError, match=r"recv from any source \(tag 0\) timed out after 3000 ms"
        ):
            pscore.recv(buf, None)
        assert time.monotonic() - start < 5
    else:
        time.sleep(3.5)  # sends nothing within rank 0's timeout
    x = np.ones(4, np.float32)
    pscore.all_reduce(x)  # nothing was consumed: the group still works
    return float(x[0])


def test_receive_from_any_source_times_out_and_leaves_the_group_usable():
    assert run_ranks(any_source_times_out, 2, timeout=3) == {0: 2.0, 1: 2.0}


def any_source_peer_dies(rank, _world):
    if rank == 1:
        time.sleep(0.3)
        os._exit(3)  # dies without sending
    if rank == 2:
        time.sleep(1.5)
        return None
    start = time.monotonic()
    with pytest.raises(ConnectionError, match="rank 1") as info:
        pscore.recv(np.zeros(4, np.float32), None)
    return str(info.value), time.monotonic() - start


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_receive_from_any_source_names_a_peer_that_died(transport):
    msg, elapsed = run_ranks(
        any_source_peer_dies, 3, transport=transport, timeout=6, expect_dead=[1]
    )[0]
    assert elapsed < 6, msg


def _exchange_with_a_wrong_tag(rank, buf):
    if rank == 0:
        pscore.send(buf, 1, tag=1)
        pscore.recv(buf, 1)  # rank 1 breaks the group and tells us
    else:
        pscore.recv(buf, 0, tag=2)


def tag_mismatch(rank, _world):
    buf = np.zeros(4, np.float32)
    with pytest.raises(
        ConnectionError, match="tag mismatch: the peer sent tag 1, this rank expects 2"
    ):
        _exchange_with_a_wrong_tag(rank, buf)
    return True


def test_tag_mismatch():
    run_ranks(tag_mismatch, 2, timeout=5)


def async_ops(rank, world):
    xs = [np.full(100_000, rank + i, np.float32) for i in range(4)]
    works = [pscore.all_reduce(x, async_op=True) for x in xs]
    y = np.full(10, rank, np.int64)
    pscore.broadcast(y, src=1)  # a blocking call after queued async ones keeps the order
    for w in works:
        w.wait()
        assert w.is_completed() and w.is_success() and w.exception() is None
    total = sum(range(world))
    for i, x in enumerate(xs):
        assert (x == total + world * i).all()
    assert (y == 1).all()
    b = pscore.barrier(async_op=True)
    assert b.wait()
    return True


def test_async_work_handles():
    assert all(run_ranks(async_ops, 3).values())


def async_failure(rank, _world):
    if rank == 1:
        time.sleep(3.0)  # alive but silent
        return True
    w = pscore.all_reduce(np.ones(4, np.float32), async_op=True)
    with pytest.raises(pscore.TimeoutError, match="still running"):
        w.wait(timeout=0.05)
    with pytest.raises(pscore.TimeoutError, match="rank 0 <- rank 1: allreduce #0 timed out"):
        w.wait()
    assert w.is_completed() and not w.is_success()
    assert isinstance(w.exception(), TimeoutError)
    return True


def test_async_failure_is_reported_by_wait():
    run_ranks(async_failure, 2, timeout=1.5)


def subgroups(rank, world):
    evens = pscore.new_group([0, 2])
    odds = pscore.new_group([1, 3])
    mine = evens if rank % 2 == 0 else odds
    other = odds if rank % 2 == 0 else evens
    assert other is pscore.NON_GROUP_MEMBER
    assert pscore.get_world_size(mine) == 2 and pscore.get_rank(mine) == rank // 2
    x = np.array([rank], np.int64)
    pscore.all_reduce(x, group=mine)
    assert x[0] == (2 if rank % 2 == 0 else 4)
    pscore.all_reduce(x, group=other)  # not a member: a no-op
    y = np.array([rank], np.int64)
    pscore.broadcast(y, src=3 if rank % 2 else 2, group=mine)  # src is a global rank
    assert y[0] == (3 if rank % 2 else 2)
    z = np.array([1], np.int64)
    pscore.all_reduce(z)  # the default group still works
    assert z[0] == world
    return True


def test_new_group():
    assert all(run_ranks(subgroups, 4).values())


def single_and_splits(rank, world):
    inp = torch.arange(6 * world, dtype=torch.int32).reshape(2 * world, 3) + 100 * rank
    out = torch.empty_like(inp)
    pscore.all_to_all_single(out, inp)
    for p in range(world):
        want = (
            torch.arange(6 * world, dtype=torch.int32).reshape(2 * world, 3)[
                2 * rank : 2 * rank + 2
            ]
            + 100 * p
        )
        assert torch.equal(out[2 * p : 2 * p + 2], want)
    # uneven splits: rank r sends r+1 rows to everyone
    send = torch.full((world * (rank + 1), 2), rank, dtype=torch.float32)
    recv = torch.empty((sum(p + 1 for p in range(world)), 2), dtype=torch.float32)
    pscore.all_to_all_single(recv, send, [p + 1 for p in range(world)], [rank + 1] * world)
    at = 0
    for p in range(world):
        assert (recv[at : at + p + 1] == p).all()
        at += p + 1
    return True


def test_all_to_all_single_with_splits():
    assert all(run_ranks(single_and_splits, 3).values())


def bad_input(rank, _world):
    with pytest.raises(ValueError, match="not contiguous"):
        pscore.all_reduce(torch.ones(4, 4).t())
    with pytest.raises(TypeError, match="dtype bool is not supported"):
        pscore.all_reduce(np.ones(3, bool))
    with pytest.raises(TypeError, match="expected a numpy array or a torch tensor"):
        pscore.all_reduce([1, 2, 3])
    read_only = np.ones(3)
    read_only.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        pscore.all_reduce(read_only)
    with pytest.raises(ValueError, match="reduce op 'median' is not supported"):
        pscore.all_reduce(np.ones(3), op="median")
    # reduce takes the caller's buffer as all_reduce does.
    with pytest.raises(ValueError, match="not contiguous"):
        pscore.reduce(torch.ones(4, 4).t(), dst=0)
    with pytest.raises(ValueError, match="read-only"):
        pscore.reduce(read_only, dst=0)
    with pytest.raises(ValueError, match="dst 5 is not in group"):
        pscore.reduce(np.ones(3), dst=5)
    summed = np.full(3, rank + 1.0)
    pscore.reduce(summed, dst=1)
    assert summed.tolist() == ([1.0] * 3 if rank == 0 else [3.0] * 3)
    with pytest.raises(ValueError, match="tensor_list has 1 entries, the group has 2 ranks"):
        pscore.all_gather([np.ones(3)], np.ones(3))
    with pytest.raises(TypeError, match=r"tensor_list\[1\] is float32, expected float64"):
        pscore.all_gather([np.ones(3), np.ones(3, np.float32)], np.ones(3))
    with pytest.raises(ValueError, match="src 5 is not in group"):
        pscore.broadcast(np.ones(3), src=5)
    with pytest.raises(ValueError, match="a rank cannot send to itself"):
        pscore.send(np.ones(3), rank)
    # torch's ReduceOp enum is accepted too.
    import torch.distributed as dist

    x = np.ones(3)
    pscore.all_reduce(x, op=dist.ReduceOp.MAX)
    pscore.all_reduce(x, op=pscore.ReduceOp.PRODUCT)
    return True


def test_bad_input_is_a_clear_error():
    run_ranks(bad_input, 2)


def bad_lists(rank, world):
    x = np.ones(3)
    root_list = [np.ones(3) for _ in range(world)]
    cases = [
        (
            ValueError,
            "input_list has 1 entries, the group has 2 ranks",
            lambda: pscore.reduce_scatter(x, [x]),
        ),
        (
            ValueError,
            r"input_list\[1\] has 4 elements, expected 3",
            lambda: pscore.reduce_scatter(x, [x, np.ones(4)]),
        ),
        (
            TypeError,
            r"tensor_list: expected a list of tensors, got int",
            lambda: pscore.all_gather(7, x),
        ),
        (
            TypeError,
            r"tensor_list\[1\]: expected a numpy array or a torch tensor",
            lambda: pscore.all_gather([x, "not a tensor"], x),
        ),
        (
            ValueError,
            r"output_tensor_list\[0\] is read-only",
            lambda: pscore.all_to_all([np.broadcast_to(x, 3)] * world, root_list),
        ),
        (
            ValueError,
            "all_to_all: need 2 input and 2 output tensors",
            lambda: pscore.all_to_all([x], root_list),
        ),
        (
            TypeError,
            "all_to_all: mixed dtypes float32 and float64",
            lambda: pscore.all_to_all([np.ones(3, np.float32), x], root_list),
        ),
    ]
    if rank == 0:
        cases += [
            (
                ValueError,
                "gather: the destination needs a gather_list of 2 tensors",
                lambda: pscore.gather(x, None, 0),
            ),
            (
                ValueError,
                "scatter: the source needs a scatter_list of 2 tensors",
                lambda: pscore.scatter(x, root_list[:1], 0),
            ),
            (
                TypeError,
                r"scatter_list\[0\] is float32, expected float64",
                lambda: pscore.scatter(x, [np.ones(3, np.float32), x], 0),
            ),
        ]
    else:
        cases += [
            (
                ValueError,
                "gather: only the destination rank passes a gather_list",
                lambda: pscore.gather(x, root_list, 0),
            ),
            (
                ValueError,
                "scatter: only the source rank passes a scatter_list",
                lambda: pscore.scatter(x, root_list, 0),
            ),
        ]
    for error, message, call in cases:
        with pytest.raises(error, match=message):
            call()
    # Nothing was sent: the group still works, tuples and empty lists off the root included.
    blocks = tuple(np.full(3, 10.0 * p) for p in range(world))
    out = np.zeros(3)
    pscore.scatter(out, blocks if rank == 0 else [], 0)
    assert (out == 10.0 * rank).all()
    got = [np.zeros(3) for _ in range(world)]
    pscore.all_gather(got, np.full(3, float(rank)))
    assert [g[0] for g in got] == [float(p) for p in range(world)]
    return True


def test_bad_lists_are_clear_errors_on_the_latency_path():
    assert all(run_ranks(bad_lists, 2).values())


def test_uninitialised_use_is_a_clear_error():
    with pytest.raises(RuntimeError, match=re.escape("call pscore.init_process_group")):
        pscore.all_reduce(np.ones(3))


def test_buffers_view_without_copies_and_refuse_foreign_byte_order():
    from pscore.buffer import view

    a = np.arange(6, dtype=np.int32)
    b = view(a)
    assert (b.ptr, b.nbytes, b.dtype, b.numel) == (a.ctypes.data, 24, "int32", 6)
    t = torch.ones(3, dtype=torch.bfloat16)
    assert (view(t).ptr, view(t).dtype) == (t.data_ptr(), "bfloat16")
    with pytest.raises(TypeError, match="not in this machine's byte order"):
        view(np.ones(3, ">f4" if np.little_endian else "<f4"))


def test_a_call_before_init_is_an_error_and_a_non_member_call_a_no_op():
    # Each collective reads the default group without calling resolve (the latency path); a
    # missing one must still be an error, not a silent no-op.
    code = """
import numpy as np, pscore
for call in (lambda: pscore.all_reduce(np.ones(4, np.float32)), pscore.barrier,
             lambda: pscore.broadcast(np.ones(4, np.float32), 0, async_op=True)):
    try:
        call()
    except RuntimeError as e:
        assert "not initialised" in str(e), e
    else:
        raise SystemExit("a call before init_process_group returned")
w = pscore.barrier(group=pscore.NON_GROUP_MEMBER, async_op=True)
assert w.is_completed() and pscore.all_reduce(np.ones(1), group=pscore.NON_GROUP_MEMBER) is None
print("ok")
"""
    out = subprocess.run(
        [sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr + out.stdout
