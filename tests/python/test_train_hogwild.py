"""The hogwild and distributed-hogwild strategies under pscore-run: examples/train_digits.py on 2
workers of one machine, and on two "machines" of this host (two launchers, --nnodes 2) whose
tables are averaged; every worker ends with the same weights, nothing is left in /dev/shm, an
optimizer the Hogwild kernels lack and a worker that dies mid-training are errors, not hangs."""

from __future__ import annotations

import glob
import os
import pathlib
import re
import subprocess
import sys
import textwrap
import uuid

import netns_helpers
import pytest
from conftest import free_port

torch = pytest.importorskip("torch")
pytest.importorskip("sklearn")

from pscore.cluster.discovery import ClusterEnv
from pscore.hogwild import SharedParameters
from pscore.train.run import Run
from pscore.train.strategies.distributed_hogwild import DistributedHogwild
from pscore.train.strategies.hogwild import Hogwild
from pscore.train.strategies.machines import _machines

EXAMPLE = pathlib.Path(__file__).parents[2] / "examples" / "train_digits.py"
TIMEOUT_S = 240  # a hang guard only
# Measured (docs/train.md): test accuracy 0.967-0.982 for 2 hogwild workers at 20 epochs (90
# runs, some beside busy loops) and 0.971-0.976 for 2 machines of 2 distributed-hogwild workers
# (10 epochs: 0.960-0.973, 0.964-0.976). The workers' updates race, so the accuracy is a random
# variable: one CI run of 2 hogwild workers ended under 0.95. A job under MIN_ACCURACY runs once
# more, and the test fails when both runs fall short (or either crashes, or the weights differ).
EPOCHS = ["--epochs", "20"]
MIN_ACCURACY = 0.95
two_hosts = netns_helpers.hosts_fixture(2)


def _job() -> str:
    return f"hwtest-{uuid.uuid4().hex[:10]}"


def _segments(job: str) -> list[str]:
    return sorted(glob.glob(f"/dev/shm/pscore_hw_{job}-*"))


def _env(job: str) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), PSCORE_JOB_ID=job)


def _launch(job: str, *args: str, cwd=None, host=None, **env) -> subprocess.Popen:
    command = [sys.executable, "-m", "pscore.launch", *args]
    return subprocess.Popen(
        host.command(*command) if host else command,
        env={**_env(job), **env},
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen) -> tuple[int, str, str]:
    try:
        out, err = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"the job hung past {TIMEOUT_S} s:\n{out[-2000:]}\n{err[-3000:]}")
    return proc.returncode, out, err


def _digests(out: str) -> dict[int, str]:
    return {int(r): d for r, d in re.findall(r"worker (\d+) weights ([0-9a-f]{64})", out)}


def _accuracy(out: str) -> float:
    return float(re.search(r"test accuracy ([0-9.]+)", out).group(1))


def _accurate_job(run_job) -> str:
    """The stdout of run_job() (which runs a job and returns its chief's stdout and everything
    its nodes printed), run once more when the chief's test accuracy is under MIN_ACCURACY."""
    outputs = []
    for _ in range(2):
        chief_out, printed = run_job()
        outputs.append(printed)
        if _accuracy(chief_out) >= MIN_ACCURACY:
            return printed
    pytest.fail(f"both runs under test accuracy {MIN_ACCURACY}:\n" + "\n----\n".join(outputs))


def _two_workers() -> tuple[str, str]:
    job = _job()
    assert _segments(job) == []
    args = ["--strategy", "hogwild", *EPOCHS, "--digest"]
    code, out, err = _finish(_launch(job, "-n", "2", str(EXAMPLE), *args))
    assert code == 0, out[-2000:] + err[-3000:]
    digests = _digests(out)
    assert sorted(digests) == [0, 1] and len(set(digests.values())) == 1, out
    assert _segments(job) == []
    return out, out


def test_hogwild_trains_digits_on_two_workers_and_leaves_no_segment():
    _accurate_job(_two_workers)


def _two_machines(host_addr: str, hosts: list, **env) -> None:
    """distributed-hogwild on two machines of 2 workers: the chief reaches MIN_ACCURACY, all 4
    workers end equal."""

    def run_job() -> tuple[str, str]:
        job, port = _job(), free_port()
        common = ["--nnodes", "2", "--master-addr", host_addr, "--master-port", str(port)]
        script = [str(EXAMPLE), "--strategy", "distributed-hogwild", *EPOCHS, "--digest"]
        nodes = [
            _launch(job, *common, "-n", "2", "--node-rank", str(n), *script, host=hosts[n], **env)
            for n in range(2)
        ]
        results = [_finish(node) for node in nodes]
        out = results[0][1] + results[1][1]
        for n, (code, _, err) in enumerate(results):
            assert code == 0, (n, out[-2000:], err[-3000:])
        digests = _digests(out)
        assert sorted(digests) == [0, 1, 2, 3], out
        assert len(set(digests.values())) == 1, out  # all 4 workers, both machines
        assert _segments(job) == []
        return results[0][1], out

    _accurate_job(run_job)


def test_distributed_hogwild_on_two_machines_ends_with_equal_weights():
    _two_machines("127.0.0.1", [None, None])


def test_distributed_hogwild_on_two_hosts_over_a_link(two_hosts):
    """The machines in two network namespaces on one link: the averaging crosses it."""
    _two_machines(
        two_hosts[0].addr,
        two_hosts,
        PSCORE_TRANSPORT="tcp",
        PSCORE_AUTH_TOKEN="train-hogwild-secret",
    )


def test_an_optimizer_the_hogwild_kernels_lack_is_named():
    job = _job()
    code, _, err = _finish(
        _launch(job, "-n", "1", str(EXAMPLE), "--strategy", "hogwild", "--optimizer", "rmsprop")
    )
    assert code != 0
    assert "strategy 'hogwild' updates the shared tables with pscore's Hogwild kernels" in err
    assert "which run sgd, adagrad, adam, adamw; optimizer 'rmsprop' is not one of them" in err


def test_hogwild_across_machines_is_refused_for_distributed_hogwild():
    env = ClusterEnv(0, 2, 0, 1, "10.0.0.1", 29500, "test")  # 2 workers, 1 on this machine
    with pytest.raises(ValueError, match="this job has 2 workers, 1 on this machine: use 'distr"):
        Hogwild().check(Run("chief", 0, 2, env=env))
    DistributedHogwild().check(Run("chief", 0, 2, env=env))
    with pytest.raises(ValueError, match="sync_every must be an int >= 1"):
        DistributedHogwild(sync_every=0)


DYING_JOB = """
    import os, sys
    import torch
    import pscore
    from pscore.train import Hook

    class DieAtStep(Hook):
        def after_step(self, trainer, loss):
            if trainer.run.rank == 1 and trainer.global_step == 5:
                os._exit(7)  # no cleanup, as a crash

    torch.manual_seed(0)
    x = torch.randn(4000, 8)
    y = (x.sum(1) > 0).long()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    trainer = pscore.Trainer(model, torch.nn.functional.cross_entropy, strategy=sys.argv[1],
                             optimizer_args={"lr": 0.01}, hooks=[DieAtStep()])
    trainer.fit((x, y), epochs=20, batch_size=8)
    print("fit returned", flush=True)
"""


@pytest.mark.parametrize("strategy", ["hogwild", "distributed-hogwild"])
def test_a_worker_that_dies_mid_training_fails_the_job(tmp_path, strategy):
    job = _job()
    script = tmp_path / "dying.py"
    script.write_text(textwrap.dedent(DYING_JOB))
    code, out, err = _finish(_launch(job, "-n", "2", str(script), strategy, cwd=tmp_path))
    assert code != 0, err[-3000:]
    assert "fit returned" not in out
    summary = err[err.index(" FAILED\n") :].splitlines()
    assert summary[1].startswith("  first failure: rank 1 (local rank 1, node 0"), err[-3000:]
    assert summary[2].startswith("  exited with code 7 at "), err[-3000:]
    assert _segments(job) == []  # the names went at setup; a crash leaves none


STATE_JOB = """
    import torch
    import pscore

    torch.manual_seed(0)
    x, y = torch.randn(64, 4), torch.randint(0, 2, (64,))
    model = torch.nn.Linear(4, 2)
    trainer = pscore.Trainer(model, torch.nn.functional.cross_entropy, optimizer="adagrad",
                             optimizer_args={"lr": 0.1}, strategy="hogwild")
    trainer.step((x[:8], y[:8]))
    state = trainer.strategy.state_tensors()
    assert sorted(state) == ["optimizer/0/sum", "optimizer/1/sum"], sorted(state)
    assert state["optimizer/0/sum"].shape == (2, 4) and state["optimizer/0/sum"].min() > 0
    loaded = {k: torch.full_like(v, 3.0) for k, v in state.items()}
    trainer.strategy.load_state_tensors(loaded)
    assert all((v == 3.0).all() for v in trainer.strategy.state_tensors().values())
    try:
        trainer.strategy.load_state_tensors({})
    except ValueError as e:
        print("refused:", e, flush=True)
    trainer.fit((x, y), epochs=1, batch_size=8)
    assert trainer.strategy.state_tensors() == {} and model(x).shape == (64, 2)
    print("state ok", flush=True)
"""


def test_state_tensors_are_the_tables_optimizer_state(tmp_path):
    job = _job()
    script = tmp_path / "state.py"
    script.write_text(textwrap.dedent(STATE_JOB))
    code, out, err = _finish(_launch(job, "-n", "1", str(script), cwd=tmp_path))
    assert code == 0, err[-3000:]
    assert "[rank0]: state ok" in out, out
    assert "lacks the optimizer state optimizer/0/sum, optimizer/1/sum" in out, out


def test_attach_binds_a_second_module_and_unbind_keeps_the_values():
    torch.manual_seed(0)
    first, second = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    prefix = f"attach-{uuid.uuid4().hex[:8]}"
    shared = SharedParameters(first, optimizer="sgd", prefix=prefix, lr=0.5, momentum=0.9)
    other = SharedParameters.attach(second, prefix, optimizer="sgd", lr=0.5, momentum=0.9)
    assert torch.equal(second.weight, first.weight)
    second(torch.ones(1, 3)).sum().backward()
    other.optimizer(second).step()  # through the second module's binding
    assert torch.equal(first.weight, second.weight)
    with pytest.raises(ValueError, match="holds optimizer state 'momentum'; optimizer 'sgd'"):
        SharedParameters.attach(torch.nn.Linear(3, 2), prefix, optimizer="sgd")
    other.unbind(second)
    other.close()
    shared.close()
    first.weight.data.add_(1.0)  # the table's last view; second holds a copy
    assert not torch.equal(first.weight, second.weight)
    assert second(torch.ones(1, 3)).shape == (1, 2)
    with pytest.raises(ValueError, match="not bound"):
        SharedParameters.of(second)
    assert glob.glob(f"/dev/shm/pscore_hw_{prefix}*") == []


def test_machines_are_blocks_of_consecutive_local_ranks():
    assert _machines([(0, 2), (1, 2), (0, 2), (1, 2)]) == [[0, 1], [2, 3]]
    assert _machines([(0, 1), (0, 3), (1, 3), (2, 3)]) == [[0], [1, 2, 3]]
    with pytest.raises(ValueError, match="worker 1 reports local rank 0 of 2"):
        _machines([(0, 2), (0, 2)])
    with pytest.raises(ValueError, match="worker 0 has local rank 1 of 2"):
        _machines([(1, 2), (0, 2)])
