"""HogwildOptimizer against torch.optim step for step: SGD (momentum, dampening, Nesterov,
weight decay, maximize), Adagrad (lr_decay, weight decay, initial accumulator, maximize), Adam
and AdamW (weight decay, amsgrad, maximize); the optimizer state in the tables equals torch's.
Sparse gradients: torch's own sparse semantics where it has them (Adagrad), else the documented
row-wise one (the dense update applied to the touched rows only). Bad options are refused."""

from __future__ import annotations

import glob
import re
import uuid

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pscore.hogwild import HogwildOptimizer, SharedParameters, SharedTable

TORCH = {
    "sgd": torch.optim.SGD,
    "adagrad": torch.optim.Adagrad,
    "adam": torch.optim.Adam,
    "adamw": torch.optim.AdamW,
}
# torch's state name -> ours (the same names)
STATE = {
    "sgd": ["momentum_buffer"],
    "adagrad": ["sum"],
    "adam": ["exp_avg", "exp_avg_sq"],
    "adamw": ["exp_avg", "exp_avg_sq"],
}

CASES = [
    ("sgd", {"lr": 0.1}),
    ("sgd", {"lr": 0.05, "momentum": 0.5}),  # mnist_hogwild's
    ("sgd", {"lr": 0.05, "momentum": 0.9, "dampening": 0.3}),
    ("sgd", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    ("sgd", {"lr": 0.05, "weight_decay": 0.1, "maximize": True}),
    (
        "sgd",
        {"lr": 0.05, "momentum": 0.7, "dampening": 0.1, "weight_decay": 0.02, "maximize": True},
    ),
    ("adagrad", {"lr": 0.1}),
    ("adagrad", {"lr": 0.1, "lr_decay": 0.3, "weight_decay": 0.05}),
    ("adagrad", {"lr": 0.1, "initial_accumulator_value": 0.2, "eps": 1e-6, "maximize": True}),
    ("adam", {"lr": 0.01}),
    ("adam", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True}),
    ("adam", {"lr": 0.01, "betas": (0.8, 0.99), "maximize": True, "amsgrad": True}),
    ("adamw", {"lr": 0.01}),
    ("adamw", {"lr": 0.01, "weight_decay": 0.1, "amsgrad": True, "maximize": True}),
]


def _prefix(tag: str) -> str:
    return f"pto-{tag}-{uuid.uuid4().hex[:8]}"


def _mlp(dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 6), torch.nn.Tanh(), torch.nn.Linear(6, 3)).to(
        dtype
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("family", "options"), CASES, ids=[f"{f}-{o}" for f, o in CASES])
def test_dense_steps_and_state_match_torch_optim(family, options, dtype):
    ours, theirs = _mlp(dtype), _mlp(dtype)
    gen = torch.Generator().manual_seed(1)
    with SharedParameters(ours, optimizer=family, prefix=_prefix(family), **options) as shared:
        opt = shared.optimizer(ours)
        ref = TORCH[family](theirs.parameters(), **options)
        for _ in range(5):
            x = torch.randn(16, 8, generator=gen, dtype=dtype)
            y = torch.randint(0, 3, (16,), generator=gen)
            for model, o in ((ours, opt), (theirs, ref)):
                o.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                o.step()
        tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == torch.float32 else {"rtol": 1e-11, "atol": 0}
        for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
            torch.testing.assert_close(a, b, **tol, msg=name)
            t = shared.tables[name]
            names = STATE[family] if t.optimizer != "none" else []
            if options.get("amsgrad"):
                names = [*names, "max_exp_avg_sq"]
            for s in names:
                mine = t.state(s, as_torch=True).view(b.shape)
                torch.testing.assert_close(mine, ref.state[b][s], **tol, msg=f"{name} {s}")


def _embedding():
    torch.manual_seed(2)
    return torch.nn.Embedding(12, 3, sparse=True)


def _sparse_steps(model, opt, steps=4):
    for step in range(steps):
        idx = torch.tensor([[1, 5, 1], [5, 5, 7]]) + step  # repeated rows in every batch
        opt.zero_grad()
        (model(idx) ** 2 * torch.arange(1.0, 4.0)).sum().backward()
        opt.step()


def test_sparse_adagrad_matches_torch_sparse_adagrad():
    options = {"lr": 0.1, "lr_decay": 0.2, "initial_accumulator_value": 0.1, "maximize": True}
    ours, theirs = _embedding(), _embedding()
    ref = torch.optim.Adagrad(theirs.parameters(), **options)
    with SharedParameters(ours, optimizer="adagrad", prefix=_prefix("sa"), **options) as shared:
        _sparse_steps(ours, shared.optimizer(ours))
        _sparse_steps(theirs, ref)
        torch.testing.assert_close(ours.weight, theirs.weight, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(
            shared.tables["weight"].state("sum", as_torch=True), ref.state[theirs.weight]["sum"]
        )


@pytest.mark.parametrize(
    "options",
    [
        {"lr": 0.1, "momentum": 0.5},
        {"lr": 0.1, "momentum": 0.9, "dampening": 0.4, "weight_decay": 0.1},
        {"lr": 0.1, "momentum": 0.9, "nesterov": True, "maximize": True},
    ],
)
def test_sparse_sgd_momentum_is_the_dense_update_of_the_touched_rows(options):
    """torch's SGD takes no sparse gradient with momentum; here each touched row steps as a
    dense SGD of that row alone (its buffer starts at its first touch) and other rows rest."""
    ours = _embedding()
    rows = [torch.nn.Parameter(r.detach().clone()) for r in _embedding().weight]
    per_row = [torch.optim.SGD([r], **options) for r in rows]
    with SharedParameters(ours, optimizer="sgd", prefix=_prefix("ss"), **options) as shared:
        opt = shared.optimizer(ours)
        for step in range(4):
            idx = torch.tensor([[1, 5, 1], [5, 5, 7]]) + step
            opt.zero_grad()
            (ours(idx) ** 2 * torch.arange(1.0, 4.0)).sum().backward()
            grad = ours.weight.grad.coalesce()
            opt.step()
            for i, g in zip(grad.indices()[0].tolist(), grad.values()):
                per_row[i].zero_grad()
                rows[i].grad = g.clone()
                per_row[i].step()
        torch.testing.assert_close(ours.weight, torch.stack(rows).detach(), rtol=1e-5, atol=1e-6)
        buf = shared.tables["weight"].state("momentum_buffer", as_torch=True)
        for i, o in enumerate(per_row):
            want = o.state[rows[i]].get("momentum_buffer")
            torch.testing.assert_close(buf[i], torch.zeros(3) if want is None else want)


def test_table_level_momentum_and_amsgrad_state():
    """SharedTable's own sgd/adam with the state tables: the buffer starts as the first gradient
    (dampening applies from the second step), and amsgrad keeps the running maximum."""
    name = _prefix("tbl")
    with SharedTable.create(name, (3, 2), optimizer="momentum", init=np.ones((3, 2))) as t:
        g1, g2 = np.full((1, 2), 2.0, np.float32), np.full((1, 2), 4.0, np.float32)
        t.sgd([1], g1, 0.1, momentum=0.9, dampening=0.5)
        np.testing.assert_allclose(t.state("momentum_buffer")[1], [2.0, 2.0])
        t.sgd([1], g2, 0.1, momentum=0.9, dampening=0.5)
        np.testing.assert_allclose(t.state("momentum_buffer")[1], [0.9 * 2 + 0.5 * 4] * 2)
        np.testing.assert_allclose(t.numpy()[1], [1 - 0.1 * 2 - 0.1 * 3.8] * 2, rtol=1e-6)
        np.testing.assert_array_equal(t.numpy()[[0, 2]], 1.0)  # untouched rows rest
        np.testing.assert_array_equal(t.state("momentum_buffer")[[0, 2]], 0.0)
    with SharedTable.create(name + "a", (2,), optimizer="amsgrad") as t:
        t.adam(None, np.array([1.0, -3.0], np.float32), 0.01, amsgrad=True)
        t.adam(None, np.array([0.0, 0.0], np.float32), 0.01, amsgrad=True)
        v = t.state("exp_avg_sq")
        assert (t.state("max_exp_avg_sq") > v).all()  # the maximum outlives v's decay
        assert t.state("max_exp_avg_sq").tolist() == pytest.approx([0.001, 0.009], rel=1e-4)


def test_optimizer_overrides_within_the_tables_state_are_taken():
    model = torch.nn.Linear(3, 2)
    with SharedParameters(model, optimizer="sgd", prefix=_prefix("ov"), momentum=0.5) as shared:
        assert shared.optimizer(model, momentum=0.9, lr=0.2).options["momentum"] == 0.9
        assert shared.optimizer(model, momentum=0).options["momentum"] == 0  # buffer unused
    with SharedParameters(model, optimizer="adam", prefix=_prefix("ov"), amsgrad=True) as shared:
        shared.optimizer(model, amsgrad=False)  # Adam steps amsgrad tables without the maximum
    with (
        SharedParameters(model, optimizer="adagrad", prefix=_prefix("ov")) as shared,
        pytest.raises(ValueError, match="initial_accumulator_value is applied when"),
    ):
        shared.optimizer(model, initial_accumulator_value=0.1)


def test_bad_options_are_refused_with_the_option_named():
    model = torch.nn.Linear(3, 2)
    p = _prefix("bad")
    with pytest.raises(TypeError, match="optimizer 'sgd' takes no option 'betas'"):
        SharedParameters(model, optimizer="sgd", prefix=p, betas=(0.9, 0.99))
    with pytest.raises(ValueError, match=re.escape("momentum = -0.5 must be finite and >= 0")):
        SharedParameters(model, optimizer="sgd", prefix=p, momentum=-0.5)
    with pytest.raises(ValueError, match="Nesterov momentum needs momentum > 0 and dampening"):
        SharedParameters(model, optimizer="sgd", prefix=p, nesterov=True)
    with pytest.raises(ValueError, match=r"betas \(0.9, 1\) must lie in \[0, 1\)"):
        SharedParameters(model, optimizer="adam", prefix=p, betas=(0.9, 1.0))
    with pytest.raises(ValueError, match="lr_decay = -1 must be"):
        SharedParameters(model, optimizer="adagrad", prefix=p, lr_decay=-1)
    with pytest.raises(
        ValueError, match=re.escape("initial_accumulator_value = -0.1 must be >= 0")
    ):
        SharedParameters(model, optimizer="adagrad", prefix=p, initial_accumulator_value=-0.1)
    with pytest.raises(ValueError, match="optimizer 'rmsprop' is not one of sgd, adagrad"):
        SharedParameters(model, optimizer="rmsprop", prefix=p)
    assert not glob.glob(SharedTable.shm_path(p) + "*"), "a refused SharedParameters made tables"
    with SharedParameters(model, optimizer="sgd", prefix=_prefix("ok"), lr=0.1) as shared:
        with pytest.raises(ValueError, match="need tables with optimizer state 'momentum'"):
            shared.optimizer(model, momentum=0.5)
        with pytest.raises(ValueError, match=re.escape("lr = -0.1 must be finite and >= 0")):
            HogwildOptimizer(shared, model, lr=-0.1)
        with pytest.raises(ValueError, match="needs a table created with optimizer='momentum'"):
            shared.tables["weight"].sgd(None, np.ones((2, 3), np.float32), 0.1, momentum=0.5)
