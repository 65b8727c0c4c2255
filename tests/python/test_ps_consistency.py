"""Consistency modes with several worker processes: sync (BSP) rounds, backup workers dropping
late gradients, worker_done for uneven inputs, ssp's staleness bound, and async updates."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest
from test_ps_support import addresses, run_workers, start_cluster, stop_cluster

import pscore
from pscore.ps import SGD, PSClient


def sync_worker(rank, addrs, steps):
    c = PSClient(addrs, worker_id=rank)
    c.create_dense("sync_w", (50_000,), consistency="sync", optimizer=SGD(lr=0.1))
    c.create_sparse("sync_e", 4, consistency="sync", optimizer=SGD(lr=1.0))
    seen = []
    for step in range(steps):
        out = c.push_pull("sync_w", np.full(50_000, rank + 1.0, np.float32))
        assert np.all(out == out[0])
        seen.append(float(out[0]))
        assert c.table_step("sync_w") == step + 1
        c.push_sparse("sync_e", np.array([rank, 100]), np.ones((2, 4), np.float32))
    c.close()
    return seen


def test_sync_rounds_apply_the_mean_once_per_step():
    servers = start_cluster(2, num_workers=3, min_part_bytes=1024)
    try:
        seen = run_workers(sync_worker, 3, (addresses(servers), 4))
        expect = [-0.1 * 2.0 * (k + 1) for k in range(4)]  # mean of 1, 2, 3 each round
        for s in seen:
            np.testing.assert_allclose(s, expect, rtol=1e-6)
        c = PSClient(addresses(servers), worker_id=0)
        rows = c.pull_sparse("sync_e", np.array([0, 1, 2, 100]))
        np.testing.assert_allclose(rows[:, 0], [-4 / 3, -4 / 3, -4 / 3, -4.0], rtol=1e-6)
    finally:
        stop_cluster(servers)


def backup_worker(rank, addrs, steps):
    c = PSClient(addrs, worker_id=rank)
    c.create_dense("bk", (100,), consistency="sync", backup_workers=1, optimizer=SGD(lr=1.0))
    statuses = []

    def push(value):
        w = c.push_async("bk", np.full(100, value, np.float32))
        w.wait()
        statuses.append(w.status())

    if rank < 2:  # rounds close with the first 3 - 1 = 2 gradients
        while c.global_step() < 1:  # the straggler has joined (at round 0)
            time.sleep(0.002)
        for _ in range(steps):
            push(1.0)
            if rank == 0:
                c.increment_global_step()
        c.worker_done()
        c.increment_global_step()
    else:  # the straggler's first gradient arrives after every round it could join closed
        c.increment_global_step()
        while c.global_step() < 1 + steps:
            time.sleep(0.002)
        push(100.0)
        assert c.table_step("bk") == steps  # it moved on to the open round
        while c.global_step() < 1 + steps + 2:  # both others finished
            time.sleep(0.002)
        push(100.0)
    return statuses


def test_backup_workers_drop_late_gradients():
    servers = start_cluster(2, num_workers=3)
    try:
        statuses = run_workers(backup_worker, 3, (addresses(servers), 5))
        applied = {"applied": 1, "duplicate": 0, "dropped": 0}
        assert statuses[0] == [applied] * 5 and statuses[1] == [applied] * 5
        assert statuses[2] == [{"applied": 0, "duplicate": 0, "dropped": 1}, applied]
        c = PSClient(addresses(servers), worker_id=0)
        # 5 rounds of the fast workers' mean, none of the late 100s, then the straggler alone
        np.testing.assert_array_equal(c.pull("bk"), np.full(100, -105.0, np.float32))
    finally:
        stop_cluster(servers)


def done_worker(rank, addrs):
    c = PSClient(addrs, worker_id=rank)
    c.create_dense("done_w", (10,), consistency="sync", optimizer=SGD(lr=1.0))
    steps = 5 if rank == 0 else 2  # uneven inputs: worker 1 runs out of data first
    for _ in range(steps):
        c.push("done_w", np.full(10, 1.0 if rank == 0 else 3.0, np.float32))
    c.worker_done()
    return steps


def test_worker_done_releases_sync_rounds():
    servers = start_cluster(2, num_workers=2)
    try:
        run_workers(done_worker, 2, (addresses(servers),))
        c = PSClient(addresses(servers), worker_id=0)
        # rounds 0-1 average 1 and 3; rounds 2-4 have worker 0 alone
        np.testing.assert_array_equal(c.pull("done_w"), np.full(10, -7.0, np.float32))
    finally:
        stop_cluster(servers)


def ssp_worker(rank, addrs, num_workers, staleness, steps):
    c = PSClient(addrs, worker_id=rank)
    c.create_dense(
        "ssp_c", (num_workers,), consistency="ssp", staleness=staleness, optimizer=SGD(lr=1.0)
    )
    rng = random.Random(rank)
    grad = np.zeros(num_workers, np.float32)
    grad[rank] = -1.0  # table entry w counts worker w's pushes: its clock
    widest = 0
    for k in range(steps):
        time.sleep(rng.random() * 0.004 * rank)  # higher ranks are slower
        c.push("ssp_c", grad)
        clocks = c.pull("ssp_c")
        assert clocks[rank] == k + 1
        widest = max(widest, int(clocks[rank] - clocks.min()))
    c.worker_done()
    return widest


def test_ssp_bounds_the_lead_over_the_slowest_worker():
    servers = start_cluster(1, num_workers=3)
    try:
        widest = run_workers(ssp_worker, 3, (addresses(servers), 3, 2, 15))
        assert max(widest) <= 2, widest
    finally:
        stop_cluster(servers)


def test_ssp_blocks_a_worker_too_far_ahead():
    servers = start_cluster(1, num_workers=2)
    try:
        fast = PSClient(addresses(servers), worker_id=0)
        slow = PSClient(addresses(servers), worker_id=1)
        fast.create_dense("ssp_b", (4,), consistency="ssp", staleness=1)
        fast.push("ssp_b", np.ones(4, np.float32))  # clock 1, slowest 0: within the bound
        third = fast.push_async("ssp_b", np.ones(4, np.float32))  # clock 2: two ahead
        with pytest.raises(pscore.TimeoutError):
            third.wait(timeout=0.2)
        slow.push("ssp_b", np.ones(4, np.float32))
        third.wait(timeout=30)
        assert third.progress() == 2
    finally:
        stop_cluster(servers)


def async_worker(rank, addrs, steps):
    c = PSClient(addrs, worker_id=rank)
    c.create_dense("async_w", (20_000,), optimizer=SGD(lr=1.0))
    c.create_sparse("async_e", 8, optimizer=SGD(lr=1.0))
    ids = np.arange(50) * 7919 - 10**12
    works = []
    for _ in range(steps):
        works.append(c.push_async("async_w", np.ones(20_000, np.float32)))
        works.append(c.push_sparse_async("async_e", ids, np.ones((50, 8), np.float32)))
    for w in works:
        w.wait()
    return steps


def test_async_pushes_from_many_workers_all_apply():
    servers = start_cluster(2, num_workers=3, min_part_bytes=1024)
    try:
        run_workers(async_worker, 3, (addresses(servers), 20))
        c = PSClient(addresses(servers), worker_id=0)
        np.testing.assert_array_equal(c.pull("async_w"), np.full(20_000, -60.0, np.float32))
        rows = c.pull_sparse("async_e", np.arange(50) * 7919 - 10**12)
        np.testing.assert_array_equal(rows, np.full((50, 8), -60.0, np.float32))
    finally:
        stop_cluster(servers)
