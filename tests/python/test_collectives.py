"""Every collective x dtype x op x world size x size, on real processes, against numpy."""

import time

import numpy as np
import pytest
import torch
from dist_helpers import run_ranks

import pscore

DTYPES = [
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int32,
    torch.int64,
]
OPS = ["sum", "prod", "min", "max", "avg"]
# 0, 1, odd, and multi-chunk: with the ring threshold lowered to 256 bytes and 4 KB shared
# rings (MATRIX_ENV), 4099 elements take the ring path for every dtype, with odd block splits,
# and lap the rings several times. Large buffers are covered by test_large_numpy_allreduce.
SIZES = [0, 1, 17, 4099]
MATRIX_ENV = {
    "PSCORE_SMALL_ALLREDUCE_BYTES": "256",
    "PSCORE_LARGE_BROADCAST_BYTES": "1024",
    "PSCORE_SHM_RING_BYTES": "4096",
    "PSCORE_EPOLL_MIN_FDS": "1",  # TCP ranks sleep in epoll; the other tests use poll()
}


def rank_input(rank, n, dtype, op):
    """Small integers so every dtype (even float16 / int8 sums and products) is exact."""
    g = torch.Generator().manual_seed(1000 * rank + n)
    if op == "prod":
        return (
            torch.randint(1, 3, (n,), generator=g).to(dtype)
            if n < 100
            else torch.ones(n, dtype=dtype)
        )
    return torch.randint(0, 5, (n,), generator=g).to(dtype)


def expected_reduce(world, n, dtype, op):
    stack = torch.stack([rank_input(r, n, dtype, op).double() for r in range(world)])
    if op == "sum":
        out = stack.sum(0)
    elif op == "prod":
        out = stack.prod(0)
    elif op == "min":
        out = stack.min(0).values
    elif op == "max":
        out = stack.max(0).values
    else:
        out = stack.sum(0) / world
        if not dtype.is_floating_point:
            out = torch.trunc(out)
    return out


def check(got, want, dtype, what):
    got = got.double()
    if dtype.is_floating_point:
        tol = 1e-2 if dtype in (torch.float16, torch.bfloat16) else 1e-6
        assert torch.allclose(got, want, rtol=tol, atol=tol), what
    else:
        assert torch.equal(got, want), what


def reduce_matrix(rank, world):
    for dtype in DTYPES:
        for op in OPS:
            for n in SIZES:
                what = f"{dtype} {op} n={n}"
                t = rank_input(rank, n, dtype, op)
                pscore.all_reduce(t, op=op)
                check(t, expected_reduce(world, n, dtype, op), dtype, "all_reduce " + what)
                t = rank_input(rank, n, dtype, op)
                pscore.reduce(t, dst=world - 1, op=op)
                if rank == world - 1:
                    check(t, expected_reduce(world, n, dtype, op), dtype, "reduce " + what)
                else:
                    assert torch.equal(t, rank_input(rank, n, dtype, op)), "reduce input changed"
                inp = (
                    torch.cat([rank_input(rank, n, dtype, op) + b for b in range(world)])
                    if op != "prod"
                    else torch.cat([rank_input(rank, n, dtype, op)] * world)
                )
                out = torch.empty(n, dtype=dtype)
                pscore.reduce_scatter_tensor(out, inp, op=op)
                want = expected_reduce(world, n, dtype, op)
                if op in ("sum", "avg"):
                    want = want + (rank * world if op == "sum" else rank)
                elif op in ("min", "max"):
                    want = want + rank
                check(out, want, dtype, "reduce_scatter " + what)
    return True


def data_matrix(rank, world):
    for dtype in DTYPES:
        for n in SIZES:
            what = f"{dtype} n={n}"
            mine = torch.full((n,), rank + 1).to(dtype)
            # broadcast from every root
            for root in range(world):
                t = mine.clone()
                pscore.broadcast(t, src=root)
                assert torch.equal(t, torch.full((n,), root + 1).to(dtype)), "broadcast " + what
            outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
            pscore.all_gather(outs, mine)
            for r in range(world):
                assert torch.equal(outs[r], torch.full((n,), r + 1).to(dtype)), "all_gather " + what
            flat = torch.empty(n * world, dtype=dtype)
            pscore.all_gather_into_tensor(flat, mine)
            assert torch.equal(flat, torch.cat(outs)), "all_gather_into_tensor " + what
            root = world // 2
            glist = [torch.empty(n, dtype=dtype) for _ in range(world)] if rank == root else None
            pscore.gather(mine, glist, dst=root)
            if rank == root:
                assert all(
                    torch.equal(glist[r], torch.full((n,), r + 1).to(dtype)) for r in range(world)
                )
            slist = (
                [torch.full((n,), 10 + r).to(dtype) for r in range(world)] if rank == root else None
            )
            out = torch.empty(n, dtype=dtype)
            pscore.scatter(out, slist, src=root)
            assert torch.equal(out, torch.full((n,), 10 + rank).to(dtype)), "scatter " + what
            ins = [torch.full((n,), rank * 10 + p).to(dtype) for p in range(world)]
            outs = [torch.empty(n, dtype=dtype) for _ in range(world)]
            pscore.all_to_all(outs, ins)
            for p in range(world):
                assert torch.equal(outs[p], torch.full((n,), p * 10 + rank).to(dtype)), (
                    "all_to_all " + what
                )
    pscore.barrier()
    return True


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_reductions(world, transport):
    assert all(run_ranks(reduce_matrix, world, transport=transport, env=MATRIX_ENV).values())


@pytest.mark.parametrize("transport", ["shm", "tcp"])
@pytest.mark.parametrize("world", [1, 2, 3, 4, 5])
def test_data_movement(world, transport):
    assert all(run_ranks(data_matrix, world, transport=transport, env=MATRIX_ENV).values())


def large_allreduce(rank, world):
    # 6 MB: several laps of the 4 MB shared ring and the 1 MB socket staging area.
    from pscore.collectives.group import default_group

    n = 1_500_001
    x = np.full(n, rank + 1, dtype=np.float32)
    x[::7] = rank
    pscore.all_reduce(x)
    want = np.full(n, world * (world + 1) / 2, dtype=np.float32)
    want[::7] = world * (world - 1) / 2
    native, f32 = default_group().native, pscore._types.DType.FLOAT32
    algorithm = native.allreduce_algorithm(n, f32).name.lower()
    return bool(np.array_equal(x, want)) and (pscore.get_backend(), algorithm)


@pytest.mark.parametrize(
    ("transport", "world", "asked", "taken"),
    [
        ("shm", 3, "auto", "ring"),
        ("tcp", 3, "auto", "ring"),
        ("tcp", 4, "auto", "ring"),  # 6 MB: auto halves and doubles over TCP up to 1 MB
        ("shm", 3, "halving_doubling", "halving_doubling"),  # with the fold
        ("tcp", 4, "halving_doubling", "halving_doubling"),
        ("tcp", 2, "recursive_doubling", "recursive_doubling"),
    ],
)
def test_large_numpy_allreduce(transport, world, asked, taken):
    env = {"PSCORE_ALLREDUCE_ALGORITHM": asked}
    results = run_ranks(large_allreduce, world, transport=transport, env=env)
    assert set(results.values()) == {(f"pscore/{transport}", taken)}


def gathers_and_scatters(rank, world):
    # 16 K elements per rank: 256 KB in all on 4 ranks, where auto takes the log2(n)-step
    # algorithms over TCP only; the same 1 MB broadcast's allgather half.
    from pscore.collectives.group import default_group

    n = 1 << 14
    mine = np.arange(n, dtype=np.float32) + rank
    whole = np.empty(n * world, dtype=np.float32)
    pscore.all_gather_into_tensor(whole, mine)
    want = np.concatenate([np.arange(n, dtype=np.float32) + r for r in range(world)])
    parts = [np.empty(n, dtype=np.float32) for _ in range(world)]
    pscore.all_gather(parts, mine)  # separate outputs
    out = np.empty(n, dtype=np.float32)
    pscore.reduce_scatter_tensor(out, want + rank)
    summed = want[rank * n : (rank + 1) * n] * world + world * (world - 1) / 2
    big = want.copy() if rank == 1 else np.zeros_like(want)
    pscore.broadcast(big, src=1)
    native, f32 = default_group().native, pscore._types.DType.FLOAT32
    return (
        bool(np.array_equal(whole, want))
        and all(np.array_equal(p, want[r * n : (r + 1) * n]) for r, p in enumerate(parts))
        and bool(np.array_equal(out, summed))
        and bool(np.array_equal(big, want)),
        native.allgather_algorithm(n, f32).name.lower(),
        native.reduce_scatter_algorithm(n, f32).name.lower(),
    )


@pytest.mark.parametrize(
    ("transport", "world", "asked", "taken"),
    [
        ("tcp", 4, "auto", ("recursive_doubling", "recursive_halving")),
        ("shm", 4, "auto", ("ring", "ring")),
        ("shm", 4, "fewer", ("recursive_doubling", "recursive_halving")),
        ("tcp", 4, "ring", ("ring", "ring")),
        ("tcp", 3, "fewer", ("ring", "ring")),  # powers of two only
    ],
)
def test_gathers_and_scatters_by_algorithm(transport, world, asked, taken):
    fewer = {"allgather": "recursive_doubling", "reduce_scatter": "recursive_halving"}
    env = {
        f"PSCORE_{op.upper()}_ALGORITHM": fewer[op] if asked == "fewer" else asked for op in fewer
    }
    results = run_ranks(gathers_and_scatters, world, transport=transport, env=env)
    assert set(results.values()) == {(True, *taken)}


def matches_gloo(rank, world, gloo_file):
    """Integer results equal torch.distributed gloo's exactly, floats within rounding."""
    import torch.distributed as dist

    store = dist.FileStore(gloo_file, world)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
    g = torch.Generator().manual_seed(rank)
    for dtype in (torch.int32, torch.int64, torch.float32, torch.float64):
        for n in (5, 100_003):
            a = (torch.randint(-1000, 1000, (n,), generator=g)).to(dtype)
            if dtype.is_floating_point:
                a = a / 7
            b = a.clone()
            pscore.all_reduce(a)
            dist.all_reduce(b)
            if dtype.is_floating_point:
                assert (
                    torch.allclose(a, b, rtol=1e-9, atol=1e-9)
                    if dtype == torch.float64
                    else torch.allclose(a, b, rtol=1e-5, atol=1e-4)
                )
            else:
                assert torch.equal(a, b)
    dist.destroy_process_group()
    return True


def test_matches_gloo(tmp_path):
    assert all(run_ranks(matches_gloo, 3, str(tmp_path / "gloo")).values())


BITWISE = {"band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}


def bitwise_matrix(rank, world):
    """band / bor / bxor on every integer dtype and size, through all_reduce, reduce and
    reduce_scatter_tensor; floating-point tensors are refused on every rank alike."""
    for dtype in (torch.int8, torch.uint8, torch.int32, torch.int64):
        for n in SIZES:

            def value(r, n=n):
                return torch.randint(0, 127, (n,), generator=torch.Generator().manual_seed(r))

            for op, fn in BITWISE.items():
                want = value(0)
                for r in range(1, world):
                    want = fn(want, value(r))
                want = want.to(dtype)
                t = value(rank).to(dtype)
                pscore.all_reduce(t, op=op)
                assert torch.equal(t, want), f"all_reduce {op} {dtype} n={n}"
                t = value(rank).to(dtype)
                pscore.reduce(t, dst=0, op=op)
                assert rank != 0 or torch.equal(t, want), f"reduce {op} {dtype} n={n}"
                out = torch.empty(n, dtype=dtype)
                pscore.reduce_scatter_tensor(out, value(rank).to(dtype).repeat(world), op=op)
                assert torch.equal(out, want), f"reduce_scatter_tensor {op} {dtype} n={n}"
    with pytest.raises(TypeError, match="band needs an integer dtype, got float32"):
        pscore.all_reduce(torch.ones(3), op=pscore.ReduceOp.BAND)
    pscore.barrier()
    return True


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_bitwise_reductions(transport):
    assert all(run_ranks(bitwise_matrix, 3, transport=transport, env=MATRIX_ENV).values())


def single_copy_matrix(rank, world):
    # Below and above a 64 KB single-copy threshold (float32): 1 KB, 64 KB + 4, 1.2 MB.
    for n in (256, 16385, 300_001):
        x = np.arange(n, dtype=np.float32) % 1000 + rank
        pscore.all_reduce(x)
        want = world * (np.arange(n, dtype=np.float32) % 1000) + world * (world - 1) / 2
        assert np.array_equal(x, want), f"all_reduce n={n}"
        b = torch.full((n,), float(rank))
        pscore.broadcast(b, src=world - 1)
        assert torch.equal(b, torch.full((n,), float(world - 1))), f"broadcast n={n}"
        mine = torch.arange(n, dtype=torch.int32) + rank
        outs = [torch.empty(n, dtype=torch.int32) for _ in range(world)]
        pscore.all_gather(outs, mine)
        for r in range(world):
            assert torch.equal(outs[r], torch.arange(n, dtype=torch.int32) + r), f"all_gather {n}"
        ins = [torch.full((n,), rank * 10 + p, dtype=torch.int32) for p in range(world)]
        pscore.all_to_all(outs, ins)
        for p in range(world):
            assert torch.equal(outs[p], torch.full((n,), p * 10 + rank, dtype=torch.int32))
        out = torch.empty(n, dtype=torch.int64)
        pscore.reduce_scatter(out, [torch.full((n,), b * 100 + rank) for b in range(world)])
        assert torch.equal(out, torch.full((n,), rank * 100 * world + world * (world - 1) // 2))
    pscore.barrier()
    return True


@pytest.mark.parametrize("single_copy_bytes", ["65536", "0"])
@pytest.mark.parametrize("world", [2, 3])
def test_single_copy_shm_is_exact(world, single_copy_bytes):
    env = {
        "PSCORE_SHM_SINGLE_COPY_BYTES": single_copy_bytes,
        "PSCORE_SHM_SINGLE_COPY_REDUCE_BYTES": single_copy_bytes,
    }
    assert all(run_ranks(single_copy_matrix, world, transport="shm", env=env).values())


def barrier_call_path(rank, world):
    """pscore.barrier goes through _C.fast_calls' barrier, a function with no pybind11
    dispatcher, which checks its arguments as the dispatcher would."""
    from pscore import _C
    from pscore.collectives.group import _world

    g = _world["group"]
    assert g.core.barrier.__name__ == "barrier" and not hasattr(g.core.barrier, "__func__")
    with pytest.raises(TypeError, match=r"^barrier\(\) takes 1 positional arguments \(0 given\)"):
        g.core.barrier()
    with pytest.raises(TypeError, match=r"^broadcast\(\): argument 2 \(str\) is not of a type"):
        g.core.broadcast(np.ones(2, np.float32), "0", False)
    store = _world["store"]
    for i in range(50):  # nobody leaves before the last rank has arrived
        if rank == i % world:
            time.sleep(0.01)
            store.set(f"arrived/{i}", b"1")
        pscore.barrier()
        assert store.check([f"arrived/{i}"]), f"barrier {i} returned before its last rank came"
    work = pscore.barrier(async_op=True)
    assert work.wait() is True and work.is_success()
    own = _C.fast_calls(g.native)["barrier"]  # holds the group itself
    assert own(False) is None
    if rank == 0:
        g.native.abort("this test aborts")
    with pytest.raises(ConnectionError, match=r"broken|left the group") as info:
        pscore.barrier()  # rank 0's group is broken; the others wait for rank 0, told it left
    return type(info.value).__name__


@pytest.mark.parametrize("transport", ["shm", "tcp"])
def test_barrier_waits_for_the_last_rank_and_raises_the_groups_errors(transport):
    assert set(run_ranks(barrier_call_path, 3, transport=transport).values()) == {"NetworkError"}
