"""An elastic job (Trainer(elastic=True)) with checkpoint_dir and timeline: a worker killed
mid-training does not stop the checkpoints or the timeline's merge (they go through the job's
store, not collectives). The chief's checkpoint holds what a job that is not elastic writes and
a second run over the same checkpoint_dir resumes from it; the merged trace holds the lanes of
every worker that finished. allreduce loses its chief for good (pscore-run --elastic: the lowest
worker left writes for the job); ps-sync's chief is replaced (the replacement joins the running
job: it does not read the checkpoint back, which would roll the servers back)."""

from __future__ import annotations

import json
import os

import pytest
from test_train_elastic import KILL_ONCE_AND_MODEL
from train_ps_helpers import launch, write

torch = pytest.importorskip("torch")

from pscore.train import checkpoint
from pscore.train.elastic import mark_gone

STEPS_PER_EPOCH = 20  # 3 workers, 960 samples, batches of 16
KILL_STEP = 13  # after the chief's checkpoint of step 10

SCRIPT = (
    """
    import os, signal, sys, torch, pscore, pscore.train

    strategy, kill_rank, kill_step, marker, ckpt, trace, epochs = sys.argv[1:8]
"""
    + KILL_ONCE_AND_MODEL
    + """    trainer = pscore.Trainer(model, torch.nn.functional.cross_entropy, strategy=strategy,
                             optimizer_args={"lr": 0.3}, elastic=True, hooks=[KillOnce()],
                             checkpoint_dir=ckpt, save_every_steps=10, timeline=trace)
    trainer.fit((x[:960], y[:960]), epochs=int(epochs), batch_size=16)
    accuracy = trainer.evaluate((x[960:], y[960:]))["accuracy"]
    servers = trainer.strategy.global_step() if trainer.strategy.needs_servers else -1
    print(f"worker {trainer.run.rank} accuracy {accuracy:.3f} step {trainer.global_step} "
          f"servers {servers}", flush=True)
"""
)


def run_job(tmp_path, strategy: str, epochs: int, kill_rank: int, flags: list) -> str:
    """One job of 3 workers (PS strategies: and one ps task); returns its output."""
    script = write(tmp_path, "job.py", SCRIPT)
    if strategy != "allreduce":
        flags = ["--servers", "1", *flags]
    marker, ckpt, trace = (str(tmp_path / n) for n in ("killed", "ckpt", "trace.json"))
    args = [strategy, str(kill_rank), str(KILL_STEP), marker, ckpt, trace, str(epochs)]
    result = launch(["--workers", "3", "--grace-period", "30", *flags, script, *args], tmp_path)
    out = result.stdout + result.stderr
    assert result.returncode == 0, out[-6000:]
    return out


def finished(out: str) -> dict:
    """rank -> (accuracy, trainer's global step, servers' global step) of each worker."""
    found = {}
    for line in out.splitlines():
        if "]: worker" in line and " accuracy " in line:
            words = line.split("]: ", 1)[1].split()
            found[int(words[1])] = (float(words[3]), int(words[5]), int(words[7]))
    return found


def check_checkpoint(tmp_path, strategy: str, step: int) -> None:
    """The latest checkpoint is the end's, shaped as a job that is not elastic writes it."""
    path = checkpoint.latest(str(tmp_path / "ckpt"))
    assert os.path.basename(path) == f"step-{step:08d}"
    tensors, metadata = checkpoint.read(path)
    assert metadata["global_step"] == str(step)
    assert (metadata["epoch"], metadata["batch_in_epoch"]) == (str(step // STEPS_PER_EPOCH), "0")
    assert (metadata["strategy"], metadata["world_size"]) == (strategy, "3")
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 3))
    model.load_state_dict(checkpoint.unpack(tensors)[0])  # the whole model, nothing else
    if strategy != "allreduce":  # the servers' tables beside it
        assert any(n != checkpoint.FILE_NAME for n in os.listdir(path)), os.listdir(path)


def trace_ranks(tmp_path) -> dict:
    """pid -> process name of the merged trace; every rank's events lie on its own lanes."""
    with open(tmp_path / "trace.json") as f:
        events = json.load(f)["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    steps = {e["pid"] for e in events if e.get("ph") == "X" and e["name"] == "step"}
    assert steps == set(names), (steps, names)
    return names


def resume(tmp_path, strategy: str, flags: list) -> dict:
    """A second run over the same checkpoint_dir, to epoch 3: it goes on from step 40."""
    os.remove(tmp_path / "trace.json")
    out = run_job(tmp_path, strategy, 3, -1, flags)
    assert f"resumed from {tmp_path / 'ckpt' / 'step-00000040'} at global step 40" in out, out
    check_checkpoint(tmp_path, strategy, 3 * STEPS_PER_EPOCH)
    assert sorted(trace_ranks(tmp_path).values()) == [
        "rank 0 (chief)",
        "rank 1 (worker)",
        "rank 2 (worker)",
    ]
    return finished(out)


def test_allreduce_loses_its_chief_and_the_lowest_worker_left_writes(tmp_path):
    out = run_job(tmp_path, "allreduce", 2, 0, ["--elastic"])
    assert "rank 0 (pid" in out and "the elastic job goes on without it" in out
    ends = finished(out)
    assert sorted(ends) == [1, 2], out[-6000:]
    assert all(acc >= 0.93 and step == 40 for acc, step, _ in ends.values()), ends
    check_checkpoint(tmp_path, "allreduce", 40)  # worker 1 wrote it once worker 0 was gone
    assert sorted(trace_ranks(tmp_path).values()) == ["rank 1 (worker)", "rank 2 (worker)"]
    assert not os.path.exists(tmp_path / "trace.rank0.json")
    ends = resume(tmp_path, "allreduce", ["--elastic"])
    assert all(acc >= 0.93 and step == 60 for acc, step, _ in ends.values()), ends


def test_ps_sync_chief_replaced_keeps_checkpointing_and_resumes(tmp_path):
    out = run_job(tmp_path, "ps-sync", 2, 0, ["--max-restarts", "1"])
    assert "restarting it (restart 1 of 1)" in out
    assert "worker 0 rejoins the job at epoch 0, batch 13" in out
    assert "resumed from" not in out  # the replacement took the servers' values, not step 10
    ends = finished(out)
    assert sorted(ends) == [0, 1, 2], out[-6000:]
    # ps-sync's servers count the chief's steps: 13 before the kill and 27 after, none twice
    assert all(acc >= 0.93 and servers == 40 for acc, _, servers in ends.values()), ends
    assert ends[0][1] == 40  # the replacement went on counting from its predecessor's step
    check_checkpoint(tmp_path, "ps-sync", 40)
    names = trace_ranks(tmp_path)  # the replacement's lanes stand for rank 0
    assert sorted(names.values()) == ["rank 0 (chief)", "rank 1 (worker)", "rank 2 (worker)"]
    ends = resume(tmp_path, "ps-sync", [])
    assert all(acc >= 0.93 and servers == 60 for acc, _, servers in ends.values()), ends


# ---- the store agreement in one process (threads stand for the workers) ---------------------
def elastic_job(world_size: int):
    import types

    import pscore
    from pscore.train.elastic import ElasticJob

    store = pscore.HashStore()  # in this process: no url to beat over (none beats here)
    end = types.SimpleNamespace(store=store, url=None, prefix="pscore/train/test")
    return ElasticJob(end, world_size)


def in_threads(*calls) -> list:
    """Runs each call on its own thread; their results (an exception where one raised)."""
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(len(calls)) as pool:
        futures = [pool.submit(call) for call in calls]
        return [f.exception() or f.result() for f in futures]


def test_models_that_differ_are_named_through_the_store_and_a_gone_worker_is_not_awaited():
    from pscore.train import agreement

    job = elastic_job(3)
    mark_gone(job.store, "test", 2)  # as pscore-run --elastic marks it
    same, wider = torch.nn.Linear(2, 2), torch.nn.Linear(2, 3)
    results = in_threads(
        lambda: agreement.check_models_agree(same, 0, job),
        lambda: agreement.check_models_agree(wider, 1, job),
    )
    for error in results:
        assert isinstance(error, ValueError), results
        assert "worker(s) [1] built a model" in str(error)


def test_a_worker_that_is_neither_there_nor_gone_is_named_when_the_wait_times_out():
    job = elastic_job(3)
    job.post("timeline", 0, b"{}")
    mark_gone(job.store, "test", 1)
    with pytest.raises(TimeoutError, match=r"worker\(s\) \[2\] to send its timeline"):
        job.collect("timeline", "send its timeline", timeout=0.3)


def test_the_lead_is_the_chief_and_with_it_gone_the_lowest_worker_left():
    job = elastic_job(3)
    assert [job.leads(r) for r in range(3)] == [True, False, False]
    mark_gone(job.store, "test", 0)
    mark_gone(job.store, "test", 1)
    assert [job.leads(r) for r in range(1, 3)] == [False, True]


def test_a_replacement_keeps_its_predecessors_position_and_reads_no_checkpoint(tmp_path):
    import types

    from pscore.train import agreement

    job, run = elastic_job(2), types.SimpleNamespace(rank=1, world_size=2)
    job.set_up(1, 1, 4, 24)  # the first worker of rank 1, set up at epoch 1, batch 4
    job.record_position(1, 1, 7, 27)  # ... and after its step 27
    job.set_up(1, 0, 0, 0)  # its replacement's setup does not move that back
    assert job.position(1) == (1, 7, 27)
    saver = checkpoint.Saver.create(str(tmp_path), 1, None, 5, writer=True)
    model = torch.nn.Linear(2, 2)
    tensors, metadata = checkpoint.pack(model.state_dict(), {}), {"format": checkpoint.FORMAT}
    saver.write(3, tensors, metadata, os.path.isdir)  # no servers' part to save
    assert agreement.resume_point(model, run, "ps-sync", saver, job) is None


def test_a_stop_asked_by_one_worker_reaches_the_others_through_the_store():
    job = elastic_job(3)
    assert job.agree_on_stop(0, None, True) == (None, True)  # nobody asked yet
    assert job.agree_on_stop(1, "loss is nan", False) == ("loss is nan", False)
    assert job.agree_on_stop(0, None, True) == ("worker 1 stopped: loss is nan", False)
    # a later asker keeps its own reason; the first one's stays for the rest
    assert job.agree_on_stop(2, "patience ran out", True) == ("patience ran out", False)
    assert job.agree_on_stop(0, None, True) == ("worker 1 stopped: loss is nan", False)
