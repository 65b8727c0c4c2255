"""GPU Hogwild kernels: the same arithmetic as the CPU SharedTable kernels, atomics where rows
collide, bad ids rejected with nothing written. Tests marked gpu skip without a CUDA device; the
first test checks the error a build or machine without CUDA gives."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

from pscore.hogwild import SharedTable
from pscore.hogwild import cuda as hwcuda

torch = pytest.importorskip("torch")

needs_gpu = pytest.mark.skipif(
    not (hwcuda.is_available() and torch.cuda.is_available()), reason="needs a CUDA device"
)


def test_without_cuda_every_entry_point_says_what_is_missing():
    if hwcuda.is_available():
        pytest.skip("a CUDA device is present")
    match = "built without CUDA" if not hwcuda.is_built() else "no CUDA device is visible"
    w = torch.zeros(4, 2)
    ids = torch.tensor([0])
    g = torch.ones(1, 2)
    with pytest.raises(RuntimeError, match=match):
        hwcuda.sgd(w, ids, g)
    with pytest.raises(RuntimeError, match=match):
        hwcuda.adagrad(w, torch.zeros_like(w), ids, g)
    with pytest.raises(RuntimeError, match=match):
        hwcuda.adam(w, torch.zeros_like(w), torch.zeros_like(w), ids, g)


def _cpu_reference(optimizer, w0, batches, **kw):
    with SharedTable.create(
        f"pc-{uuid.uuid4().hex[:10]}", w0.shape, optimizer=optimizer, init=w0
    ) as t:
        for step, (ids, g) in enumerate(batches, 1):
            if optimizer == "adagrad":
                t.adagrad(ids, g, **kw)
            elif optimizer == "adam":
                t.adam(ids, g, step=step, **kw)
            else:
                t.sgd(ids, g, **kw)
        return t.numpy().copy()


@pytest.mark.gpu
@needs_gpu
def test_sgd_with_colliding_rows_is_exact_on_the_gpu():
    w = torch.zeros(64, 32, device="cuda")
    ids = torch.tensor([5, 9, 5, 5, 63], device="cuda")
    g = -torch.ones(5, 32, device="cuda")
    for _ in range(10):
        hwcuda.sgd(w, ids, g, lr=1.0)
    out = w.cpu().numpy()
    assert (out[5] == 30).all() and (out[9] == 10).all() and (out[63] == 10).all()
    assert out.sum() == 50 * 32


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("optimizer", ["adagrad", "adam"])
def test_gpu_optimizers_match_the_cpu_kernels(optimizer):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((1000, 64)).astype(np.float32)
    batches = [
        (rng.permutation(1000)[:256], rng.standard_normal((256, 64)).astype(np.float32))
        for _ in range(3)
    ]  # no repeats inside a batch: the GPU result is then exact
    kw = {"lr": 0.05}
    ref = _cpu_reference(optimizer, w0, batches, **kw)
    w = torch.from_numpy(w0).cuda()
    s0, s1 = torch.zeros_like(w), torch.zeros_like(w)
    for step, (ids, g) in enumerate(batches, 1):
        ids_d, g_d = torch.from_numpy(ids).cuda(), torch.from_numpy(g).cuda()
        if optimizer == "adagrad":
            hwcuda.adagrad(w, s0, ids_d, g_d, **kw)
        else:
            hwcuda.adam(w, s0, s1, ids_d, g_d, step=step, **kw)
    np.testing.assert_allclose(w.cpu().numpy(), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("row_shape", [(1,), (3,), (17,), (33,), (4, 8)])
@pytest.mark.parametrize("ids_dtype", [torch.int64, torch.int32])
def test_gpu_colliding_integer_updates_are_exact_for_any_row_width(row_shape, ids_dtype):
    """Narrow rows share a warp between entries, wide ones loop; SGD and the Adagrad accumulator
    sum integers exactly whatever the collisions."""
    gen = torch.Generator().manual_seed(2)
    ids = torch.randint(0, 7, (5000,), generator=gen)
    g = torch.randint(-3, 4, (5000, *row_shape), generator=gen).float()
    want_w = torch.zeros(50, *row_shape).index_add_(0, ids, g, alpha=-1.0)
    want_acc = torch.zeros(50, *row_shape).index_add_(0, ids, g * g)
    w = torch.zeros(50, *row_shape, device="cuda")
    hwcuda.sgd(w, ids.to("cuda", ids_dtype), g.cuda(), lr=1.0)
    assert torch.equal(w.cpu(), want_w)
    acc = torch.zeros_like(w)
    hwcuda.adagrad(torch.zeros_like(w), acc, ids.to("cuda", ids_dtype), g.cuda())
    assert torch.equal(acc.cpu(), want_acc)


@pytest.mark.gpu
@needs_gpu
def test_gpu_updates_run_on_the_callers_stream():
    w = torch.zeros(1000, 64, device="cuda")
    ids = torch.arange(1000, device="cuda")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        g = torch.ones(1000, 64, device="cuda")  # made on s: the update must follow it there
        for _ in range(20):
            hwcuda.sgd(w, ids, g, lr=1.0)
    s.synchronize()
    assert (w == -20).all()


@pytest.mark.gpu
@needs_gpu
def test_gpu_bad_input_writes_nothing():
    w = torch.ones(8, 4, device="cuda")
    g = torch.ones(3, 4, device="cuda")
    with pytest.raises(ValueError, match=r"ids\[2\] = 8 is out of range \[0, 8\); nothing"):
        hwcuda.sgd(w, torch.tensor([0, 1, 8], device="cuda"), g)
    with pytest.raises(ValueError, match=r"ids\[0\] = -3 is out of range"):
        hwcuda.adagrad(w, torch.zeros_like(w), torch.tensor([-3, 1, 2], device="cuda"), g)
    assert (w == 1).all()
    with pytest.raises(ValueError, match="is on cpu; the GPU kernels take CUDA tensors"):
        hwcuda.sgd(w, torch.tensor([0, 1, 2]), g)
    with pytest.raises(TypeError, match="grads is float64; expected float32"):
        hwcuda.sgd(w, torch.tensor([0, 1, 2], device="cuda"), g.double())
    with pytest.raises(ValueError, match=r"grads have shape \(3, 4\); 2 ids need \(2, 4\)"):
        hwcuda.sgd(w, torch.tensor([0, 1], device="cuda"), g)
    with pytest.raises(ValueError, match="state_sum has shape"):
        hwcuda.adagrad(w, torch.zeros(2, 4, device="cuda"), torch.tensor([0], device="cuda"), g[:1])


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_gpu_benchmark_peer_computes_what_the_pscore_kernels_do(optimizer):
    """The torch ops the GPU benchmark races against make the same update (checked on the CPU,
    with distinct ids per batch, where torch's index ops and Hogwild agree)."""
    from pscore.bench import hogwild_cuda as bench

    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((300, 16)).astype(np.float32)
    batches = [
        (rng.permutation(300)[:64], rng.standard_normal((64, 16)).astype(np.float32))
        for _ in range(4)
    ]
    kw = {"lr": bench.LR}
    if optimizer != "sgd":
        kw["eps"] = bench.EPS
    if optimizer == "adam":
        kw["betas"] = bench.BETAS
    ref = _cpu_reference(optimizer, w0, batches, **kw)
    state = bench.make_state(optimizer, 300, 16, "cpu")
    state[0].copy_(torch.from_numpy(w0))
    for step, (ids, g) in enumerate(batches, 1):
        bench.torch_step(optimizer, state, torch.from_numpy(ids), torch.from_numpy(g), step)
    np.testing.assert_allclose(state[0].numpy(), ref, rtol=1e-5, atol=1e-6)


def test_gpu_benchmark_counts_bytes_and_says_when_it_cannot_run(capsys):
    from pscore.bench import hogwild_cuda as bench

    # SGD: gradient 4 B + row read and written 8 B per float, plus an 8-byte id per row.
    assert bench.bytes_per_call("sgd", 256, 64) == 256 * 64 * 12 + 256 * 8
    assert bench.bytes_per_call("adam", 1, 1) == 4 * 7 + 8
    if hwcuda.is_available() and torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert bench.main(["hogwild-cuda", "--batch", "256"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err
