"""The Trainer's chief duties: checkpoints (safetensors, atomic, kept), resume after a crash at
the same step with the same weights, hooks (stop at step, NaN, logging, evaluation) agreed by
every worker, the progress bar under pscore-run, and fit()'s argument checks."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

import pscore
from pscore.train import (
    EvaluationHook,
    Hook,
    LoggingHook,
    NanLossHook,
    StopAtStepHook,
    checkpoint,
)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "train_digits.py")
PYTHON_PATH = os.path.dirname(os.path.dirname(os.path.abspath(pscore.__file__)))
HANG_GUARD_S = 240  # a hang fails the test; no test relies on timing


def launch(args: list, cwd, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess:
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([PYTHON_PATH, os.path.join(ROOT, "examples")])
    )
    return subprocess.run(
        [sys.executable, "-m", "pscore.launch", "-n", "2", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def final_checkpoint(directory) -> tuple[str, dict, dict]:
    path = checkpoint.latest(str(directory))
    file = os.path.join(path, checkpoint.FILE_NAME)
    from safetensors import safe_open

    with safe_open(file, framework="pt") as f:
        metadata = f.metadata()
    return path, safetensors_torch.load_file(file), metadata


# ---- a killed job resumes at its checkpoint's step and ends with the same weights -----------

DIGITS = ["--epochs", "2", "--save-every-steps", "12"]  # 22 steps an epoch with 2 workers

CRASHING_JOB = """
    import os, sys
    import torch
    import pscore
    from pscore.train import Hook
    from train_digits import digits, mlp

    class CrashAfter(Hook):  # worker 1 dies abruptly after step 30, as a killed process would
        local_stop = False
        def after_step(self, trainer, loss):
            if trainer.global_step == 30 and trainer.run.rank == 1:
                os._exit(9)

    train, _ = digits()
    trainer = pscore.Trainer(
        mlp(), torch.nn.functional.cross_entropy, optimizer_args={"lr": 0.05, "momentum": 0.9},
        checkpoint_dir=sys.argv[1], save_every_steps=12, hooks=[CrashAfter()],
    )
    trainer.fit(train, epochs=2, batch_size=32)
"""


def test_a_killed_job_resumes_from_its_checkpoint_with_the_same_weights(tmp_path):
    whole = launch(
        [EXAMPLE, *DIGITS, "--checkpoint-dir", str(tmp_path / "whole"), "--progress"], tmp_path
    )
    assert whole.returncode == 0, whole.stderr
    # the forced bar under pscore-run: whole prefixed lines, the chief's only, no redraws
    lines = (whole.stdout + whole.stderr).splitlines()
    assert lines and all(line.startswith(("[rank0]: ", "[rank1]: ")) for line in lines), lines
    bar = [line for line in lines if "step/s" in line]
    assert bar and all(line.startswith("[rank0]: ") and "\r" not in line for line in bar)
    assert "44/44" in bar[-1] and "loss=" in bar[-1] and "samples/s=" in bar[-1]

    script = tmp_path / "crash.py"
    script.write_text(textwrap.dedent(CRASHING_JOB))
    crashed = launch([str(script), str(tmp_path / "resumed")], tmp_path)
    assert crashed.returncode != 0
    path, _, metadata = final_checkpoint(tmp_path / "resumed")
    assert os.path.basename(path) == "step-00000024"  # the last one before the crash
    names = ["latest", "step-00000012", "step-00000024"]  # the chief's only: no step-N-2
    assert sorted(os.listdir(tmp_path / "resumed")) == names
    assert (metadata["global_step"], metadata["epoch"], metadata["batch_in_epoch"]) == (
        "24",
        "1",
        "2",
    )

    resumed = launch([EXAMPLE, *DIGITS, "--checkpoint-dir", str(tmp_path / "resumed")], tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed from {path} at global step 24 (epoch 1, batch 2)" in resumed.stdout
    assert "step/s" not in resumed.stderr  # progress=None on a pipe: no bar
    assert "to global step 44" in resumed.stdout

    names = ["latest", "step-00000012", "step-00000024", "step-00000036", "step-00000044"]
    assert sorted(os.listdir(tmp_path / "whole")) == names
    _, expected, expected_meta = final_checkpoint(tmp_path / "whole")
    _, got, got_meta = final_checkpoint(tmp_path / "resumed")
    assert expected_meta == got_meta and got_meta["global_step"] == "44"
    assert expected.keys() == got.keys()
    assert any(k.startswith("strategy/") for k in got)  # the optimizer's momentum too
    for name, tensor in expected.items():
        assert torch.equal(tensor, got[name]), name


# ---- hooks on two workers: uneven shards, stop at step, NaN on one worker -------------------

HOOKS_JOB = """
    import json, os, sys
    import torch
    import pscore
    from pscore.train import EvaluationHook, LoggingHook, NanLossHook, StopAtStepHook

    rank = int(os.environ["RANK"])
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(129, 4, generator=g), torch.randint(0, 3, (129,), generator=g)
    report = {}

    # uneven shards (65 and 64 samples: 3 and 2 batches of 32), every hook, stop at step 7
    torch.manual_seed(0)
    evaluation = EvaluationHook((x, y), every_steps=2)
    trainer = pscore.Trainer(
        torch.nn.Linear(4, 3), torch.nn.functional.cross_entropy,
        hooks=[LoggingHook(3), evaluation, NanLossHook(), StopAtStepHook(7)],
    )
    history = trainer.fit((x, y), epochs=4, batch_size=32)
    report["uneven"] = {
        "position": [trainer.global_step, trainer.epoch, trainer.batch_in_epoch],
        "steps": [h["steps"] for h in history], "reason": trainer.stop_reason,
        "evaluated_at": [r["global_step"] for r in evaluation.results],
        "weights": trainer.model.weight.flatten().tolist(),
    }

    # worker 1's loss is NaN at step 4: every worker stops there, no final checkpoint
    def loss_fn(out, target):
        loss = torch.nn.functional.cross_entropy(out, target)
        return loss + float("nan") if rank == 1 and nan.global_step == 3 else loss

    nan = pscore.Trainer(
        torch.nn.Linear(4, 3), loss_fn, hooks=[NanLossHook()],
        checkpoint_dir=sys.argv[1], save_every_steps=2,
    )
    nan.fit((x, y), epochs=4, batch_size=32)
    report["nan"] = {"step": nan.global_step, "reason": nan.stop_reason}
    with open(f"report{rank}.json", "w") as f:
        json.dump(report, f)
"""


def test_hooks_stop_every_worker_at_the_same_step(tmp_path):
    script = tmp_path / "hooks.py"
    script.write_text(textwrap.dedent(HOOKS_JOB))
    result = launch([str(script), str(tmp_path / "nan")], tmp_path)
    assert result.returncode == 0, result.stderr
    reports = [json.loads((tmp_path / f"report{r}.json").read_text()) for r in range(2)]

    uneven = [r["uneven"] for r in reports]
    assert uneven[0]["position"] == uneven[1]["position"] == [7, 2, 1]
    assert uneven[0]["steps"] == [3, 3, 1] and uneven[1]["steps"] == [2, 2, 1]  # worker 1 joins
    assert uneven[0]["reason"] == uneven[1]["reason"] == "reached the last step 7"
    assert uneven[0]["evaluated_at"] == uneven[1]["evaluated_at"] == [2, 4, 6]
    assert uneven[0]["weights"] == uneven[1]["weights"]
    logged = [line for line in result.stdout.splitlines() if "  loss " in line]
    assert [line.split("  ")[0] for line in logged] == ["[rank0]: step 3", "[rank0]: step 6"]

    nan = [r["nan"] for r in reports]
    assert nan[0]["step"] == nan[1]["step"] == 4
    assert nan[1]["reason"] == "loss is nan at step 4 on worker 1"
    assert nan[0]["reason"] == "worker 1 stopped: loss is nan at step 4 on worker 1"
    # no checkpoint of the NaN step: neither the one due at step 4 nor the final one
    assert os.path.basename(checkpoint.latest(str(tmp_path / "nan"))) == "step-00000002"
    assert "stopped at global step 4" in result.stdout


# ---- one worker, in this process -----------------------------------------------------------


@pytest.fixture
def make_trainer():
    made = []

    def make(**options):
        torch.manual_seed(0)
        options.setdefault("optimizer_args", {"lr": 0.1, "momentum": 0.9})
        trainer = pscore.Trainer(
            torch.nn.Linear(4, 3), torch.nn.functional.cross_entropy, **options
        )
        made.append(trainer)
        return trainer

    yield make
    if made:
        made[0].close()


def data(n: int = 40):
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def test_checkpoints_are_safetensors_with_their_metadata_and_the_last_k_kept(
    make_trainer, tmp_path
):
    trainer = make_trainer(checkpoint_dir=tmp_path, save_every_steps=2, keep_checkpoints=2, seed=3)
    trainer.fit(data(), epochs=2, batch_size=8)  # 5 steps an epoch
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "latest",
        "step-00000008",
        "step-00000010",
    ]
    _, tensors, metadata = final_checkpoint(tmp_path)
    assert metadata == {
        "format": "pscore.train/1",
        "global_step": "10",
        "epoch": "2",
        "batch_in_epoch": "0",
        "strategy": "allreduce",
        "world_size": "1",
        "seed": "3",
        "batch_size": "8",
        "num_samples": "40",
    }
    assert torch.equal(tensors["model/weight"], trainer.model.weight)
    assert "strategy/optimizer/0/momentum_buffer" in tensors


def test_a_loop_of_your_own_checkpoints_on_schedule_and_resumes(make_trainer, tmp_path):
    saved = []

    class Saved(Hook):
        local_stop = False

        def after_checkpoint(self, trainer, path):
            saved.append((trainer.global_step, path))

    x, y = data()
    trainer = make_trainer(checkpoint_dir=tmp_path, save_every_steps=3, hooks=[Saved()])
    for i in range(7):
        trainer.step((x[i : i + 4], y[i : i + 4]))
    assert [s for s, _ in saved] == [3, 6] and trainer.global_step == 7
    assert trainer.save_checkpoint() == saved[-1][1] == str(tmp_path / "step-00000007")
    weights = trainer.model.weight.detach().clone()

    again = make_trainer(checkpoint_dir=tmp_path)
    again.setup()
    assert again.global_step == 7 and again.resumed_from == str(tmp_path / "step-00000007")
    assert torch.equal(again.model.weight, weights)


def test_a_crash_before_the_rename_leaves_the_previous_checkpoint_latest(
    make_trainer, tmp_path, monkeypatch
):
    trainer = make_trainer(checkpoint_dir=tmp_path)
    trainer.step(data(8))
    first = trainer.save_checkpoint()
    trainer.step(data(8))

    def crash(src, _dst):
        raise OSError(errno.EIO, "simulated crash", src)

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(OSError, match=f"cannot write the checkpoint of step 2 in {tmp_path}"):
        trainer.save_checkpoint()
    monkeypatch.undo()
    assert checkpoint.latest(str(tmp_path)) == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest", "step-00000001"]
    assert checkpoint.read(first)[1]["global_step"] == "1"


def test_a_full_disk_names_the_path_and_keeps_latest(make_trainer, tmp_path, monkeypatch):
    trainer = make_trainer(checkpoint_dir=tmp_path)
    trainer.step(data(8))
    first = trainer.save_checkpoint()
    trainer.step(data(8))

    def full(path, _data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), path)

    monkeypatch.setattr(checkpoint, "_write_file", full)
    with pytest.raises(OSError, match="No space left on device") as caught:
        trainer.save_checkpoint()
    assert caught.value.errno == errno.ENOSPC and str(tmp_path) in str(caught.value)
    monkeypatch.undo()
    assert checkpoint.latest(str(tmp_path)) == first


def test_an_unusable_checkpoint_dir_is_a_clear_error(make_trainer, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(OSError, match=f"checkpoint_dir {blocker}/ckpt cannot be created"):
        make_trainer(checkpoint_dir=blocker / "ckpt")
    with pytest.raises(ValueError, match="need a checkpoint_dir"):
        make_trainer(save_every_steps=10)
    with pytest.raises(ValueError, match="save_every_secs must be a number of seconds > 0"):
        make_trainer(checkpoint_dir=tmp_path, save_every_secs=0)


def test_a_checkpoint_of_another_job_shape_is_refused(make_trainer, tmp_path):
    trainer = make_trainer(checkpoint_dir=tmp_path)
    trainer.fit(data(), epochs=1, batch_size=8)
    path, tensors, metadata = final_checkpoint(tmp_path)
    file = os.path.join(path, checkpoint.FILE_NAME)
    safetensors_torch.save_file(tensors, file, metadata={**metadata, "world_size": "4"})
    with pytest.raises(ValueError, match=r"written with world_size=4; this job has world_size=1"):
        make_trainer(checkpoint_dir=tmp_path).setup()

    safetensors_torch.save_file(tensors, file, metadata=metadata)
    with pytest.raises(ValueError, match=r"written with batch_size=8; this job has batch_size=4"):
        make_trainer(checkpoint_dir=tmp_path).fit(data(), epochs=2, batch_size=4)

    with open(file, "r+b") as f:
        f.truncate(100)
    with pytest.raises(ValueError, match=f"{file} is not a readable safetensors file"):
        make_trainer(checkpoint_dir=tmp_path).setup()
    (tmp_path / "latest").write_text("step-00000099\n")
    with pytest.raises(ValueError, match="names 'step-00000099', which is not a complete"):
        make_trainer(checkpoint_dir=tmp_path).setup()


def test_nan_loss_stops_or_raises(make_trainer, tmp_path):
    x, y = data()
    x[13] = float("nan")  # the second batch of 8
    trainer = make_trainer(hooks=[NanLossHook()], checkpoint_dir=tmp_path, save_every_steps=1)
    trainer.fit((x, y), epochs=3, batch_size=8, shuffle=False)
    assert trainer.global_step == 2 and trainer.stop_reason.startswith("loss is nan at step 2")
    assert os.path.basename(checkpoint.latest(str(tmp_path))) == "step-00000001"
    with pytest.raises(FloatingPointError, match="loss is nan at step 2 on worker 0"):
        make_trainer(hooks=[NanLossHook(fail=True)]).fit(
            (x, y), epochs=1, batch_size=8, shuffle=False
        )


def test_fit_history_evaluate_and_argument_checks(make_trainer):
    x, y = data()
    evaluation = EvaluationHook((x, y), every_steps=4)
    trainer = make_trainer(hooks=[StopAtStepHook(num_steps=12), evaluation, LoggingHook(100)])
    history = trainer.fit((x, y), epochs=5, batch_size=16, eval_data=(x, y))  # 3 steps an epoch
    assert [h["epoch"] for h in history] == [0, 1, 2, 3] and trainer.global_step == 12
    assert [h["steps"] for h in history] == [3, 3, 3, 3] and history[0]["samples"] == 40
    assert {"loss", "global_step", "seconds", "eval_loss", "accuracy"} <= history[-1].keys()
    assert [r["global_step"] for r in evaluation.results] == [4, 8, 12]
    assert trainer.history == history

    dataset = torch.utils.data.TensorDataset(x, y)
    assert trainer.evaluate(dataset) == pytest.approx(trainer.evaluate((x, y)))

    for call, error in [
        (lambda: trainer.fit((x, y), epochs=-1), "epochs must be an int >= 0, got -1"),
        (lambda: trainer.fit((x, y), batch_size=0), "batch_size must be an int >= 1, got 0"),
        (lambda: trainer.fit((x, y[:5])), r"the data's arrays differ in length: \[40, 5\]"),
        (lambda: trainer.fit((x,)), r"the data tuple has 1 array\(s\)"),
        (lambda: trainer.step((x,)), r"a batch must be \(inputs..., target\); this one has 1"),
        (lambda: trainer.fit((x, y), eval_data=(x, y[:3])), "differ in length"),
        (lambda: trainer.evaluate((x[:0], y[:0])), "the evaluation data is empty"),
    ]:
        with pytest.raises(ValueError, match=error):
            call()
    with pytest.raises(TypeError, match="data must be a tuple of tensors/arrays"):
        trainer.fit(42)
    with pytest.raises(TypeError, match="progress must be None"):
        make_trainer(progress="yes")


def test_save_every_secs_counts_from_the_last_checkpoint(make_trainer, tmp_path):
    x, y = data()
    trainer = make_trainer(checkpoint_dir=tmp_path, save_every_secs=3600)
    trainer.step((x, y))
    assert checkpoint.latest(str(tmp_path)) is None  # an hour has not passed
    trainer._saver.last_time -= 3600  # as if it had
    trainer.step((x, y))
    trainer.step((x, y))
    assert os.path.basename(checkpoint.latest(str(tmp_path))) == "step-00000002"


def test_the_bar_is_the_chiefs_and_on_a_pipe_one_line_per_redraw(monkeypatch):
    from pscore.train import progress

    class Terminal:
        def isatty(self):
            return True

    monkeypatch.setattr(sys, "stderr", Terminal())
    assert progress.wanted(None, is_chief=True)
    assert not progress.wanted(None, is_chief=False) and not progress.wanted(True, is_chief=False)
    assert not progress.wanted(False, is_chief=True)

    written = []
    lines = progress._Lines(type("Sink", (), {"write": written.append, "flush": None})())
    lines.write("\r 10%|#    | 1/10\r")
    lines.write("      \r 20%|##   | 2/10")
    lines.write("\n")
    assert "".join(written) == " 10%|#    | 1/10\n 20%|##   | 2/10\n"


def test_the_servers_part_is_written_inside_the_checkpoint_and_loaded_on_resume(
    make_trainer, tmp_path
):
    from pscore.train.strategies.allreduce import AllReduce

    class WithServers(AllReduce):  # stands for a PS strategy: the servers write into `dir`
        loaded: list

        def save_servers(self, directory):
            (tmp_path / "seen").write_text(directory)
            with open(os.path.join(directory, "tables.bin"), "wb") as f:
                f.write(b"tables of step %d" % self.trainer.global_step)

        def load_servers(self, directory):
            with open(os.path.join(directory, "tables.bin"), "rb") as f:
                WithServers.loaded = [directory, f.read()]

    trainer = make_trainer(checkpoint_dir=tmp_path / "ckpt", strategy=WithServers())
    trainer.fit(data(), epochs=1, batch_size=8)
    path = checkpoint.latest(str(tmp_path / "ckpt"))
    assert os.path.basename((tmp_path / "seen").read_text()).startswith(".tmp-step-")
    assert sorted(os.listdir(path)) == ["tables.bin", checkpoint.FILE_NAME]

    make_trainer(checkpoint_dir=tmp_path / "ckpt", strategy=WithServers()).setup()
    assert WithServers.loaded == [path, b"tables of step 5"]
