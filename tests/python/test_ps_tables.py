"""Parameter-server tables through PSClient: creation and lookup, placement balanced by bytes,
sparse rows and initializers, argument errors, zero-copy torch tensors, async handles, batches,
the global step, stats and checkpoints."""

from __future__ import annotations

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from test_ps_support import addresses, start_cluster, stop_cluster

import pscore
from pscore.ps import SGD, Adam, PSClient, read_checkpoint


@pytest.fixture(scope="module")
def servers():
    s = start_cluster(3, num_workers=2)
    yield s
    stop_cluster(s)


@pytest.fixture
def client(servers):
    c = PSClient(addresses(servers), worker_id=0)
    yield c
    c.close()


def test_create_join_and_lookup(client, servers):
    info = client.create_dense("t_join", (3, 4), initializer="constant", value=2.5)
    assert info.shape == (3, 4) and not info.sparse and info.consistency == "async"
    other = PSClient(addresses(servers), worker_id=1)
    assert other.create_dense("t_join", (3, 4), initializer="constant", value=2.5) == info
    assert other.lookup_table("t_join") == info
    np.testing.assert_array_equal(other.pull("t_join"), np.full((3, 4), 2.5, np.float32))
    with pytest.raises(ValueError, match="already exists with other settings"):
        other.create_dense("t_join", (3, 5))
    with pytest.raises(KeyError, match="'t_missing' does not exist"):
        other.lookup_table("t_missing")
    with pytest.raises(KeyError, match="does not exist"):
        other.pull("t_missing")
    other.close()


def test_placement_is_balanced_by_bytes(client):
    big = client.create_dense("t_big", (1024, 1024))  # 4 MB: one part on every shard
    assert sorted(p[0] for p in big.parts) == [0, 1, 2]
    assert max(p[2] for p in big.parts) - min(p[2] for p in big.parts) <= 1
    sizes = [(7 * i) % 2000 + 10 for i in range(60)]  # small tables of uneven sizes
    for i, n in enumerate(sizes):
        client.create_dense(f"t_small_{i}", (n,))
    load = [0, 0, 0]
    for i in range(60):
        for shard, _, numel in client.table(f"t_small_{i}").parts:
            load[shard] += numel * 4
    assert max(load) - min(load) <= 2010 * 4, load  # within one small table
    dense = [s["dense_elements"] for s in client.stats()]
    assert min(dense) > 0.9 * max(dense)


def test_sparse_rows_any_ids_and_initializers(client):
    client.create_sparse("t_norm", 64, initializer="normal", mean=1.0, std=0.5, seed=11)
    client.create_sparse("t_norm_same_seed", 64, initializer="normal", mean=1.0, std=0.5, seed=11)
    client.create_sparse("t_unif", 16, initializer="uniform", low=-0.1, high=0.3, seed=3)
    ids = np.array([0, -1, 2**63 - 1, -(2**63), 12345678901234], dtype=np.int64)
    rows = client.pull_sparse("t_norm", ids)
    assert rows.shape == (5, 64)
    np.testing.assert_array_equal(rows, client.pull_sparse("t_norm", ids[::-1])[::-1])
    np.testing.assert_array_equal(rows, client.pull_sparse("t_norm_same_seed", ids))
    assert not np.allclose(rows[0], rows[1])
    many = client.pull_sparse("t_norm", np.arange(4000))
    assert abs(many.mean() - 1.0) < 0.02 and abs(many.std() - 0.5) < 0.02
    u = client.pull_sparse("t_unif", torch.arange(2000))
    assert u.min() >= -0.1 and u.max() < 0.3 and abs(u.mean() - 0.1) < 0.01
    rows_before = sum(s["sparse_rows"] for s in client.stats())
    client.pull_sparse("t_unif", np.arange(2000, 2100, dtype=np.int32))  # int32 ids converted
    assert sum(s["sparse_rows"] for s in client.stats()) == rows_before + 100


def test_sparse_push_sums_duplicates(client):
    client.create_sparse("t_dup", 4, optimizer=SGD(lr=1.0))
    ids = np.array([5, 9, 5, 5], dtype=np.int64)
    client.push_sparse("t_dup", ids, np.ones((4, 4), np.float32))
    np.testing.assert_array_equal(
        client.pull_sparse("t_dup", np.array([5, 9, 77])), [[-3] * 4, [-1] * 4, [0] * 4]
    )


def test_argument_errors(client):
    client.create_dense("t_err", (10,))
    client.create_sparse("t_err_sparse", 4)
    with pytest.raises(ValueError, match=r"push 't_err': the array has 9 elements, the table 10"):
        client.push("t_err", np.zeros(9, np.float32))
    with pytest.raises(ValueError, match="the table is sparse"):
        client.pull("t_err_sparse", np.zeros(4, np.float32))
    with pytest.raises(TypeError, match="out must be float32"):
        client.pull("t_err", np.zeros(10, np.float64))
    with pytest.raises(ValueError, match="not C-contiguous"):
        client.pull("t_err", np.zeros(20, np.float32)[::2])
    with pytest.raises(TypeError, match="ids must be integers"):
        client.pull_sparse("t_err_sparse", np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"3 ids need 12 values \(3 x 4\), got 8"):
        client.push_sparse("t_err_sparse", np.arange(3), np.zeros((2, 4), np.float32))
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        client.push("t_err", [1.0] * 10)
    with pytest.raises(ValueError, match="consistency must be one of"):
        client.create_dense("t_bad", 3, consistency="bsp")
    with pytest.raises(ValueError, match="backup_workers 2 must be below num_workers 2"):
        client.create_dense("t_bad", 3, consistency="sync", backup_workers=2)
    with pytest.raises(ValueError, match="may not contain ':'"):
        client.create_dense("t:bad", 3)


def test_torch_tensors_zero_copy(client):
    client.create_dense("t_torch", (100, 3), optimizer=SGD(lr=0.5))
    out = torch.empty(100, 3)
    ptr = out.data_ptr()
    assert client.pull("t_torch", out) is out and out.data_ptr() == ptr
    grad = torch.ones(100, 3, dtype=torch.float64)  # converted to float32 for sending
    client.push_pull("t_torch", grad, out)
    assert torch.equal(out, torch.full((100, 3), -0.5))


def test_async_handles_and_batches(client, servers):
    client.create_dense("t_sync", (1000,), consistency="sync", optimizer=SGD(lr=1.0))
    work = client.push_async("t_sync", np.ones(1000, np.float32))
    with pytest.raises(pscore.TimeoutError, match=re.escape("not completed within 0.1 s")):
        work.wait(timeout=0.1)  # the round waits for worker 1
    assert not work.is_completed()
    other = PSClient(addresses(servers), worker_id=1)
    other.push("t_sync", np.full(1000, 3.0, np.float32))
    assert work.wait(timeout=30) is True and work.result() is None and work.is_completed()
    assert work.status() == {"applied": 1, "duplicate": 0, "dropped": 0} and work.progress() == 1
    np.testing.assert_array_equal(client.pull("t_sync"), np.full(1000, -2.0, np.float32))
    other.close()

    client.create_dense("t_a", (5,), optimizer=SGD(lr=1.0))
    client.create_dense("t_b", (2, 2), optimizer=SGD(lr=1.0))
    client.push_many({"t_a": np.ones(5, np.float32), "t_b": np.ones((2, 2), np.float32)})
    got = client.pull_many(["t_a", "t_b"])
    assert got["t_a"].tolist() == [-1.0] * 5 and got["t_b"].shape == (2, 2)
    pulls = [client.pull_async("t_a") for _ in range(20)]
    assert all(w.result().tolist() == [-1.0] * 5 for w in pulls)


def test_global_step(client, servers):
    other = PSClient(addresses(servers), worker_id=1)
    start = client.global_step()
    assert client.increment_global_step() == start + 1
    assert other.increment_global_step(5) == start + 6
    assert client.global_step() == start + 6
    other.close()


def test_stats(client):
    client.create_dense("t_stats", (1000,))
    before = client.stats()
    for _ in range(5):
        client.push_pull("t_stats", np.zeros(1000, np.float32))
    after = client.stats()
    assert len(after) == 3 and [s["shard"] for s in after] == [0, 1, 2]
    grew = sum(a["requests"] - b["requests"] for a, b in zip(after, before))
    assert grew >= 5
    s = max(after, key=lambda s: s["bytes_in"])
    for key in ("bytes_out", "rows_pushed", "rows_pulled", "queue_depth", "latency_p99_us"):
        assert key in s
    assert s["latency_p50_us"] <= s["latency_p99_us"] and s["latency_count"] > 0


def test_checkpoint_round_trip(client, tmp_path):
    init = np.arange(12, dtype=np.float32).reshape(3, 4)
    client.create_dense("t_ck", init=init, optimizer=Adam(lr=0.1))
    client.create_sparse("t_ck_sparse", 3, initializer="uniform", seed=1, optimizer=Adam(lr=0.1))
    ids = np.array([3, -7, 2**40])
    g = np.ones((3, 4), np.float32)
    client.push("t_ck", g)
    client.push_sparse("t_ck_sparse", ids, np.ones((3, 3), np.float32))
    client.save(str(tmp_path))
    saved = read_checkpoint(str(tmp_path))
    np.testing.assert_array_equal(saved["t_ck"], client.pull("t_ck"))
    saved_ids, saved_rows = saved["t_ck_sparse"]
    assert sorted(saved_ids.tolist()) == sorted(ids.tolist())
    # One more step from the saved state...
    client.push("t_ck", g)
    after_one = client.pull("t_ck")
    client.push("t_ck", g)
    client.push_sparse("t_ck_sparse", ids, np.ones((3, 3), np.float32))
    # ...is reproduced after loading it: values and Adam's moments and step count came back.
    client.load(str(tmp_path))
    np.testing.assert_array_equal(client.pull("t_ck"), saved["t_ck"])
    np.testing.assert_array_equal(client.pull_sparse("t_ck_sparse", saved_ids), saved_rows)
    client.push("t_ck", g)
    np.testing.assert_array_equal(client.pull("t_ck"), after_one)
    with pytest.raises(
        pscore.Error, match=r"shard 0: cannot open checkpoint .*nowhere/shard-00000"
    ):
        client.load(str(tmp_path / "nowhere"))
    np.testing.assert_array_equal(client.pull("t_ck"), after_one)  # a failed load changes nothing


def test_sparse_capacity_reserves_room(client):
    client.create_sparse("t_cap", 8, capacity=30_000, initializer="constant", value=1.5)
    rows = client.pull_sparse("t_cap", np.arange(20_000) * 7)  # no allocation on these paths
    assert rows.shape == (20_000, 8) and np.all(rows == 1.5)
    with pytest.raises(ValueError, match="capacity applies to sparse tables"):
        client.create_dense("t_cap_dense", (4,), capacity=10)
    with pytest.raises(ValueError, match="capacity must be an int >= 0"):
        client.create_sparse("t_cap_bad", 8, capacity=-1)
    # a reservation no host could hold is refused up front, not met with a failed allocation
    with pytest.raises(
        ValueError,
        match=r"t_cap_huge': capacity 1099511627776: reserving \d+ rows takes \d+ bytes, more than",
    ):
        client.create_sparse("t_cap_huge", 1024, capacity=2**40)
    assert client.pull_sparse("t_cap", np.array([7])).shape == (1, 8)  # the server goes on


def test_one_client_shared_by_threads(client):
    import threading

    client.create_dense("t_threads", (50_000,), optimizer=SGD(lr=1.0))
    client.create_sparse("t_threads_e", 4, optimizer=SGD(lr=1.0))
    errors = []

    def pushes():
        try:
            for _ in range(25):
                w = client.push_async("t_threads", np.ones(50_000, np.float32))
                client.push_sparse("t_threads_e", np.array([1, 2]), np.ones((2, 4), np.float32))
                w.wait()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=pushes) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    np.testing.assert_array_equal(client.pull("t_threads"), np.full(50_000, -100.0, np.float32))
    assert client.pull_sparse("t_threads_e", np.array([2]))[0].tolist() == [-100.0] * 4


def test_load_answers_pushes_parked_in_a_sync_round(client, servers, tmp_path):
    client.create_dense("t_sync_load", (4,), consistency="sync", optimizer=SGD(lr=1.0))
    client.save(str(tmp_path))
    work = client.push_async("t_sync_load", np.ones(4, np.float32))  # waits for worker 1
    with pytest.raises(pscore.TimeoutError):
        work.wait(timeout=0.2)
    other = PSClient(addresses(servers), worker_id=1)
    other.load(str(tmp_path))  # the open round is gone: the parked push is told so
    assert work.wait(timeout=10) is True and work.result() is None
    assert work.status() == {"applied": 0, "duplicate": 0, "dropped": 1}
    np.testing.assert_array_equal(client.pull("t_sync_load"), np.zeros(4, np.float32))
    other.close()


def test_a_worker_that_looks_a_sync_table_up_joins_the_open_round(client, servers):
    # One backup worker: rounds close with the first of the two workers' pushes.
    name = "t_sync_join"
    client.create_dense(name, (3,), consistency="sync", backup_workers=1, optimizer=SGD(lr=1.0))
    for _ in range(3):
        client.push(name, np.ones(3, np.float32))
    newcomer = PSClient(addresses(servers), worker_id=1)
    assert newcomer.lookup_table(name).consistency == "sync"
    assert newcomer.table_step(name) == 3  # the open round, learnt at lookup
    work = newcomer.push_async(name, np.ones(3, np.float32))
    assert work.wait(timeout=30) is True and work.result() is None
    assert work.status() == {"applied": 1, "duplicate": 0, "dropped": 0}
    np.testing.assert_array_equal(newcomer.pull(name), np.full(3, -4.0, np.float32))
    newcomer.close()


def test_sparse_row_limit_fails_clearly_and_creates_nothing(client):
    client.create_sparse("t_rowcap", 2, max_rows_per_shard=4, optimizer=SGD(lr=1.0))
    rows_before = sum(s["sparse_rows"] for s in client.stats())
    many = np.arange(1000, 1100, dtype=np.int64)  # 100 ids over 3 shards of at most 4 rows
    with pytest.raises(ValueError, match=r"t_rowcap' on shard \d: .*past max_rows_per_shard=4"):
        client.pull_sparse("t_rowcap", many)
    with pytest.raises(ValueError, match="nothing was written"):
        client.push_sparse("t_rowcap", many, np.ones((100, 2), np.float32))
    assert sum(s["sparse_rows"] for s in client.stats()) == rows_before
    few = np.array([7], dtype=np.int64)  # one row fits anywhere
    client.push_sparse("t_rowcap", few, np.ones((1, 2), np.float32))
    np.testing.assert_array_equal(client.pull_sparse("t_rowcap", few), np.full((1, 2), -1.0))
    assert sum(s["sparse_rows"] for s in client.stats()) == rows_before + 1
    with pytest.raises(ValueError, match="applies to sparse tables"):
        client.create_dense("t_rowcap_dense", (4,), max_rows_per_shard=3)


def test_sparse_row_limit_counts_the_rows_of_an_open_sync_round(client, servers):
    name = "t_rowcap_sync"
    client.create_sparse(name, 2, max_rows_per_shard=4, consistency="sync", optimizer=SGD(lr=1.0))
    ids = np.array([1, 2, 3], dtype=np.int64)
    rows_before = sum(s["sparse_rows"] for s in client.stats())
    work = client.push_sparse_async(name, ids, np.ones((3, 2), np.float32))  # waits for worker 1
    other = PSClient(addresses(servers), worker_id=1)
    # The parked push's rows exist already (and so count against the limit) with the round open.
    assert sum(s["sparse_rows"] for s in other.stats()) == rows_before + 3
    assert not work.is_completed()
    with pytest.raises(ValueError, match="past max_rows_per_shard=4"):
        other.push_sparse(name, np.arange(500, 600, dtype=np.int64), np.ones((100, 2), np.float32))
    other.push_sparse(name, ids, np.ones((3, 2), np.float32))  # closes the round
    assert work.wait(timeout=30) is True and work.result() is None
    np.testing.assert_array_equal(client.pull_sparse(name, ids), np.full((3, 2), -1.0))
    other.close()
