"""SharedParameters / HogwildOptimizer: a torch module trained in place on shared tables. One
process matches torch.optim step for step (dense and sparse gradients); two Hogwild processes
train an MLP on digits to the accuracy of one; bad bindings are refused."""

from __future__ import annotations

import re
import uuid

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from pscore.hogwild import HogwildOptimizer, SharedParameters, train


def _prefix(tag: str) -> str:
    return f"pm-{tag}-{uuid.uuid4().hex[:8]}"


def _mlp(seed: int = 0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.Tanh(), torch.nn.Linear(32, 10))


TORCH_OPTIMIZERS = {
    "sgd": lambda ps: torch.optim.SGD(ps, lr=0.1),
    "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, eps=1e-10),
    "adam": lambda ps: torch.optim.Adam(ps, lr=0.01),
}


@pytest.mark.parametrize("optimizer", ["sgd", "adagrad", "adam"])
def test_one_process_matches_torch_optim_step_for_step(optimizer):
    ours, theirs = _mlp(), _mlp()
    gen = torch.Generator().manual_seed(1)
    with SharedParameters(ours, optimizer=optimizer, prefix=_prefix(optimizer)) as shared:
        opt = shared.optimizer(ours, lr=0.01 if optimizer == "adam" else 0.1)
        ref = TORCH_OPTIMIZERS[optimizer](theirs.parameters())
        for _ in range(4):
            x, y = torch.randn(16, 64, generator=gen), torch.randint(0, 10, (16,), generator=gen)
            for model, o in ((ours, opt), (theirs, ref)):
                o.zero_grad()
                torch.nn.functional.cross_entropy(model(x), y).backward()
                o.step()
        for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=name)
            # the parameter is the table: an update through one shows in the other
            assert a.data_ptr() == shared.tables[name].torch().data_ptr()


@pytest.mark.parametrize("optimizer", ["adagrad", "adam"])
def test_sparse_embedding_gradients_update_only_their_rows_like_torch(optimizer):
    def model():
        torch.manual_seed(2)
        return torch.nn.Embedding(30, 4, sparse=True)

    ours, theirs = model(), model()
    make = {
        "adagrad": lambda ps: torch.optim.Adagrad(ps, lr=0.1, eps=1e-10),
        "adam": lambda ps: torch.optim.SparseAdam(ps, lr=0.05),
    }[optimizer]
    with SharedParameters(ours, optimizer=optimizer, prefix=_prefix("emb")) as shared:
        opt, ref = (
            shared.optimizer(ours, lr=0.1 if optimizer == "adagrad" else 0.05),
            make(list(theirs.parameters())),
        )
        before = ours.weight.detach().clone()
        for step in range(3):
            idx = torch.tensor([[1, 5, 1], [5, 5, 7]]) + step  # repeated rows in every batch
            for m, o in ((ours, opt), (theirs, ref)):
                o.zero_grad()
                (m(idx) ** 2).sum().backward()
                o.step()
        torch.testing.assert_close(ours.weight, theirs.weight, rtol=1e-5, atol=1e-6)
        untouched = [r for r in range(30) if r not in range(1, 10)]
        assert torch.equal(ours.weight[untouched], before[untouched])


def _digits():
    datasets = pytest.importorskip("sklearn.datasets")
    x, y = datasets.load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    x = torch.from_numpy((x[order] / 16.0).astype(np.float32))
    y = torch.from_numpy(y[order].astype(np.int64))
    split = int(0.8 * len(y))
    return x[:split], y[:split], x[split:], y[split:]


def _mlp_worker(rank, shared, procs, epochs):
    torch.set_num_threads(1)
    model = shared.bind(_mlp(seed=100 + rank))  # its own random init is replaced by the tables
    opt = shared.optimizer(model, lr=0.05)
    x, y, _, _ = _digits()
    shard = torch.arange(rank, len(y), procs)
    gen = torch.Generator().manual_seed(rank)
    for _ in range(epochs):
        for batch in shard[torch.randperm(len(shard), generator=gen)].split(16):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x[batch]), y[batch]).backward()
            opt.step()
    return len(shard)


def _accuracy(model) -> float:
    _, _, x, y = _digits()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def test_two_hogwild_processes_train_an_mlp_to_the_accuracy_of_one():
    accuracy = {}
    for procs in (1, 2):
        model = _mlp()
        with SharedParameters(model, optimizer="adagrad", prefix=_prefix(f"p{procs}")) as shared:
            seen = train(_mlp_worker, num_procs=procs, args=(shared, procs, 6), timeout=120)
            assert sum(seen) == len(_digits()[1])
            accuracy[procs] = _accuracy(model)  # the parent's model is bound to the tables
    # Lock-free dense updates race, so 2-process runs vary (0.953-0.975 in 6 runs here, against
    # 0.967 for 1 process); the margin covers that, a broken update does not pass it.
    assert accuracy[1] > 0.9, accuracy
    assert accuracy[2] >= accuracy[1] - 0.05, accuracy


def test_bad_modules_and_unbound_optimizers_are_refused():
    model = _mlp()
    with SharedParameters(model, prefix=_prefix("bad")) as shared:
        with pytest.raises(ValueError, match=r"missing \['2.bias', '2.weight'\]"):
            shared.bind(torch.nn.Sequential(torch.nn.Linear(64, 32)))
        wider = torch.nn.Sequential(
            torch.nn.Linear(64, 33), torch.nn.Tanh(), torch.nn.Linear(33, 10)
        )
        with pytest.raises(ValueError, match=r"parameter '0.weight' is \(33, 64\)"):
            shared.bind(wider)
        with pytest.raises(ValueError, match="not bound to these shared tables"):
            HogwildOptimizer(shared, _mlp(), lr=0.1)
    with pytest.raises(TypeError, match=re.escape("'weight' is torch.float16")):
        SharedParameters(torch.nn.Linear(2, 2).half(), prefix=_prefix("half"))
    with pytest.raises(ValueError, match="optimizer 'rmsprop'"):
        SharedParameters(_mlp(), optimizer="rmsprop")


def test_the_hogwild_mlp_example_trains(tmp_path):
    import os
    import pathlib
    import re
    import subprocess
    import sys

    pytest.importorskip("sklearn")
    script = pathlib.Path(__file__).parents[2] / "examples" / "hogwild_mlp.py"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    out = subprocess.run(
        [sys.executable, str(script), "--procs", "2", "--epochs", "8"],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    accuracy = float(re.search(r"test accuracy ([0-9.]+)", out.stdout).group(1))
    # 2 lock-free processes: 0.924-0.973 in 13 runs of 8 epochs here (4 epochs once gave 0.822)
    assert accuracy > 0.85, out.stdout


def test_shared_parameters_average_across_machines():
    """Distributed Hogwild over a module: each machine's SharedParameters averaged in place."""
    from test_hogwild_distributed import ThreadCollective, _run_machines

    from pscore.hogwild import DistributedHogwild, average_tables

    coll = ThreadCollective(2)
    models = {r: torch.nn.Linear(3, 2) for r in range(2)}
    shared = {
        r: SharedParameters(models[r], optimizer="adagrad", prefix=_prefix(f"m{r}"))
        for r in range(2)
    }
    want = {
        n: (dict(models[0].named_parameters())[n] + p).detach() / 2
        for n, p in models[1].named_parameters()
    }
    _run_machines(2, lambda r: average_tables(shared[r], coll.for_rank(r)))
    for r in range(2):
        for n, p in models[r].named_parameters():
            torch.testing.assert_close(p.detach(), want[n])
    sync = DistributedHogwild(shared[0], 10, all_reduce=coll.for_rank(0))
    assert [t.name for t in sync.tables] == [t.name for t in shared[0].tables.values()]
    for s in shared.values():
        s.close()
