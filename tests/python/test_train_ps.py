"""The Trainer's parameter-server strategies (ps-sync, ps-async, ssp) on real processes: ps tasks
and workers started by pscore-run, by TF_CONFIG in any order, and pserver + workers by hand."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

import pscore  # noqa: E402
from pscore.store.native import TCPStore  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PYTHON_PATH = os.path.join(ROOT, "python")
HANG_GUARD_S = 120


def environment(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PSCORE_", "TF_CONFIG"))}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PYTHON_PATH, os.environ.get("PYTHONPATH")) if p)
    env.update(extra)
    return env


def launch(args: list, cwd, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pscore.launch", *args],
        env=environment(**extra),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HANG_GUARD_S,
        check=False,
    )


def write(tmp_path, name: str, body: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


# Each worker trains a small net on its half of 16 samples (shuffle off: rank r gets r::2) and
# saves its final weights; the chief also records the servers' global step before the end.
EQUALITY = """
    import json, sys, torch, pscore, pscore.train

    class Steps(pscore.train.Hook):
        def after_epoch(self, trainer, epoch, metrics):
            self.server_step = trainer.strategy.global_step()

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2))
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(16, 5, generator=g), torch.randn(16, 2, generator=g)
    optimizer, args = sys.argv[1], json.loads(sys.argv[2])
    hook = Steps()
    trainer = pscore.Trainer(model, torch.nn.functional.mse_loss, optimizer=optimizer,
                             optimizer_args=args, strategy="ps-sync", hooks=[hook])
    history = trainer.fit((x, y), epochs=2, batch_size=4, shuffle=False)
    torch.save({"state": model.state_dict(), "server_step": hook.server_step,
                "steps": trainer.global_step}, f"weights{trainer.run.rank}.pt")
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


@pytest.mark.parametrize(
    ("optimizer", "args"), [("adam", {"lr": 0.01}), ("sgd", {"lr": 0.1, "momentum": 0.9})]
)
def test_ps_sync_is_the_server_optimizer_on_the_mean_gradient(tmp_path, optimizer, args):
    script = write(tmp_path, "equality.py", EQUALITY)
    result = launch(
        ["--workers", "2", "--servers", "1", script, optimizer, json.dumps(args)], tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    expected = reference(optimizer, args)
    saved = [torch.load(tmp_path / f"weights{r}.pt") for r in range(2)]
    for out in saved:
        assert out["steps"] == 4
        for name, value in expected.items():
            torch.testing.assert_close(out["state"][name], value, atol=2e-6, rtol=1e-5)
    assert saved[0]["server_step"] == 4  # the chief counts one global step per sync round


DIGITS = os.path.join(ROOT, "examples", "train_digits.py")


@pytest.mark.parametrize(
    "flags",
    [
        ["--workers", "2", "--servers", "1", DIGITS, "--strategy", "ps-sync"],
        ["--workers", "2", "--servers", "1", "--worker-groups", "2", DIGITS, "--strategy", "ps-async"],
        ["--workers", "2", "--servers", "1", "--worker-groups", "2", DIGITS, "--strategy", "ssp"],
        ["--workers", "4", "--servers", "1", "--worker-groups", "2", DIGITS, "--strategy", "ps-async"],
    ],
    ids=["ps-sync", "ps-async", "ssp", "ps-async-4-workers-2-groups"],
)
def test_digits_reach_95_percent(tmp_path, flags):
    result = launch([*flags, "--min-accuracy", "0.95"], tmp_path)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    line = [ln for ln in result.stdout.splitlines() if "test accuracy" in ln]
    assert len(line) == 1 and line[0].startswith("[rank0]: strategy "), result.stdout
    assert float(line[0].rsplit(" ", 1)[1]) >= 0.95


# 65 samples on 2 workers, batches of 16: worker 0 has 3 batches per epoch, worker 1 two.
UNEVEN = """
    import sys, torch, pscore
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    x, y = torch.randn(65, 4), torch.randint(0, 2, (65,))
    trainer = pscore.Trainer(model, torch.nn.functional.cross_entropy, strategy=sys.argv[1],
                             optimizer_args={"lr": 0.1})
    history = trainer.fit((x, y), epochs=3, batch_size=16)
    print(f"worker {trainer.run.rank} steps {trainer.global_step}", flush=True)
"""


@pytest.mark.parametrize(
    ("strategy", "groups", "steps"),
    [("ps-sync", "1", (9, 6)), ("ps-async", "1", (9, 9)), ("ssp", "2", (9, 6))],
)
def test_uneven_shards_finish(tmp_path, strategy, groups, steps):
    script = write(tmp_path, "uneven.py", UNEVEN)
    flags = ["--workers", "2", "--servers", "1", "--worker-groups", groups]
    result = launch([*flags, "--grace-period", "30", script, strategy], tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    for rank, n in enumerate(steps):
        assert f"[rank{rank}]: worker {rank} steps {n}" in result.stdout
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


# --- TF_CONFIG: one ps, one chief, one worker; the same script on each, started in any order --
TF_SCRIPT = """
    import torch, pscore
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    g = torch.Generator().manual_seed(3)
    x, y = torch.randn(64, 4, generator=g), torch.randint(0, 2, (64,), generator=g)
    trainer = pscore.Trainer(model, torch.nn.functional.cross_entropy, strategy="ps-sync",
                             optimizer_args={"lr": 0.1})
    trainer.fit((x, y), epochs=2, batch_size=16)
    print("done", trainer.run.role, model.weight.sum().item(), flush=True)
"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("order", [("chief", "worker", "ps"), ("ps", "worker", "chief")])
def test_tf_config_roles_start_in_any_order(tmp_path, order):
    script = write(tmp_path, "tf.py", TF_SCRIPT)
    cluster = {r: [f"127.0.0.1:{_free_port()}"] for r in ("chief", "worker", "ps")}
    procs = {}
    try:
        for role in order:
            tf = json.dumps({"cluster": cluster, "task": {"type": role, "index": 0}})
            procs[role] = subprocess.Popen(
                [sys.executable, script],
                env=environment(TF_CONFIG=tf),
                cwd=tmp_path,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            if role != order[-1]:
                try:  # the next task starts once this one is well under way
                    procs[role].wait(1.5)
                except subprocess.TimeoutExpired:
                    pass
        outs = {role: p.communicate(timeout=HANG_GUARD_S) for role, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
    for role, p in procs.items():
        assert p.returncode == 0, (role, outs[role][1][-3000:])
    weights = {r: outs[r][0].split()[-1] for r in ("chief", "worker")}
    assert weights["chief"] == weights["worker"]  # both pulled the servers' final weights


def test_pserver_by_hand_with_workers_from_pscore_run(tmp_path):
    """pserver processes + workers that find them through PSCORE_STORE / PSCORE_NUM_SERVERS;
    the servers are the user's: they keep running until told to stop."""
    store = TCPStore("127.0.0.1", 0, is_master=True)
    url = f"tcp://127.0.0.1:{store.port}"
    servers = [
        subprocess.Popen(
            [sys.executable, "-m", "pscore.ps.pserver", "--shard", str(i), "--num-shards", "2"]
            + ["--num-workers", "2", "--store", url],
            env=environment(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    try:
        script = write(tmp_path, "tf.py", TF_SCRIPT)
        result = launch(["-n", "2", script], tmp_path, PSCORE_STORE=url, PSCORE_NUM_SERVERS="2")
        assert result.returncode == 0, result.stderr[-3000:]
        assert result.stdout.count("done") == 2
        assert all(s.poll() is None for s in servers)
    finally:
        for s in servers:
            s.send_signal(signal.SIGTERM)
        for s in servers:
            s.communicate(timeout=30)
    assert all(s.returncode == 0 for s in servers)
