"""The update kernels through Python: each optimizer against a numpy reference (sparse and dense,
float32/float64, numpy/torch inputs, locked or not), threads updating at once, and bad input."""

from __future__ import annotations

import threading
import uuid

import numpy as np
import pytest

from pscore import hogwild
from pscore.hogwild import SharedTable


def _name(tag: str) -> str:
    return f"pk-{tag}-{uuid.uuid4().hex[:10]}"


def _ref_sgd(w, ids, g, lr):
    for i, r in enumerate(ids):
        w[r] -= lr * g[i]


def _ref_adagrad(w, acc, ids, g, lr, eps):
    for i, r in enumerate(ids):
        acc[r] += g[i] * g[i]
        w[r] -= lr * g[i] / (np.sqrt(acc[r]) + eps)


def _ref_adam(w, m, v, ids, g, lr, b1, b2, eps, step):
    bc1, bc2 = 1 - b1**step, 1 - b2**step
    for i, r in enumerate(ids):
        m[r] = b1 * m[r] + (1 - b1) * g[i]
        v[r] = b2 * v[r] + (1 - b2) * g[i] * g[i]
        w[r] -= lr / bc1 * m[r] / (np.sqrt(v[r]) / np.sqrt(bc2) + eps)


@pytest.fixture(params=hogwild.kernel_isas())
def isa(request):
    """Runs a test with each kernel instruction set this CPU supports."""
    before = hogwild.kernel_isa()
    hogwild.set_kernel_isa(request.param)
    yield request.param
    hogwild.set_kernel_isa(before)


def test_kernel_isa_selection():
    assert "baseline" in hogwild.kernel_isas()
    assert hogwild.kernel_isa() in hogwild.kernel_isas()
    with pytest.raises(ValueError, match="kernel set 'sse9' is not one of baseline, avx2"):
        hogwild.set_kernel_isa("sse9")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("locked", [False, True])
@pytest.mark.parametrize("row_shape", [(), (5,), (64,), (3, 100)])
@pytest.mark.usefixtures("isa")
def test_each_optimizer_matches_numpy(dtype, locked, row_shape):
    rng = np.random.default_rng(0)
    rows = 13
    shape = (rows, *row_shape)
    tol = 1e-5 if dtype == "float32" else 1e-12
    w0 = rng.standard_normal(shape).astype(dtype)
    ids = np.array([3, 0, 12, 3, 7], dtype=np.int64)  # 3 repeats: applied twice, in order
    g = rng.standard_normal((len(ids), *row_shape)).astype(dtype)
    gd = rng.standard_normal(shape).astype(dtype)

    with SharedTable.create(_name("sgd"), shape, dtype, init=w0) as t:
        t.sgd(ids, g, lr=0.3, locked=locked)
        ref = w0.astype(np.float64)
        _ref_sgd(ref, ids, g.astype(np.float64), 0.3)
        np.testing.assert_allclose(t.numpy(), ref, rtol=tol, atol=tol)
        t.sgd(None, gd, lr=0.5, locked=locked)  # dense
        t.axpy(2.0, gd, locked=locked)
        ref += 1.5 * gd
        np.testing.assert_allclose(t.numpy(), ref, rtol=tol, atol=tol)
        assert t.update_count == 3

    with SharedTable.create(
        _name("ada"), shape, dtype, optimizer="adagrad", init=w0, initial_accumulator=0.1
    ) as t:
        w, acc = w0.astype(np.float64), np.full(shape, 0.1)
        for _ in range(3):
            t.adagrad(ids, g, lr=0.05, eps=1e-10, locked=locked)
            _ref_adagrad(w, acc, ids, g.astype(np.float64), 0.05, 1e-10)
        t.adagrad(None, gd, lr=0.05, locked=locked)
        _ref_adagrad(w, acc, range(rows), gd.astype(np.float64), 0.05, 1e-10)
        np.testing.assert_allclose(t.numpy(), w, rtol=tol, atol=tol)
        np.testing.assert_allclose(t.state("sum"), acc, rtol=tol, atol=tol)

    with SharedTable.create(_name("adam"), shape, dtype, optimizer="adam", init=w0) as t:
        w, m, v = w0.astype(np.float64), np.zeros(shape), np.zeros(shape)
        for step in (1, 2, 3):
            t.adam(ids, g, lr=0.01, betas=(0.8, 0.99), eps=1e-8, step=step, locked=locked)
            _ref_adam(w, m, v, ids, g.astype(np.float64), 0.01, 0.8, 0.99, 1e-8, step)
        t.adam(None, gd, lr=0.01, betas=(0.8, 0.99), step=4, locked=locked)
        _ref_adam(w, m, v, range(rows), gd.astype(np.float64), 0.01, 0.8, 0.99, 1e-8, 4)
        np.testing.assert_allclose(t.numpy(), w, rtol=tol, atol=tol)
        np.testing.assert_allclose(t.state("exp_avg"), m, rtol=tol, atol=tol)
        np.testing.assert_allclose(t.state("exp_avg_sq"), v, rtol=tol, atol=tol)


def test_adagrad_and_adam_match_torch_optimizers():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    w0 = rng.standard_normal((6, 4)).astype(np.float32)
    grads = [rng.standard_normal((6, 4)).astype(np.float32) for _ in range(4)]
    for name, make, kwargs in [
        ("adagrad", lambda p: torch.optim.Adagrad([p], lr=0.1, eps=1e-10), {"lr": 0.1}),
        ("adam", lambda p: torch.optim.Adam([p], lr=0.01, betas=(0.9, 0.99)), {"lr": 0.01}),
    ]:
        p = torch.nn.Parameter(torch.from_numpy(w0.copy()))
        opt = make(p)
        with SharedTable.create(_name("vs-torch"), (6, 4), optimizer=name, init=w0) as t:
            for k, g in enumerate(grads):
                p.grad = torch.from_numpy(g)
                opt.step()
                if name == "adam":
                    t.adam(None, g, betas=(0.9, 0.99), step=k + 1, **kwargs)
                else:
                    t.adagrad(None, g, **kwargs)
            np.testing.assert_allclose(t.numpy(), p.detach().numpy(), rtol=1e-5, atol=1e-6)


def _embedding_grads(torch, steps, rows=40, dim=8):
    """Uncoalesced sparse gradients of nn.Embedding(sparse=True): each batch repeats ids."""
    emb = torch.nn.Embedding(rows, dim, sparse=True)
    gen = torch.Generator().manual_seed(3)
    out = []
    for _ in range(steps):
        emb.zero_grad()
        idx = torch.randint(0, 6, (5, 4), generator=gen)  # 20 lookups of 6 rows: many repeats
        (emb(idx) * torch.randn(5, 4, dim, generator=gen)).sum().backward()
        g = emb.weight.grad
        assert not g.is_coalesced()
        out.append(g)
    return out


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
@pytest.mark.parametrize("ids_dtype", ["int64", "int32"])
def test_coalesce_matches_torch_optimizers_on_an_embeddings_sparse_gradient(optimizer, ids_dtype):
    torch = pytest.importorskip("torch")
    grads = _embedding_grads(torch, 4)
    w0 = torch.randn(40, 8, generator=torch.Generator().manual_seed(5))
    p = torch.nn.Parameter(w0.clone())
    make = {
        "sgd": lambda: torch.optim.SGD([p], lr=0.1),
        "adagrad": lambda: torch.optim.Adagrad([p], lr=0.1, eps=1e-10),
        "adam": lambda: torch.optim.SparseAdam([p], lr=0.05),
    }[optimizer]()
    tables = {
        how: SharedTable.create(_name(how), (40, 8), optimizer=optimizer, init=w0.numpy())
        for how in ("coalesced", "per-occurrence")
    }
    for step, g in enumerate(grads, 1):
        p.grad = g
        make.step()
        ids = g._indices()[0].numpy().astype(ids_dtype)
        vals = g._values().numpy()
        for how, t in tables.items():
            kw = {"coalesce": how == "coalesced"}
            if optimizer == "adam":
                t.adam(ids, vals, lr=0.05, step=step, **kw)
            elif optimizer == "adagrad":
                t.adagrad(ids, vals, lr=0.1, **kw)
            else:
                t.sgd(ids, vals, lr=0.1, **kw)
    want = p.detach().numpy()
    np.testing.assert_allclose(tables["coalesced"].numpy(), want, rtol=1e-5, atol=1e-6)
    if optimizer != "sgd":  # per occurrence differs where ids repeat (SGD: a sum either way)
        assert not np.allclose(tables["per-occurrence"].numpy(), want, rtol=1e-4, atol=1e-5)
    for t in tables.values():
        t.close()


def test_coalesce_keeps_batches_without_repeats_and_checks_ids_first():
    with SharedTable.create(_name("co"), (5, 2), optimizer="adagrad") as t:
        t.adagrad([4, 0], np.ones((2, 2), np.float32), lr=1.0, coalesce=True)
        np.testing.assert_allclose(t.state("sum")[[0, 4]], 1.0)
        with pytest.raises(ValueError, match="out of range"):
            t.adagrad([1, 1, 5], np.ones((3, 2), np.float32), coalesce=True)
        np.testing.assert_allclose(t.state("sum")[1], 0.0)


def test_torch_tensors_int32_ids_and_lists_are_accepted():
    torch = pytest.importorskip("torch")
    with SharedTable.create(_name("inputs"), (4, 2)) as t:
        t.sgd(torch.tensor([1, 1]), torch.ones(2, 2), lr=1.0)
        t.sgd(np.array([2], dtype=np.int32), np.ones((1, 2), np.float32), lr=1.0)
        t.sgd([3], np.ones((1, 2), np.float32), lr=1.0)
        t.sgd(None, torch.ones(4, 2), lr=0.5)
        np.testing.assert_array_equal(t.numpy()[:, 0], [-0.5, -2.5, -1.5, -1.5])


def test_adam_global_step_counts_calls_across_handles():
    with SharedTable.create(_name("step"), (2, 2), optimizer="adam") as t:
        other = SharedTable.attach(t.name)
        t.adam([0], np.ones((1, 2), np.float32), lr=0.1)
        other.adam([0], np.ones((1, 2), np.float32), lr=0.1)
        # Bias-corrected Adam moves a constant gradient by lr per step: steps 1 and 2 were used.
        np.testing.assert_allclose(t.numpy()[0], [-0.2, -0.2], rtol=1e-5)
        other.close()


def _expect_rejected(t, exc, match, fn):
    before = t.numpy().copy()
    with pytest.raises(exc, match=match):
        fn()
    np.testing.assert_array_equal(t.numpy(), before)


def test_bad_input_is_rejected_and_writes_nothing():
    torch = pytest.importorskip("torch")
    t = SharedTable.create(_name("bad"), (5, 3), init=1.0)
    g = np.ones((3, 3), np.float32)
    ok = np.array([0, 1, 2])
    _expect_rejected(
        t,
        ValueError,
        r"ids\[2\] = 5 is out of range \[0, 5\); nothing was written",
        lambda: t.sgd(np.array([0, 1, 5]), g),
    )
    _expect_rejected(
        t,
        ValueError,
        r"ids\[0\] = -1 is out of range",
        lambda: t.sgd(np.array([-1, 1, 2]), g, locked=True),
    )
    _expect_rejected(
        t,
        TypeError,
        "grads are float64 but the table holds float32",
        lambda: t.sgd(ok, g.astype(np.float64)),
    )
    _expect_rejected(
        t,
        TypeError,
        "sgd ids are float32; pass int64 or int32",
        lambda: t.sgd(ok.astype(np.float32), g),
    )
    _expect_rejected(
        t,
        ValueError,
        r"grads have shape \(3, 2\); 3 ids need \(3, 3\)",
        lambda: t.sgd(ok, np.ones((3, 2), np.float32)),
    )
    _expect_rejected(t, ValueError, "must be 1-D", lambda: t.sgd(ok.reshape(3, 1), g))
    _expect_rejected(
        t,
        ValueError,
        r"dense grads have shape \(3, 3\), the table \(5, 3\)",
        lambda: t.axpy(1.0, g),
    )
    _expect_rejected(
        t,
        ValueError,
        "grads is not contiguous; call .contiguous.. or np.ascontiguousarray",
        lambda: t.sgd(np.array([0, 1, 2]), np.ones((3, 6), np.float32)[:, ::2]),
    )
    _expect_rejected(
        t, ValueError, "grads is not contiguous", lambda: t.sgd(ok, torch.ones(3, 6)[:, ::2])
    )
    _expect_rejected(
        t, ValueError, "lr = -0.1.* must be finite and >= 0", lambda: t.sgd(ok, g, lr=-0.1)
    )
    _expect_rejected(
        t, ValueError, "created with optimizer='none'; adagrad needs", lambda: t.adagrad(ok, g)
    )
    _expect_rejected(t, ValueError, "adam step must be an int >= 1", lambda: t.adam(ok, g, step=0))
    _expect_rejected(
        t, TypeError, "expected a numpy array or a torch tensor", lambda: t.sgd(ok, [[1.0] * 3] * 3)
    )
    _expect_rejected(
        t,
        TypeError,
        r"grads are float32 \(non-native byte order\) but the table holds float32",
        lambda: t.sgd(ok, g.astype(">f4")),
    )
    _expect_rejected(t, TypeError, "sgd ids are float64", lambda: t.sgd([0.0, 1.5, 2.0], g))
    _expect_rejected(
        t, TypeError, "grads are bfloat16", lambda: t.sgd(ok, torch.ones(3, 3).bfloat16())
    )
    _expect_rejected(t, TypeError, "sgd ids are uint8", lambda: t.sgd(ok.astype(np.uint8), g))
    assert t.update_count == 0
    t.close()
    with pytest.raises(ValueError, match="the table is closed"):
        t.sgd(ok, g)


def test_threads_update_in_parallel_exactly():
    # The kernels release the GIL: 8 threads, locked, colliding rows; integer updates are exact.
    steps, threads = 300, 8
    with SharedTable.create(_name("threads"), (4, 32), lock_stripes=3) as t:
        ids = np.array([0, 2, 0], dtype=np.int64)
        g = -np.ones((3, 32), np.float32)

        def work():
            for _ in range(steps):
                t.sgd(ids, g, lr=1.0, locked=True)

        ts = [threading.Thread(target=work) for _ in range(threads)]
        for th in ts:
            th.start()
        for th in ts:
            th.join()
        w = t.numpy()
        assert (w[0] == 2 * steps * threads).all()
        assert (w[2] == steps * threads).all()
        assert (w[1] == 0).all() and (w[3] == 0).all()
        assert t.update_count == steps * threads
