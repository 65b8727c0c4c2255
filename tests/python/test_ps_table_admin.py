"""Table administration and the errors around it: list_tables and drop_table over two shards
(also across a recovery), re-creating a table with other settings (each differing setting named),
a shard restarted without its tables (named, with the restart said), and a sync push that times
out (the round and the workers it waits for named)."""

from __future__ import annotations

import re
import signal

import numpy as np
import pytest
from test_ps_support import (
    address_from_banner,
    addresses,
    pserver_process,
    start_cluster,
    stop_cluster,
)

import pscore
from pscore.ps import SGD, Adam, PSClient
from pscore.ps.server import PServer
from pscore.store import TCPStore


@pytest.fixture
def servers():
    s = start_cluster(2, num_workers=3)
    yield s
    stop_cluster(s)


def test_list_and_drop_across_two_shards(servers):
    c = PSClient(addresses(servers), worker_id=0)
    other = PSClient(addresses(servers), worker_id=1)
    w = c.create_dense("w", (64, 1024), optimizer=Adam(lr=0.01), consistency="sync")
    assert sorted(p[0] for p in w.parts) == [0, 1]  # split over both shards
    c.create_sparse("emb", 8, initializer="uniform", low=-1.0, high=1.0, seed=4)
    tables = other.list_tables()
    assert sorted(tables) == ["emb", "w"]
    assert tables["w"] == w
    settings = dict(tables["w"].settings)
    assert settings["shape"] == "(64, 1024)" and settings["optimizer"] == "adam"
    assert settings["lr"] == "0.01" and settings["consistency"] == "sync"
    assert dict(tables["emb"].settings)["initializer"] == "uniform(low=-1, high=1)"
    assert dict(tables["emb"].settings)["dim"] == "8"
    other.pull("w")  # `other` now knows w's layout

    c.drop_table("w")
    assert list(c.list_tables()) == ["emb"]
    assert [s["tables"] for s in c.stats()] == [1, 1]  # the parts are gone from both shards
    with pytest.raises(KeyError, match="table 'w' does not exist"):
        c.pull("w")
    with pytest.raises(KeyError, match=r"pull 'w' failed: table 'w' \(id \d+\) was dropped"):
        other.pull("w")
    with pytest.raises(KeyError, match="'w' does not exist on any of the 2 shards"):
        c.drop_table("w")
    again = other.create_dense("w", (3,), initializer="constant", value=7.0)  # other settings
    assert again.shape == (3,)
    np.testing.assert_array_equal(c.pull("w"), np.full(3, 7.0, np.float32))
    c.push("w", np.ones(3, np.float32))
    np.testing.assert_array_equal(other.pull("w"), np.full(3, 6.999, np.float32))  # SGD lr 1e-3
    assert sorted(c.list_tables()) == ["emb", "w"]


def test_drop_answers_parked_sync_pushes_as_dropped(servers):
    c = PSClient(addresses(servers), worker_id=0)
    c.create_dense("round", (4,), consistency="sync")
    parked = c.push_async("round", np.ones(4, np.float32))  # workers 1 and 2 never push
    c.drop_table("round")
    parked.wait(timeout=30)
    assert parked.status()["dropped"] == 1


def test_recreating_with_other_settings_names_each_difference(servers):
    c = PSClient(addresses(servers), worker_id=0)
    c.create_sparse("e", 64, optimizer=Adam(lr=0.001), consistency="sync")
    with pytest.raises(ValueError, match="already exists with other settings") as err:
        c.create_sparse("e", 32, optimizer=SGD(lr=0.1))
    msg = str(err.value)
    assert "table 'e' already exists with other settings (existing vs requested)" in msg
    for difference in ("dim: 64 vs 32", "optimizer: adam vs sgd", "consistency: sync vs async"):
        assert difference in msg, msg
    assert "lr:" not in msg  # hyper-parameters are compared between equal optimizers only
    with pytest.raises(ValueError, match=r"lr: 0\.001 vs 0\.002; beta2: 0\.999 vs 0\.99$"):
        c.create_sparse("e", 64, optimizer=Adam(lr=0.002, betas=(0.9, 0.99)), consistency="sync")
    c.create_dense("d", (4, 4), clip_norm=1.0)
    with pytest.raises(ValueError, match=r"shape: \(4, 4\) vs \(16,\); clip_norm: 1 vs 0$"):
        c.create_dense("d", (16,))
    with pytest.raises(ValueError, match=r"kind: dense vs sparse$"):
        c.create_sparse("d", 4, clip_norm=1.0)


def test_restarted_shard_without_recovery_is_named():
    store = TCPStore("127.0.0.1", 0, is_master=True, timeout=30)
    servers = start_cluster(2, num_workers=2, store=store, job_id="restart")
    try:
        c = PSClient(store=store, job_id="restart", worker_id=0, retry_timeout=30)
        c.create_sparse("emb", 4)
        c.pull_sparse("emb", np.arange(10))
        servers[1].stop(0)
        servers[1] = PServer(1, 2, 2, store=store, job_id="restart", log_connections=False)
        port = servers[1].port  # empty: served without --recover
        with pytest.raises(KeyError) as err:
            c.pull_sparse("emb", np.arange(10))
        assert re.search(
            rf"pull_sparse 'emb' failed: shard 1 at 127\.0\.0\.1:{port} restarted \(new "
            r"incarnation\) without recovering table 'emb' \(id \d+\)",
            str(err.value),
        ), err.value
        fresh = PSClient(store=store, job_id="restart", worker_id=1)  # never saw shard 1 before
        with pytest.raises(KeyError) as err:
            fresh.pull_sparse("emb", np.arange(10))
        assert re.search(
            rf"table 'emb' \(id \d+\) does not exist on shard 1 at 127\.0\.0\.1:{port}",
            str(err.value),
        ), err.value
    finally:
        stop_cluster(servers)


def test_sync_push_timeout_names_the_round_and_the_workers_it_waits_for(servers):
    c = PSClient(addresses(servers), worker_id=0, timeout=0.3)
    PSClient(addresses(servers), worker_id=2).worker_done()
    c.create_dense("stuck", (4,), consistency="sync")
    with pytest.raises(
        pscore.TimeoutError,
        match=r"push 'stuck' on shard \d \(127\.0\.0\.1:\d+\) timed out after 300 ms.*; sync "
        r"round 0 of table 'stuck' still waits for workers \[1\] \(pushed: \[0\], "
        r"finished: \[2\]\)",
    ):
        c.push("stuck", np.ones(4, np.float32))
    c.create_dense("slow", (4,), consistency="ssp", staleness=0)
    with pytest.raises(
        pscore.TimeoutError,
        match=r"push 'slow' .*; ssp table 'slow' \(staleness 0\) waits for slower workers: "
        r"worker clocks \[1, 0, 0\], finished workers \[2\]",
    ):
        c.push("slow", np.ones(4, np.float32))  # one step ahead of worker 1


def test_drop_is_replayed_on_recovery(tmp_path):
    server = PServer(recover=str(tmp_path), log_connections=False)
    c = PSClient([server.address])
    c.create_dense("a", (5,), optimizer=SGD(lr=1.0))
    c.push("a", np.ones(5, np.float32))
    c.create_dense("b", (2,))
    c.drop_table("a")
    c.create_sparse("a", 3, optimizer=SGD(lr=1.0))  # the name again, other settings
    c.push_sparse("a", np.array([7]), np.ones((1, 3), np.float32))
    server.stop(0)  # no snapshot: recovery replays the log, drop included
    again = PServer(recover=str(tmp_path), log_connections=False)
    try:
        c2 = PSClient([again.address])
        assert sorted(c2.list_tables()) == ["a", "b"]
        assert c2.table("a").sparse
        np.testing.assert_array_equal(c2.pull_sparse("a", np.array([7])), [[-1.0, -1.0, -1.0]])
    finally:
        again.stop(0)


def test_sync_push_timeout_on_a_frozen_shard_says_the_state_is_unknown():
    """A shard that stops answering (SIGSTOP) cannot say what its round waits for: the timeout
    names the shard and says why the round's state is missing."""
    proc = pserver_process("--num-workers", "2")
    try:
        c = PSClient([address_from_banner(proc.banner)], timeout=0.5)
        c.create_dense("frozen", (4,), consistency="sync")
        proc.send_signal(signal.SIGSTOP)
        with pytest.raises(
            pscore.TimeoutError,
            match=r"push 'frozen' on shard 0 \(127\.0\.0\.1:\d+\) timed out after 500 ms.*; the "
            r"shards could not say what the table waits for \(.*shard 0",
        ):
            c.push("frozen", np.ones(4, np.float32))
    finally:
        proc.kill()
        proc.wait()


def test_an_observer_that_pushes_is_told_it_is_read_only(servers):
    worker = PSClient(addresses(servers), worker_id=0)
    worker.create_dense("w", (8,))
    worker.create_sparse("emb", 4)
    observer = PSClient(addresses(servers), worker_id=-1)  # TF's ps or evaluator task
    np.testing.assert_array_equal(observer.pull("w"), worker.pull("w"))  # reading is fine
    read_only = r"this client is read-only \(worker id -1"
    with pytest.raises(ValueError, match=read_only):
        observer.push("w", np.ones(8, np.float32))
    with pytest.raises(ValueError, match=read_only):
        observer.push_sparse("emb", np.array([1], np.int64), np.ones((1, 4), np.float32))
    with pytest.raises(ValueError, match=read_only):
        observer.worker_done()
