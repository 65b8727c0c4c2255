"""The allreduce strategy: 2 real worker processes give the weights one process gets on the
global batch; uneven shards finish with identical weights; unused parameters do not hang;
models that differ across workers and unknown strategies are clear errors; the digits example
trains under pscore-run and torchrun."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from dist_helpers import run_ranks

torch = pytest.importorskip("torch")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "train_digits.py")


def _worker_env(rank: int, world: int) -> None:
    """What a launcher would set: the Trainer finds its rank and world here (the process group
    itself is already up, made by run_ranks)."""
    os.environ.update(
        PSCORE_RANK=str(rank),
        PSCORE_WORLD_SIZE=str(world),
        PSCORE_MASTER_ADDR="127.0.0.1",
        PSCORE_MASTER_PORT="1",
    )


def _model(seed: int = 0, unused: bool = False):
    torch.manual_seed(seed)
    layers = [torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3)]
    model = torch.nn.Sequential(*layers)
    if unused:  # a parameter no step ever touches
        model.spare = torch.nn.Linear(3, 3)
    return model


def _data(n: int):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 6, generator=g), torch.randint(0, 3, (n,), generator=g)


def _flat(model) -> list:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


def _distributed_vs_global(rank, world, optimizer_args, steps, bucket_mb):
    """Trains `steps` steps on 2 workers (each its own batch, distinct model seeds so the
    chief's broadcast matters), then rank 0 trains one process on the concatenated batches."""
    import pscore

    _worker_env(rank, world)
    x, y = _data(8 * world * steps)
    trainer = pscore.Trainer(
        _model(seed=rank),
        torch.nn.functional.cross_entropy,
        optimizer="sgd",
        optimizer_args=optimizer_args,
        strategy_args={"bucket_cap_mb": bucket_mb, "first_bucket_mb": bucket_mb},
    )
    batches = [(x[i * 16 : (i + 1) * 16], y[i * 16 : (i + 1) * 16]) for i in range(steps)]
    for bx, by in batches:
        trainer.step((bx[rank * 8 : (rank + 1) * 8], by[rank * 8 : (rank + 1) * 8]))
    distributed = _flat(trainer.model)
    if rank != 0:
        return distributed, None
    single = _model(seed=0)
    opt = torch.optim.SGD(single.parameters(), **optimizer_args)
    for bx, by in batches:
        opt.zero_grad()
        torch.nn.functional.cross_entropy(single(bx), by).backward()
        opt.step()
    return distributed, _flat(single)


@pytest.mark.parametrize(
    ("optimizer_args", "bucket_mb"),
    [({"lr": 0.1}, 25.0), ({"lr": 0.05, "momentum": 0.9}, 0.0002)],
    ids=["sgd-one-bucket", "momentum-many-buckets"],
)
def test_two_workers_match_one_process_on_the_global_batch(optimizer_args, bucket_mb):
    results = run_ranks(_distributed_vs_global, 2, optimizer_args, 6, bucket_mb, timeout=60)
    (d0, single), (d1, _) = results[0], results[1]
    assert d0 == d1  # identical on both workers, bit for bit
    assert max(abs(a - b) for a, b in zip(d0, single)) < 1e-5
    assert max(abs(a - b) for a, b in zip(d0, _flat(_model(seed=0)))) > 1e-3  # it trained


def _uneven(rank, world, n, batch, unused):
    import pscore

    _worker_env(rank, world)
    trainer = pscore.Trainer(
        _model(unused=unused),
        torch.nn.functional.cross_entropy,
        optimizer_args={"lr": 0.05, "momentum": 0.9},
    )
    history = trainer.fit(_data(n), epochs=2, batch_size=batch)
    return _flat(trainer.model), [h["steps"] for h in history]


@pytest.mark.parametrize(
    ("n", "batch", "steps"),
    [(33, 4, [[5, 5], [4, 4]]), (35, 4, [[5, 5], [5, 5]]), (10, 4, [[2, 2], [2, 2]])],
    ids=["a-batch-fewer", "odd-size-no-join", "even"],
)
def test_uneven_shards_finish_with_identical_weights(n, batch, steps):
    # 33 samples, batch 4: shards of 17 and 16 -> 5 and 4 batches: worker 1 joins once an epoch.
    results = run_ranks(_uneven, 2, n, batch, False, timeout=60)
    assert results[0][0] == results[1][0]
    assert [results[r][1] for r in (0, 1)] == steps


def test_a_worker_a_whole_batch_short_joins_and_unused_parameters_do_not_hang():
    # 9 samples, batch 1: shards of 5 and 4; the spare layer never gets a gradient.
    results = run_ranks(_uneven, 2, 9, 1, True, timeout=60)
    assert results[0][0] == results[1][0]
    assert results[0][1] == [5, 5] and results[1][1] == [4, 4]


class _Bag(torch.nn.Module):
    """A sparse-gradient embedding and a dense head."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(20, 4, sparse=True)
        self.head = torch.nn.Linear(4, 3)

    def forward(self, ids):
        return self.head(self.emb(ids))


def _sparse(rank, world):
    import pscore

    _worker_env(rank, world)
    g = torch.Generator().manual_seed(2)
    ids, y = torch.randint(0, 20, (32,), generator=g), torch.randint(0, 3, (32,), generator=g)
    trainer = pscore.Trainer(_Bag(), torch.nn.functional.cross_entropy, optimizer_args={"lr": 0.1})
    for step in range(3):
        rows = slice(step * 8 + rank * 4, step * 8 + rank * 4 + 4)
        trainer.step((ids[rows], y[rows]))
    distributed = _flat(trainer.model)
    single = _Bag()
    opt = torch.optim.SGD(single.parameters(), lr=0.1)
    for step in range(3):
        opt.zero_grad()
        rows = slice(step * 8, step * 8 + 8)
        torch.nn.functional.cross_entropy(single(ids[rows]), y[rows]).backward()
        opt.step()
    return distributed, _flat(single)


def test_sparse_embedding_gradients_are_reduced_dense():
    results = run_ranks(_sparse, 2, timeout=60)
    assert results[0][0] == results[1][0]
    assert max(abs(a - b) for a, b in zip(*results[0])) < 1e-5


def _mismatched(rank, world):
    import pscore

    _worker_env(rank, world)
    model = torch.nn.Linear(4, 2 + rank)
    trainer = pscore.Trainer(model, torch.nn.functional.mse_loss)
    try:
        trainer.step((torch.zeros(1, 4), torch.zeros(1, 2 + rank)))
    except ValueError as e:
        return str(e)
    return "no error"


def test_models_that_differ_across_workers_name_the_workers():
    messages = run_ranks(_mismatched, 2, timeout=60)
    for message in messages.values():
        assert "the workers' models differ: worker(s) [1]" in message


def test_an_unknown_strategy_lists_the_strategies():
    import pscore
    from pscore.train import STRATEGIES

    with pytest.raises(ValueError, match="unknown strategy 'allreduse'") as e:
        pscore.Trainer(torch.nn.Linear(2, 2), torch.nn.functional.mse_loss, strategy="allreduse")
    assert all(name in str(e.value) for name in STRATEGIES)


def test_bad_bucket_sizes_are_named():
    from pscore.train.strategies.allreduce import AllReduce

    with pytest.raises(ValueError, match="bucket_cap_mb must be a number > 0, got 0"):
        AllReduce(bucket_cap_mb=0)


def _env() -> dict:
    import pscore

    python = os.path.dirname(os.path.dirname(os.path.abspath(pscore.__file__)))
    return dict(os.environ, PYTHONPATH=os.pathsep.join([python, os.environ.get("PYTHONPATH", "")]))


def _check_example(*launcher: str) -> None:
    command = [*launcher, EXAMPLE, "--strategy", "allreduce", "--min-accuracy", "0.95"]
    result = subprocess.run(
        command, env=_env(), capture_output=True, text=True, timeout=180, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "strategy allreduce:" in result.stdout and "test accuracy 0.9" in result.stdout


def test_digits_example_under_pscore_run():
    _check_example(sys.executable, "-m", "pscore.launch", "-n", "2")


@pytest.mark.skipif(shutil.which("torchrun") is None, reason="torchrun is not installed")
def test_digits_example_under_torchrun():
    _check_example("torchrun", "--standalone", "--nproc-per-node", "2")


def _state_round_trip(rank, world):
    import pscore

    _worker_env(rank, world)
    x, y = _data(16)
    args = {"lr": 0.05, "momentum": 0.9}
    first = pscore.Trainer(_model(), torch.nn.functional.cross_entropy, optimizer_args=args)
    first.step((x[:8], y[:8]))
    saved = first.strategy.state_tensors()
    second = pscore.Trainer(_model(), torch.nn.functional.cross_entropy, optimizer_args=args)
    second.step((x[8:], y[8:]))  # other momentum, then the first trainer's state
    second.model.load_state_dict(first.model.state_dict())
    second.strategy.load_state_tensors(saved)
    for t in (first, second):
        t.step((x[8:], y[8:]))
    return _flat(first.model) == _flat(second.model), sorted(saved)[:2]


def test_optimizer_state_round_trips_through_state_tensors():
    same, names = run_ranks(_state_round_trip, 1, timeout=60)[0]
    assert same  # momentum restored: the next step matches
    assert names == ["optimizer/0/momentum_buffer", "optimizer/1/momentum_buffer"]
