"""The Trainer's timeline (PSCORE_TIMELINE / Trainer(timeline=)) and TensorBoard scalars: real
jobs under pscore-run (allreduce on 2 workers, ps-sync on 2 workers and 1 server) whose merged
Chrome trace must be valid Trace Event Format with every rank's properly nested phases, and
whose TensorBoard event files must hold the scalars at the steps they were written."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest
from train_ps_helpers import launch, write

from pscore.collectives.work import CompletedWork
from pscore.train import tensorboard, timeline

HAS_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None
EPS_US = 1e-3  # ts/dur are ns / 1000 in floats

# Each worker's timeline path is in a directory of its own (as on machines that share no
# filesystem): the chief's merged trace can only come through the collectives.
JOB = """
    import os
    import sys

    import torch

    import pscore

    strategy, trace, logdir = sys.argv[1], sys.argv[2], sys.argv[3]
    trace = trace.replace("RANK", os.environ.get("RANK", "ps"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 4),
    )
    x, y = torch.randn(257, 32), torch.randint(0, 4, (257,))  # 9 and 8 batches: a join step
    options = {"bucket_cap_mb": 0.01, "first_bucket_mb": 0.01} if strategy == "allreduce" else {}
    trainer = pscore.Trainer(
        model, torch.nn.functional.cross_entropy, optimizer_args={"lr": 0.05},
        strategy=strategy, strategy_args=options, timeline=trace,
        tensorboard=None if logdir == "-" else logdir,
    )
    trainer.fit((x, y), epochs=3, batch_size=16, eval_data=(x, y))
    print(f"rank {trainer.run.rank} steps {trainer.global_step}")
"""


def _run_job(tmp_path, strategy: str, flags: list, tensorboard_dir: str = "-") -> str:
    """Runs JOB; returns the chief's timeline path (rank r's: RANK replaced by r)."""
    script = write(tmp_path, "job.py", JOB)
    trace_path = str(tmp_path / "rankRANK" / "job.json")
    result = launch([*flags, script, strategy, trace_path, tensorboard_dir], tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert sorted(os.listdir(tmp_path / "rank1")) == ["job.rank1.json"]  # no merged trace there
    assert not os.path.exists(tmp_path / "rankps")
    return trace_path.replace("RANK", "0")


@pytest.fixture(scope="module")
def allreduce_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("allreduce")
    logdir = str(tmp / "tb") if HAS_TENSORBOARD else "-"
    return _run_job(tmp, "allreduce", ["-n", "2"], logdir), logdir


@pytest.fixture(scope="module")
def ps_sync_job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ps_sync")
    return _run_job(tmp, "ps-sync", ["--workers", "2", "--servers", "1"])


def _load(path: str) -> list[dict]:
    with open(path) as f:
        data = json.load(f)
    assert isinstance(data["traceEvents"], list)
    assert data["otherData"]["world_size"] == 2
    return data["traceEvents"]


def _lanes(events: list[dict]) -> dict:
    """(pid, tid) -> its X events in file order."""
    lanes: dict = {}
    for e in events:
        assert e["ph"] in ("X", "M"), e
        if e["ph"] == "X":
            assert isinstance(e["name"], str) and isinstance(e["cat"], str), e
            assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
            assert e["ts"] >= 0 and e["dur"] >= 0, e
            lanes.setdefault((e["pid"], e["tid"]), []).append(e)
    return lanes


def _inside(inner: dict, outer: dict) -> bool:
    end, outer_end = inner["ts"] + inner["dur"], outer["ts"] + outer["dur"]
    return outer["ts"] - EPS_US <= inner["ts"] and end <= outer_end + EPS_US


def _check_lane(events: list[dict]) -> None:
    """Monotonic ts, and proper nesting: an event is inside the one enclosing it or after it."""
    open_spans: list[dict] = []
    for previous, e in zip([None, *events], events):
        if previous is not None:
            assert e["ts"] >= previous["ts"], (previous, e)
        while open_spans and not _inside(e, open_spans[-1]):
            assert e["ts"] >= open_spans[-1]["ts"] + open_spans[-1]["dur"] - EPS_US, (
                f"{e} overlaps {open_spans[-1]} without nesting in it"
            )
            open_spans.pop()
        open_spans.append(e)


def _check_trace(events: list[dict], ranks: int) -> dict:
    """Checks the trace's shape; returns pid -> that rank's X events."""
    lanes = _lanes(events)
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {r + 1: f"rank {r} ({'chief' if r == 0 else 'worker'})" for r in range(ranks)}
    threads = {(e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"}
    assert set(lanes) <= threads  # every lane is named
    by_rank: dict = {}
    for (pid, _), lane in lanes.items():
        _check_lane(lane)
        by_rank.setdefault(pid, []).extend(lane)
    assert set(by_rank) == set(names)
    for pid, rank_events in by_rank.items():
        tops = [e for e in rank_events if e["tid"] == timeline.TRAIN_LANE and e["cat"] == "step"]
        for e in rank_events:
            if e["cat"] != "step":  # every phase lies in one of its rank's top-level events
                assert any(_inside(e, top) for top in tops), e
        for e in rank_events:
            if e["cat"] == "communication":
                assert isinstance(e["args"]["bytes"], int) and e["args"]["bytes"] > 0, e
        assert {"forward", "backward"} <= {e["name"] for e in rank_events}, pid
        assert {"setup", "finish"} <= {e["name"] for e in tops}
    return by_rank


def _names(events: list[dict], cat: str) -> set[str]:
    return {e["name"] for e in events if e["cat"] == cat}


def test_allreduce_timeline_merges_every_rank(allreduce_job):
    path, _ = allreduce_job
    by_rank = _check_trace(_load(path), ranks=2)
    for events in by_rank.values():
        assert "optimizer" in _names(events, "compute")
        assert "update" in _names(events, "update")
        buckets = _names(events, "communication")
        assert {"allreduce bucket 0", "allreduce bucket 1"} <= buckets, buckets
        assert "wait allreduce bucket 0" in _names(events, "wait")
        steps = [e for e in events if e["cat"] == "step" and e["name"] in ("step", "join step")]
        assert len(steps) == 27  # 3 epochs of 9 lockstep steps
        async_lanes = {e["tid"] for e in events if e["name"] == "allreduce bucket 0"}
        assert async_lanes and timeline.TRAIN_LANE not in async_lanes
    joins = {pid for pid, events in by_rank.items() for e in events if e["name"] == "join step"}
    assert joins == {2}  # rank 1 has 128 samples: 8 batches and a join step per epoch
    for rank in range(2):  # each worker's own file holds its events only
        own = _load(timeline.per_rank_path(path.replace("rank0", f"rank{rank}"), rank))
        assert {e["pid"] for e in own} == {rank + 1}
        _check_trace_lanes_only(own)


def _check_trace_lanes_only(events: list[dict]) -> None:
    for lane in _lanes(events).values():
        _check_lane(lane)


def test_ps_sync_timeline_shows_rounds_and_round_trips(ps_sync_job):
    by_rank = _check_trace(_load(ps_sync_job), ranks=2)
    for events in by_rank.values():
        comm = _names(events, "communication")
        assert {"push_pull dense/0.weight", "pull"} <= comm, comm
        waits = _names(events, "wait")
        assert {"wait sync round dense/0.weight", "wait workers done"} <= waits, waits


@pytest.mark.skipif(not HAS_TENSORBOARD, reason="tensorboard is not installed")
def test_tensorboard_scalars_are_written_by_the_chief(allreduce_job):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, logdir = allreduce_job
    assert not os.path.exists(os.path.join(logdir, "rank1"))
    events = EventAccumulator(logdir)
    events.Reload()
    train_tags = [
        f"train/{t}" for t in ("loss", "samples_per_s", "step_time_s", "comm_bytes_per_s")
    ]
    for tag in train_tags:
        values = events.Scalars(tag)
        assert [v.step for v in values] == [10, 20], tag  # every 10 of 27 steps
        assert all(v.value > 0 for v in values), tag
    for tag in ("epoch/loss", "eval/loss", "eval/accuracy"):
        assert [v.step for v in events.Scalars(tag)] == [9, 18, 27], tag


def test_tensorboard_missing_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: None if name == "tensorboard" else real(name)
    )
    with pytest.raises(ImportError, match="pip install tensorboard"):
        tensorboard.TensorBoardHook("unused")


def test_a_timeline_that_does_not_record_only_counts_bytes():
    quiet = timeline.Timeline(0, record=False)
    with quiet.span("allreduce", timeline.COMMUNICATION, nbytes=100):
        pass
    quiet.add("push_pull t", timeline.COMMUNICATION, quiet.now(), 2, nbytes=20)
    assert quiet.comm_bytes == 120 and quiet.payload("rank 0")["events"] == []
    quiet.wait(CompletedWork(), "push_pull u", "wait u", quiet.now(), 3, nbytes=30)
    assert quiet.comm_bytes == 150 and quiet.payload("rank 0")["events"] == []


def test_waiting_for_an_asynchronous_operation_records_the_wait_and_its_lane():
    t = timeline.Timeline(0, record=True)
    lane = t.lane("push_pull t")
    t.wait(CompletedWork(), "push_pull t", "wait t", t.now(), lane, nbytes=8)
    events = [(e[0], e[1], e[2], e[5]) for e in t.payload("rank 0")["events"]]
    assert events == [
        ("wait t", timeline.WAIT, timeline.TRAIN_LANE, None),
        ("push_pull t", timeline.COMMUNICATION, lane, {"bytes": 8}),
    ]
    assert t.comm_bytes == 8


def test_pausing_keeps_what_was_recorded():
    t = timeline.Timeline(0, record=True)
    with t.span("step", timeline.STEP):
        t.recording = False  # an open span still closes into the kept events
    with t.span("step", timeline.STEP, nbytes=4):
        pass
    t.recording = True
    with t.span("forward", timeline.COMPUTE):
        pass
    assert [e[0] for e in t.payload("rank 0")["events"]] == ["step", "forward"]
    assert t.comm_bytes == 4


def test_trace_orders_lanes_and_puts_ranks_on_one_clock():
    a, b = timeline.Timeline(0, record=True), timeline.Timeline(1, record=True)
    b.wall_origin_ns = a.wall_origin_ns + 5_000_000  # rank 1 started 5 ms later
    for t in (a, b):
        with t.span("step", timeline.STEP), t.span("forward", timeline.COMPUTE):
            pass
        t.add("push_pull t", timeline.COMMUNICATION, t.now(), t.lane("push_pull t"), nbytes=8)
    events = timeline.trace([b.payload("rank 1 (worker)"), a.payload("rank 0 (chief)")])
    x = [e for e in events["traceEvents"] if e["ph"] == "X"]
    assert [(e["pid"], e["tid"], e["name"]) for e in x] == [
        (1, 1, "step"),
        (1, 1, "forward"),
        (1, 2, "push_pull t"),
        (2, 1, "step"),
        (2, 1, "forward"),
        (2, 2, "push_pull t"),
    ]
    assert x[3]["ts"] >= 5000  # microseconds on the earliest rank's axis
    assert x[2]["args"] == {"bytes": 8}
    json.dumps(events)  # plain JSON
