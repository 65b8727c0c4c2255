"""Server-side optimizers against torch.optim on the same gradient sequence, dense tables split
over two shards and sparse tables (lazy per-row updates, duplicate ids summed)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from test_ps_support import addresses, start_cluster, stop_cluster

from pscore.ps import SGD, Adagrad, Adam, AdamW, PSClient, RMSprop, read_checkpoint

STEPS = 12
SHAPE = (40, 25)

CASES = [
    ("sgd", SGD(lr=0.1), torch.optim.SGD, {"lr": 0.1}),
    (
        "sgd_momentum_wd",
        SGD(lr=0.05, momentum=0.9, dampening=0.1, weight_decay=0.01),
        torch.optim.SGD,
        {"lr": 0.05, "momentum": 0.9, "dampening": 0.1, "weight_decay": 0.01},
    ),
    (
        "sgd_nesterov",
        SGD(lr=0.05, momentum=0.8, nesterov=True),
        torch.optim.SGD,
        {"lr": 0.05, "momentum": 0.8, "nesterov": True},
    ),
    (
        "adagrad",
        Adagrad(lr=0.1, lr_decay=0.01, weight_decay=0.02, initial_accumulator_value=0.1),
        torch.optim.Adagrad,
        {"lr": 0.1, "lr_decay": 0.01, "weight_decay": 0.02, "initial_accumulator_value": 0.1},
    ),
    ("adam", Adam(lr=0.01), torch.optim.Adam, {"lr": 0.01}),
    (
        "adam_amsgrad_wd",
        Adam(lr=0.01, betas=(0.8, 0.99), weight_decay=0.1, amsgrad=True),
        torch.optim.Adam,
        {"lr": 0.01, "betas": (0.8, 0.99), "weight_decay": 0.1, "amsgrad": True},
    ),
    (
        "adamw",
        AdamW(lr=0.01, weight_decay=0.05),
        torch.optim.AdamW,
        {"lr": 0.01, "weight_decay": 0.05},
    ),
    ("rmsprop", RMSprop(lr=0.01), torch.optim.RMSprop, {"lr": 0.01}),
    (
        "rmsprop_centered_momentum",
        RMSprop(lr=0.01, alpha=0.9, momentum=0.5, centered=True, weight_decay=0.01),
        torch.optim.RMSprop,
        {"lr": 0.01, "alpha": 0.9, "momentum": 0.5, "centered": True, "weight_decay": 0.01},
    ),
]


@pytest.fixture(scope="module")
def cluster():
    servers = start_cluster(2, min_part_bytes=1024)  # small tables still span both shards
    client = PSClient(addresses(servers))
    yield client
    client.close()
    stop_cluster(servers)


def gradients(seed: int, shape=SHAPE) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(STEPS)]


def torch_run(init, grads, opt_cls, kwargs, clip_norm=None, clip_value=None):
    p = torch.nn.Parameter(torch.from_numpy(init.copy()))
    opt = opt_cls([p], **kwargs)
    for g in grads:
        p.grad = torch.from_numpy(g.copy())
        if clip_value is not None:
            torch.nn.utils.clip_grad_value_([p], clip_value)
        if clip_norm is not None:
            torch.nn.utils.clip_grad_norm_([p], clip_norm)
        opt.step()
    return p.detach().numpy(), opt


@pytest.mark.parametrize(("name", "ours", "opt_cls", "kwargs"), CASES, ids=[c[0] for c in CASES])
def test_dense_matches_torch(cluster, name, ours, opt_cls, kwargs):
    init = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    grads = gradients(2)
    info = cluster.create_dense(f"dense_{name}", init=init, optimizer=ours)
    assert len(info.parts) == 2  # the tensor spans both shards
    for g in grads:
        cluster.push(f"dense_{name}", g)
    expect, _ = torch_run(init, grads, opt_cls, kwargs)
    np.testing.assert_allclose(cluster.pull(f"dense_{name}"), expect, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "clip",
    [{"clip_norm": 2.0}, {"clip_value": 0.5}, {"clip_norm": 3.0, "clip_value": 0.8}],
    ids=["norm", "value", "both"],
)
def test_gradient_clipping_matches_torch(cluster, clip):
    init = np.zeros(SHAPE, np.float32)
    grads = gradients(3)
    name = "clip_" + "_".join(clip)
    cluster.create_dense(name, init=init, optimizer=SGD(lr=0.1, momentum=0.9), **clip)
    for g in grads:
        cluster.push_pull(name, g)  # the grad array is not modified in place
    expect, _ = torch_run(init, grads, torch.optim.SGD, {"lr": 0.1, "momentum": 0.9}, **clip)
    np.testing.assert_allclose(cluster.pull(name), expect, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(grads[0], gradients(3)[0])


@pytest.mark.parametrize(
    ("ours", "opt_cls", "kwargs"),
    [CASES[2][1:], CASES[3][1:], CASES[5][1:]],
    ids=["sgd_nesterov", "adagrad", "adam_amsgrad"],
)
def test_sparse_rows_match_torch(cluster, ours, opt_cls, kwargs):
    """Every row pushed each step (some ids twice, summed) equals torch on the dense matrix."""
    rows, dim = 30, 8
    name = f"sparse_{opt_cls.__name__}_{len(kwargs)}"
    cluster.create_sparse(name, dim, initializer="normal", std=0.5, seed=7, optimizer=ours)
    ids = np.array([-(2**63), 2**63 - 1, *range(-14, 14)], dtype=np.int64)
    init = cluster.pull_sparse(name, ids)
    rng = np.random.default_rng(4)
    dense_grads = []
    for _ in range(STEPS):
        g = rng.standard_normal((rows, dim)).astype(np.float32)
        dense_grads.append(g)
        # push every id once plus a split duplicate of the first three ids
        half = g[:3] / 2
        push_ids = np.concatenate([ids, ids[:3]])
        push_g = np.concatenate([np.concatenate([half, g[3:]]), half])
        cluster.push_sparse(name, push_ids, push_g)
    expect, _ = torch_run(init, dense_grads, opt_cls, kwargs)
    np.testing.assert_allclose(cluster.pull_sparse(name, ids), expect, rtol=1e-5, atol=1e-5)


def test_optimizer_state_is_saved_like_torch(cluster, tmp_path):
    init = np.ones(SHAPE, np.float32)
    grads = gradients(5)
    cluster.create_dense("adam_state", init=init, optimizer=Adam(lr=0.01))
    for g in grads:
        cluster.push("adam_state", g)
    _, opt = torch_run(init, grads, torch.optim.Adam, {"lr": 0.01})
    cluster.save(str(tmp_path))
    saved = read_checkpoint(str(tmp_path), with_state=True)
    state = next(iter(opt.state.values()))
    np.testing.assert_allclose(
        saved["adam_state:state"][0], state["exp_avg"].numpy(), rtol=1e-5, atol=1e-7
    )
    np.testing.assert_allclose(
        saved["adam_state:state"][1], state["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-7
    )


def test_bad_hyper_parameters_are_rejected():
    with pytest.raises(ValueError, match="invalid lr"):
        SGD(lr=-1)
    with pytest.raises(ValueError, match="Nesterov"):
        SGD(lr=0.1, nesterov=True)
    with pytest.raises(ValueError, match="beta2"):
        Adam(betas=(0.9, 1.0))
    with pytest.raises(TypeError, match="momentum must be a number"):
        RMSprop(momentum="fast")
