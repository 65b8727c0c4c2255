"""The hybrid strategy: dense parameters by allreduce, embedding tables on real pserver
processes. Two workers under `python -m pscore.launch` must train exactly as one process with
torch.optim.SGD on the global batch; tables never materialise on a worker; unsupported
embedding options are clear errors; examples/embeddings.py reaches its AUC."""

from __future__ import annotations

import gc
import os
import re
import runpy
import subprocess
import sys
import textwrap
import weakref
from pathlib import Path
from typing import Any

import pytest

import pscore as pscore_package

torch = pytest.importorskip("torch")

from pscore.bench.ctr import local_servers

REPO = Path(__file__).resolve().parents[2]
# The package under test (the installed one in CI, the source tree with a dev build).
PACKAGE_ROOT = str(Path(pscore_package.__file__).resolve().parents[1])
HANG_GUARD_S = 240

# A small model with every kind of table the strategy handles: an Embedding with a padding
# row, an EmbeddingBag (mean over a padded bag) and dense layers.
MODEL = """
import torch

class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(40, 4, padding_idx=0)
        self.bag = torch.nn.EmbeddingBag(30, 3, mode="mean", padding_idx=0)
        self.out = torch.nn.Linear(7, 2)

    def forward(self, ids, tags):
        return self.out(torch.cat([self.emb(ids), self.bag(tags)], 1))

def small_model():
    torch.manual_seed(0)
    return Small()

def small_data():
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 40, (64,), generator=g)
    tags = torch.randint(0, 30, (64, 3), generator=g)
    tags[:, 0] = torch.randint(1, 30, (64,), generator=g)  # no bag of padding only
    return ids, tags, torch.randint(0, 2, (64,), generator=g)
"""

WORKER = """
import sys
import torch
import pscore
from model import small_data, small_model

model = small_model()
trainer = pscore.Trainer(model, torch.nn.functional.cross_entropy, optimizer="sgd",
                         optimizer_args={"lr": 0.5}, strategy="hybrid")
data = small_data()
trainer.evaluate(data)  # sets up: the tables are on the servers from here on
with torch.no_grad():
    initial = {"emb": model.emb(torch.arange(40)), "bag": model.bag(torch.arange(30)[:, None])}
trainer.fit(data, epochs=2, batch_size=8, shuffle=False)
with torch.no_grad():
    final = {"emb": model.emb(torch.arange(40)), "bag": model.bag(torch.arange(30)[:, None])}
if trainer.run.is_chief:
    torch.save({"initial": initial, "final": final, "dense": model.state_dict(),
                "weights": [model.emb.weight.detach(), model.bag.weight.detach()]}, sys.argv[1])
"""


def _launch(args: list[str], env_extra: dict, cwd: Path | None = None) -> Any:
    env = dict(os.environ, PYTHONPATH=f"{cwd or ''}{os.pathsep}{PACKAGE_ROOT}", **env_extra)
    return subprocess.run(
        [sys.executable, "-m", "pscore.launch", "-n", "2", *args],
        check=False,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )


def _reference(path: Path) -> Any:
    """The same model trained by one process: torch.optim.SGD on each global batch (worker 0's
    batch and worker 1's, interleaved as the Trainer shards them), from the same initial rows."""
    source = runpy.run_path(str(path.parent / "model.py"))
    model, (ids, tags, labels) = source["small_model"](), source["small_data"]()
    initial = torch.load(path)["initial"]
    with torch.no_grad():
        model.emb.weight.copy_(initial["emb"])
        model.bag.weight.copy_(initial["bag"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    for _epoch in range(2):
        for start in range(0, 64, 16):  # 2 workers x batch 8: the global batch is 16 samples
            batch = slice(start, start + 16)
            loss = torch.nn.functional.cross_entropy(model(ids[batch], tags[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


def test_hybrid_equals_one_process_sgd(tmp_path):
    (tmp_path / "model.py").write_text(textwrap.dedent(MODEL))
    (tmp_path / "worker.py").write_text(textwrap.dedent(WORKER))
    out = tmp_path / "result.pt"
    with local_servers(2, 2) as env:
        done = _launch(["worker.py", str(out)], env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    got, want = torch.load(out), _reference(out)
    # fit() pulled the trained tables back into the modules
    torch.testing.assert_close(got["weights"][0], want.emb.weight.detach(), atol=1e-5, rtol=0)
    bag_rows = want.bag.weight.detach().clone()
    bag_rows[0] = 0.0  # the padding row
    torch.testing.assert_close(got["weights"][1], bag_rows, atol=1e-5, rtol=0)
    assert set(got["dense"]) == {"emb.weight", "bag.weight", "out.weight", "out.bias"}
    assert not torch.equal(got["final"]["emb"], got["initial"]["emb"])  # it trained
    torch.testing.assert_close(got["final"]["emb"], want.emb.weight.detach(), atol=1e-5, rtol=0)
    torch.testing.assert_close(got["final"]["bag"], want.bag.weight.detach(), atol=1e-5, rtol=0)
    for name, value in want.out.state_dict().items():
        torch.testing.assert_close(got["dense"][f"out.{name}"], value, atol=1e-5, rtol=0)


UNEVEN = """
import sys
import torch
import pscore
from model import small_data, small_model

model = small_model()
trainer = pscore.Trainer(model, torch.nn.functional.cross_entropy, strategy="hybrid",
                         optimizer_args={"lr": 0.5})
ids, tags, labels = small_data()
history = trainer.fit((ids[:33], tags[:33], labels[:33]), epochs=2, batch_size=8)
with torch.no_grad():
    rows = model.emb(torch.arange(40)).sum().item()
print(f"worker {trainer.run.rank}: steps {[h['steps'] for h in history]} "
      f"dense {model.out.weight.sum().item():.6f} rows {rows:.6f}", flush=True)
"""


def test_uneven_shards_finish_with_the_same_weights(tmp_path):
    """33 samples, batch 8: worker 0 has 3 batches an epoch, worker 1 two and a join step."""
    (tmp_path / "model.py").write_text(textwrap.dedent(MODEL))
    (tmp_path / "uneven.py").write_text(textwrap.dedent(UNEVEN))
    with local_servers(1, 2) as env:
        done = _launch(["uneven.py"], env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    found = sorted(re.findall(r"worker (\d): steps (\[.*?\]) dense (\S+) rows (\S+)", done.stdout))
    assert [(w, steps) for w, steps, _, _ in found] == [("0", "[3, 3]"), ("1", "[2, 2]")]
    assert found[0][2:] == found[1][2:]  # dense weights and rows agree on both workers


def test_hybrid_needs_servers(monkeypatch):
    import pscore

    monkeypatch.delenv("PSCORE_NUM_SERVERS", raising=False)
    monkeypatch.delenv("PSCORE_STORE", raising=False)
    model = torch.nn.Sequential(torch.nn.Embedding(10, 2), torch.nn.Linear(2, 1))
    with pytest.raises(ValueError, match=r"strategy 'hybrid' needs parameter servers"):
        pscore.Trainer(model, torch.nn.functional.mse_loss, strategy="hybrid")


@pytest.fixture
def one_worker_job(monkeypatch):
    """This process as the only worker of a job with one real pserver."""
    import pscore

    with local_servers(1, 1) as env:
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        yield pscore
        if pscore.collectives.is_initialized():
            pscore.collectives.destroy_process_group()


def test_a_million_rows_never_reach_the_worker(one_worker_job):
    model = torch.nn.Sequential(torch.nn.Embedding(1_000_000, 8), torch.nn.Linear(8, 1))
    table = weakref.ref(model[0].weight)
    trainer = one_worker_job.Trainer(model, torch.nn.functional.mse_loss, strategy="hybrid")
    ids = torch.tensor([3, 999_999, 3, 17])
    trainer.step((ids, torch.zeros(4, 1)))
    gc.collect()
    assert table() is None  # the 1M x 8 weight was freed
    assert model[0].weight is None
    assert sum(p.numel() for p in model.parameters()) == 9  # the Linear only
    rows = trainer.strategy.tables[0]
    assert rows.table == "hybrid/0"
    with pytest.raises(IndexError, match=r"Embedding '0': id 1000000 is out of range"):
        model(torch.tensor([1_000_000]))
    trainer.close()


def test_embedding_bag_with_offsets_and_weights_matches_torch(one_worker_job):
    """The lookup (pulled rows, local ids) gives torch's output and torch's row gradients."""
    from pscore.train.strategies.hybrid import Hybrid

    bag = torch.nn.EmbeddingBag(50, 4, mode="sum", padding_idx=7)
    model = torch.nn.Sequential(bag)
    trainer = one_worker_job.Trainer(
        model, torch.nn.functional.mse_loss, strategy=Hybrid(row_init={"std": 0.5})
    )
    trainer.evaluate((torch.tensor([[1]]), torch.zeros(1, 4)))  # setup only
    with torch.no_grad():
        full = bag(torch.arange(50)[:, None], per_sample_weights=torch.ones(50, 1))
    assert full[7].abs().sum() == 0  # the padding row reads as zeros
    ids = torch.tensor([3, 7, 3, 9, 12, 3])
    offsets, weights = torch.tensor([0, 2, 5]), torch.rand(6)
    out = bag(ids, offsets, per_sample_weights=weights)
    reference = full.clone().requires_grad_(True)
    want = torch.nn.functional.embedding_bag(
        ids, reference, offsets, mode="sum", per_sample_weights=weights, padding_idx=7
    )
    torch.testing.assert_close(out, want)
    out.pow(2).sum().backward()
    want.pow(2).sum().backward()
    pushed_ids, grads = trainer.strategy.tables[0].gradient()
    assert pushed_ids.tolist() == [3, 9, 12]  # distinct, the padding id left out
    torch.testing.assert_close(grads, reference.grad[pushed_ids])
    trainer.close()


def test_servers_checkpoint_round_trips_the_rows(one_worker_job, tmp_path):
    model = torch.nn.Sequential(torch.nn.Embedding(20, 3), torch.nn.Linear(3, 1))
    trainer = one_worker_job.Trainer(
        model, torch.nn.functional.mse_loss, optimizer="adam", strategy="hybrid"
    )
    batch = (torch.tensor([1, 5, 5, 19]), torch.ones(4, 1))
    trainer.step(batch)
    trainer.strategy.save_servers(str(tmp_path))
    with torch.no_grad():
        saved = model[0](torch.arange(20))
    trainer.step(batch)
    with torch.no_grad():
        assert not torch.equal(model[0](torch.arange(20)), saved)
    trainer.strategy.load_servers(str(tmp_path))
    with torch.no_grad():
        torch.testing.assert_close(model[0](torch.arange(20)), saved, atol=0, rtol=0)
    assert "optimizer/groups" in trainer.strategy.state_tensors()  # the dense half's Adam
    trainer.close()


@pytest.mark.parametrize(
    ("module", "message"),
    [
        (torch.nn.Embedding(10, 2, max_norm=1.0), r"Embedding 'table' has max_norm=1.0"),
        (torch.nn.Embedding(10, 2).double(), r"Embedding 'table' has torch.float64 weights"),
        (torch.nn.EmbeddingBag(10, 2, max_norm=2.0), r"EmbeddingBag 'table' has max_norm"),
    ],
)
def test_unsupported_tables_are_named(module, message):
    from pscore.train.server_embeddings import find_embeddings

    model = torch.nn.Module()
    model.table = module
    with pytest.raises(ValueError, match=r"strategy 'hybrid': " + message):
        find_embeddings(model)


def test_tied_weights_and_bad_options_are_refused(one_worker_job):
    from pscore.train.server_embeddings import find_embeddings
    from pscore.train.strategies.hybrid import Hybrid

    model = torch.nn.Module()
    model.emb, model.head = torch.nn.Embedding(10, 2), torch.nn.Linear(2, 10, bias=False)
    model.head.weight = model.emb.weight
    with pytest.raises(ValueError, match=r"Embedding 'emb' shares its weight with head.weight"):
        find_embeddings(model)
    shared = torch.nn.Module()
    shared.a = shared.b = torch.nn.Embedding(10, 2)  # one table reached by two paths
    assert [name for name, _ in find_embeddings(shared)] == ["a"]
    with pytest.raises(ValueError, match=r"min_rows must be an int >= 0, got -1"):
        Hybrid(min_rows=-1)
    with pytest.raises(ValueError, match=r"row_init takes .* not 'sd'"):
        Hybrid(row_init={"sd": 1.0})
    trainer = one_worker_job.Trainer(
        torch.nn.Sequential(torch.nn.Embedding(10, 2), torch.nn.Linear(2, 1)),
        torch.nn.functional.mse_loss,
        strategy="hybrid",
        strategy_args={"min_rows": 11},
    )
    trainer.step((torch.tensor([1]), torch.zeros(1, 1)))  # no table that big: all allreduce
    assert trainer.strategy.tables == []
    assert trainer.model[0].weight.shape == (10, 2)
    trainer.close()


def test_embeddings_example_reaches_its_auc():
    with local_servers(1, 2) as env:
        done = _launch([str(REPO / "examples" / "embeddings.py"), "--min-auc", "0.75"], env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "strategy hybrid: 1000000 rows" in done.stdout


def test_digits_without_embeddings_train_by_allreduce_under_hybrid():
    """train_digits' MLP has no embedding table: hybrid trains it all by allreduce (and says
    so), with the ps task started by pscore-run serving nothing and ending with the job."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PSCORE_")}
    env["PYTHONPATH"] = PACKAGE_ROOT
    launch = [sys.executable, "-m", "pscore.launch", "--workers", "2", "--servers", "1"]
    script = [str(REPO / "examples" / "train_digits.py"), "--strategy", "hybrid"]
    done = subprocess.run(
        [*launch, *script, "--min-accuracy", "0.95"],
        check=False,
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "every parameter trains by allreduce" in done.stdout
    assert "strategy hybrid:" in done.stdout and "test accuracy" in done.stdout
