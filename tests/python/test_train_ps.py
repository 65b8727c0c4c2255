"""The Trainer's parameter-server strategies (ps-sync, ps-async, ssp) on real processes: ps tasks
and workers started by pscore-run, by TF_CONFIG in any order, and pserver + workers by hand."""

from __future__ import annotations

import json
import os

import pytest
from train_ps_helpers import ROOT, launch, write

torch = pytest.importorskip("torch")

import pscore
from pscore.train.run import Run
from pscore.train.strategies.ps_sync import PSSync

# Each worker trains a small net on its half of 16 samples (rank r takes r::2) with a loop of its
# own (step(), then close() ends the job), and saves its final weights and the servers' step.
EQUALITY = """
    import json, sys, torch, pscore

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 5, generator=g), torch.randn(16, 2, generator=g)
    optimizer, args = sys.argv[1], json.loads(sys.argv[2])
    trainer = pscore.Trainer(model, torch.nn.functional.mse_loss, optimizer=optimizer,
                             optimizer_args=args, strategy="ps-sync")
    rank = trainer.run.rank
    for epoch in range(2):
        for b in range(2):
            trainer.step((x[rank::2][b * 4 : (b + 1) * 4], y[rank::2][b * 4 : (b + 1) * 4]))
    trainer.close()
    trainer.evaluate((x, y))  # after the end: the model's final weights, no servers needed
    torch.save({"state": model.state_dict(), "server_step": trainer.strategy.global_step(),
                "steps": trainer.global_step}, f"weights{rank}.pt")
"""


def reference(optimizer: str, args: dict) -> dict:
    """torch.optim on one process, each step on the mean of both workers' gradients."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 5, generator=g), torch.randn(16, 2, generator=g)
    opt = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}[optimizer](model.parameters(), **args)
    for _epoch in range(2):
        for b in range(2):
            grads = []
            for rank in range(2):
                model.zero_grad()
                xs, ys = x[rank::2][b * 4 : (b + 1) * 4], y[rank::2][b * 4 : (b + 1) * 4]
                torch.nn.functional.mse_loss(model(xs), ys).backward()
                grads.append([p.grad.clone() for p in model.parameters()])
            for p, g0, g1 in zip(model.parameters(), *grads):
                p.grad = (g0 + g1) / 2
            opt.step()
    return model.state_dict()


def test_ps_sync_is_the_server_optimizer_on_the_mean_gradient(tmp_path):
    optimizer, args = "adam", {"lr": 0.01}
    script = write(tmp_path, "equality.py", EQUALITY)
    result = launch(
        ["--workers", "2", "--servers", "1", script, optimizer, json.dumps(args)], tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "still run" not in result.stderr  # close() ended the job: the ps task left by itself
    expected = reference(optimizer, args)
    saved = [torch.load(tmp_path / f"weights{r}.pt") for r in range(2)]
    for out in saved:
        assert out["steps"] == 4
        for name, value in expected.items():
            torch.testing.assert_close(out["state"][name], value, atol=2e-6, rtol=1e-5)
    assert saved[0]["server_step"] == 4  # the chief counts one global step per sync round


DIGITS = os.path.join(ROOT, "examples", "train_digits.py")


# Asynchronous pushes (each worker its own group here) take 20 epochs to clear 95% with a margin.
@pytest.mark.parametrize(
    ("strategy", "groups", "epochs"),
    [("ps-sync", "1", "10"), ("ps-async", "2", "20"), ("ssp", "2", "20")],
)
def test_digits_reach_95_percent(tmp_path, strategy, groups, epochs):
    flags = ["--workers", "2", "--servers", "1", "--worker-groups", groups, DIGITS]
    flags += ["--strategy", strategy, "--epochs", epochs, "--min-accuracy", "0.95"]
    result = launch(flags, tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    line = [ln for ln in result.stdout.splitlines() if "test accuracy" in ln]
    assert len(line) == 1 and line[0].startswith("[rank0]: strategy "), result.stdout
    assert float(line[0].rsplit(" ", 1)[1]) >= 0.95


# 65 samples, batches of 16: on 2 workers, worker 0 has 3 batches per epoch and worker 1 two; on
# 4 workers, worker 0 has 2 and the others 1 (groups of 2 run the most any worker has: 2).
UNEVEN = """
    import sys, torch, pscore, pscore.train

    class Table(pscore.train.Hook):
        def begin(self, trainer):
            settings = dict(trainer.strategy.client.table("dense/weight").settings)
            self.kind = settings["consistency"], settings.get("staleness")

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    x, y = torch.randn(65, 4), torch.randint(0, 2, (65,))
    table = Table()
    trainer = pscore.Trainer(model, torch.nn.functional.cross_entropy, strategy=sys.argv[1],
                             optimizer_args={"lr": 0.1}, hooks=[table])
    history = trainer.fit((x, y), epochs=3, batch_size=16)
    print(f"worker {trainer.run.rank} steps {trainer.global_step} table {table.kind}", flush=True)
"""


@pytest.mark.parametrize(
    ("strategy", "groups", "steps"),
    [("ps-sync", "1", (9, 6)), ("ssp", "2", (9, 6)), ("ps-async", "2", (6, 6, 6, 6))],
)
def test_uneven_shards_finish(tmp_path, strategy, groups, steps):
    table = {"ps-sync": "('sync', '0')", "ssp": "('ssp', '3')", "ps-async": "('async', '0')"}
    script = write(tmp_path, "uneven.py", UNEVEN)
    flags = ["--workers", str(len(steps)), "--servers", "1", "--worker-groups", groups]
    result = launch([*flags, "--grace-period", "30", script, strategy], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank, n in enumerate(steps):
        assert f"[rank{rank}]: worker {rank} steps {n} table {table[strategy]}" in result.stdout
    # the ps task ended by itself: the launcher did not have to stop it
    assert "still run" not in result.stderr


def test_a_ps_strategy_without_servers_is_a_clear_error():
    model = torch.nn.Linear(2, 2)
    with pytest.raises(ValueError, match="strategy 'ps-sync' needs parameter servers"):
        pscore.Trainer(model, torch.nn.functional.mse_loss, strategy="ps-sync")


def test_bad_strategy_options_are_clear_errors():
    model = torch.nn.Linear(2, 2)
    loss = torch.nn.functional.mse_loss
    with pytest.raises(ValueError, match="staleness must be an int >= 0"):
        pscore.Trainer(model, loss, strategy="ssp", strategy_args={"staleness": -1})
    with pytest.raises(TypeError, match="takes no option 'staleness'"):
        pscore.Trainer(model, loss, strategy="ps-sync", strategy_args={"staleness": 1})
    two_workers = Run("chief", 0, 2, num_servers=1)
    with pytest.raises(ValueError, match="backup_workers=2 leaves no worker to close a round"):
        PSSync(backup_workers=2).check(two_workers)
    PSSync(backup_workers=1).check(two_workers)


@pytest.mark.parametrize("strategy", ["ps-sync", "ssp"])
def test_a_stopped_job_resumes_to_the_uninterrupted_weights(tmp_path, strategy):
    """A job stopped at step 30 and started again over its checkpoint ends with the weights of a
    job that ran through: the servers' tables, optimizer state and rounds come back, the workers'
    pushes are not dropped as late, and no worker counts as done from the checkpoint."""

    def run(directory: str, *extra: str) -> dict:
        args = ["--workers", "2", "--servers", "1", DIGITS, "--strategy", strategy]
        args += ["--epochs", "2", "--digest", "--checkpoint-dir", directory, *extra]
        result = launch(args, tmp_path)
        assert result.returncode == 0, result.stdout + result.stderr
        lines = [line for line in result.stdout.splitlines() if " weights " in line]
        assert len(lines) == 2, result.stdout
        return {line.split()[2]: line.split()[-1] for line in lines}, result.stdout

    whole, _ = run(str(tmp_path / "whole"))
    stopped = str(tmp_path / "stopped")
    run(stopped, "--stop-at-step", "30")
    resumed, out = run(stopped)
    assert "resumed from" in out and "at global step 30" in out, out
    assert len(set(whole.values())) == 1  # both workers hold the same weights
    assert resumed == whole
