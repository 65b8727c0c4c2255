"""Distributed Hogwild: a Hogwild group per "machine", tables averaged across machines every
sync_every steps. First with an in-process collective (machines are threads), then over pscore's
real collectives between processes. Updates are integers, so the arithmetic is checked exactly:
averaging conserves the sum over machines, and after the final round every table holds the mean
of all the updates made anywhere."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest

import pscore
from pscore.hogwild import DistributedHogwild, SharedTable, average_tables, train

ROWS, DIM = 4, 8


def _name(tag: str) -> str:
    return f"pd-{tag}-{uuid.uuid4().hex[:10]}"


class ThreadCollective:
    """all_reduce(array, op="avg") between `world` threads, each with its own rank's callable.
    A mismatched sequence of calls (one machine in a different collective) breaks the barrier."""

    def __init__(self, world: int):
        self.world = world
        self.barrier = threading.Barrier(world, timeout=60)
        self.slots: list = [None] * world
        self.calls = [0] * world

    def for_rank(self, rank: int):
        def all_reduce(arr, op="sum", group=None):  # noqa: ARG001 - DistributedHogwild passes group=
            assert op == "avg"
            self.calls[rank] += 1
            self.slots[rank] = arr.copy()
            self.barrier.wait()
            shapes = {s.shape for s in self.slots}
            assert len(shapes) == 1, f"machines are in different collectives: {shapes}"
            mean = np.mean(self.slots, axis=0)
            self.barrier.wait()
            arr[...] = mean

        return all_reduce


def _run_machines(world, body):
    errors, threads = [], []

    def guarded(rank):
        try:
            body(rank)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            errors.append((rank, e))

    for r in range(world):
        threads.append(threading.Thread(target=guarded, args=(r,)))
        threads[-1].start()
    for th in threads:
        th.join(180)
    assert not errors, errors


def test_rounds_stay_in_step_and_conserve_the_updates():
    steps = {0: 50, 1: 80}  # machine 0 finishes first: the others must not wait on it forever
    coll = ThreadCollective(2)
    tables = {r: SharedTable.create(_name(f"m{r}"), (ROWS, DIM)) for r in range(2)}
    syncs = {}

    def machine(rank):
        t = tables[rank]
        sync = syncs[rank] = DistributedHogwild([t], sync_every=10, all_reduce=coll.for_rank(rank))
        g = -np.ones((1, DIM), np.float32)
        for _ in range(steps[rank]):
            t.sgd([rank], g, lr=1.0)
            sync.maybe_sync()
        sync.finish()

    _run_machines(2, machine)
    a, b = tables[0].numpy(), tables[1].numpy()
    np.testing.assert_array_equal(a, b)
    assert (a[0] == steps[0] / 2).all() and (a[1] == steps[1] / 2).all()
    assert (a[2:] == 0).all()
    assert coll.calls[0] == coll.calls[1]
    assert syncs[0].rounds == syncs[1].rounds >= 4  # averaging rounds happened while training
    for t in tables.values():
        t.close()


def _machine_worker(rank, table, machine, steps):
    g = -np.ones((2, DIM), np.float32)
    ids = np.array([machine, 2 + rank], dtype=np.int64)
    for step in range(steps):
        table.sgd(ids, g, lr=1.0, locked=True)
        if rank == 0 and step == steps // 2:
            # Only averaging brings the other machine's row here: wait until a round has run
            # while this group is still training.
            deadline = time.monotonic() + 60
            while table.numpy()[1 - machine, 0] == 0:
                assert time.monotonic() < deadline, "no averaging round during training"
                time.sleep(0.005)


def test_train_with_sync_averages_hogwild_groups_exactly():
    coll = ThreadCollective(2)
    steps = 300
    tables = {r: SharedTable.create(_name(f"g{r}"), (ROWS, DIM)) for r in range(2)}

    def machine(rank):
        t = tables[rank]
        sync = DistributedHogwild([t], 25, all_reduce=coll.for_rank(rank), locked=True)
        train(_machine_worker, num_procs=2, args=(t, rank, steps), sync=sync, timeout=120)

    _run_machines(2, machine)
    a, b = tables[0].numpy(), tables[1].numpy()
    np.testing.assert_array_equal(a, b)
    # Each machine: 2 workers x steps on its own row and one each on rows 2, 3.
    np.testing.assert_array_equal(a[:, 0], [steps, steps, steps, steps])
    for t in tables.values():
        t.close()


def test_average_tables_can_include_optimizer_state():
    coll = ThreadCollective(2)
    tables = {r: SharedTable.create(_name(f"s{r}"), (2, 2), optimizer="adagrad") for r in range(2)}
    for r, t in tables.items():
        t.numpy()[:] = r * 2.0
        t.state("sum")[:] = r * 4.0

    def machine(rank):
        average_tables([tables[rank]], coll.for_rank(rank), include_state=True)

    _run_machines(2, machine)
    for t in tables.values():
        np.testing.assert_array_equal(t.numpy(), np.full((2, 2), 1.0))
        np.testing.assert_array_equal(t.state("sum"), np.full((2, 2), 2.0))
        t.close()


def test_argument_errors():
    with SharedTable.create(_name("args"), (2,)) as t:
        with pytest.raises(ValueError, match="sync_every must be an int >= 1"):
            DistributedHogwild([t], 0, all_reduce=lambda *_: None)
        with pytest.raises(ValueError, match="at least one SharedTable"):
            DistributedHogwild([], 5, all_reduce=lambda *_: None)


def _real_machine(rank, _world, steps):
    t = SharedTable.create(_name(f"real{rank}"), (ROWS, DIM))
    sync = DistributedHogwild([t], 25, locked=True)  # pscore.all_reduce on the default group
    train(_machine_worker, num_procs=2, args=(t, rank, steps), sync=sync, timeout=120)
    out = t.numpy().copy(), sync.rounds
    t.close()
    return out


@pytest.mark.skipif(not hasattr(pscore, "all_reduce"), reason="pscore.all_reduce is missing")
def test_real_collectives_between_machine_processes():
    from dist_helpers import run_ranks

    steps = 300
    results = run_ranks(_real_machine, 2, steps, timeout=60)
    (a, rounds_a), (b, rounds_b) = results[0], results[1]
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a[:, 0], [steps, steps, steps, steps])
    assert rounds_a == rounds_b >= 2  # one during training (see _machine_worker), the final
