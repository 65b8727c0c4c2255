"""init_process_group from the environment and from every init_method URL, ranks starting in
any order, across real processes."""

import multiprocessing as mp
import os
import socket
import time
import uuid

import numpy as np
import pytest

_ctx = mp.get_context("fork")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(env, kwargs, delay, queue):
    os.environ.update(env)
    time.sleep(delay)
    try:
        import pscore

        pscore.init_process_group(timeout=20, **kwargs)
        x = np.array([pscore.get_rank() + 1], np.int64)
        pscore.all_reduce(x)
        queue.put((pscore.get_rank(), int(x[0]), pscore.get_world_size()))
        pscore.barrier()
        pscore.destroy_process_group()
    except BaseException as e:  # noqa: BLE001
        queue.put(("error", repr(e), None))


def run_world(per_rank, delays=None):
    """per_rank: list of (env, kwargs); returns the sorted (rank, sum, world) triples."""
    queue = _ctx.Queue()
    delays = delays or [0.0] * len(per_rank)
    procs = [
        _ctx.Process(target=_rank_main, args=(env, kw, d, queue))
        for (env, kw), d in zip(per_rank, delays)
    ]
    for p in procs:
        p.start()
    out = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    assert all(o[0] != "error" for o in out), out
    return sorted(out)


def expect(world):
    total = world * (world + 1) // 2
    return [(r, total, world) for r in range(world)]


def test_torchrun_environment_with_late_master():
    port = free_port()
    world = 3
    envs = [
        (
            {
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "RANK": str(r),
                "WORLD_SIZE": str(world),
                "LOCAL_RANK": str(r),
                "LOCAL_WORLD_SIZE": str(world),
            },
            {},
        )
        for r in range(world)
    ]
    # Rank 0 hosts the store and starts last: the others wait for it.
    assert run_world(envs, delays=[1.0, 0.0, 0.2]) == expect(world)


def test_pscore_variables_win_over_torchrun():
    port = free_port()
    envs = [
        (
            {
                "PSCORE_MASTER_ADDR": "localhost",
                "PSCORE_MASTER_PORT": str(port),
                "PSCORE_RANK": str(r),
                "PSCORE_WORLD_SIZE": "2",
                "RANK": "7",
                "WORLD_SIZE": "9",
            },
            {},
        )
        for r in range(2)
    ]
    assert run_world(envs) == expect(2)


def test_tcp_url():
    url = f"tcp://127.0.0.1:{free_port()}"
    per_rank = [({}, {"init_method": url, "rank": r, "world_size": 2}) for r in range(2)]
    assert run_world(per_rank, delays=[0.5, 0.0]) == expect(2)


def test_file_url(tmp_path):
    url = f"file://{tmp_path}/rendezvous"
    per_rank = [({}, {"init_method": url, "rank": r, "world_size": 3}) for r in range(3)]
    assert run_world(per_rank) == expect(3)


def test_redis_url(redis_server):
    url = f"{redis_server.url}?prefix=init-{uuid.uuid4().hex}"
    per_rank = [({}, {"init_method": url, "rank": r, "world_size": 2}) for r in range(2)]
    assert run_world(per_rank) == expect(2)


def test_tcp_transport_forced_by_environment():
    url = f"tcp://127.0.0.1:{free_port()}"
    per_rank = [
        ({"PSCORE_TRANSPORT": "tcp"}, {"init_method": url, "rank": r, "world_size": 2})
        for r in range(2)
    ]
    assert run_world(per_rank) == expect(2)


def _two_ranks_outcomes(env):
    queue = _ctx.Queue()
    url = f"tcp://127.0.0.1:{free_port()}"
    procs = [
        _ctx.Process(
            target=_rank_main,
            args=(env, {"init_method": url, "rank": r, "world_size": 2}, 0.0, queue),
        )
        for r in range(2)
    ]
    for p in procs:
        p.start()
    out = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(10)
    return out


def test_a_malformed_shm_size_is_an_error_not_a_fallback_to_tcp():
    out = _two_ranks_outcomes({"PSCORE_TRANSPORT": "auto", "PSCORE_SHM_RING_BYTES": "4Mi"})
    assert [o[0] for o in out] == ["error", "error"], out
    # A rank may instead see the other's exit first (the store's host leaves with its error).
    assert any("PSCORE_SHM_RING_BYTES='4Mi'" in o[1] for o in out), out


def test_shm_sizes_take_suffixes():
    out = _two_ranks_outcomes({"PSCORE_TRANSPORT": "shm", "PSCORE_SHM_RING_BYTES": "1M"})
    assert sorted(out) == expect(2), out


def _fit_main(url, rank, fits_here, queue):
    try:
        import pscore
        from pscore.collectives.group import resolve

        if fits_here is not None:  # as a host with other cores would say
            pscore._C.ranks_fit_cores = lambda _n: fits_here
        pscore.init_process_group(init_method=url, rank=rank, world_size=2, timeout=20)
        queue.put((rank, resolve(None).native.ranks_fit_cores))
        pscore.destroy_process_group()
    except BaseException as e:  # noqa: BLE001
        queue.put(("error", repr(e)))


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 ranks to fit on this host")
@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_ranks_agree_whether_they_fit_on_the_cores(monkeypatch, transport):
    """Auto's algorithms follow whether the ranks fit on the cores, and every rank must choose
    alike: one host's "no" (as on a host with fewer cores) holds for all."""
    monkeypatch.setenv("PSCORE_TRANSPORT", transport)
    for fits in (None, False):
        queue = _ctx.Queue()
        url = f"tcp://127.0.0.1:{free_port()}"
        procs = [
            _ctx.Process(target=_fit_main, args=(url, r, fits if r == 1 else None, queue))
            for r in range(2)
        ]
        for p in procs:
            p.start()
        out = sorted(queue.get(timeout=60) for _ in procs)
        for p in procs:
            p.join(10)
        assert out == [(0, fits is None), (1, fits is None)], out


def test_bad_arguments():
    import pscore

    with pytest.raises(ValueError, match="backend 'nccl2' is not supported"):
        pscore.init_process_group("nccl2", init_method="tcp://127.0.0.1:1", rank=0, world_size=1)
    with pytest.raises(ValueError, match="rank 2 is out of range for world_size 2"):
        pscore.init_process_group(store=object(), rank=2, world_size=2)
    os.environ["PSCORE_TRANSPORT"] = "udp"
    try:
        with pytest.raises(ValueError, match="PSCORE_TRANSPORT='udp'"):
            pscore.init_process_group(
                init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1
            )
    finally:
        del os.environ["PSCORE_TRANSPORT"]
        pscore.destroy_process_group()


def test_world_of_one_needs_no_peers():
    import pscore

    pscore.init_process_group(init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        x = np.arange(5.0)
        pscore.all_reduce(x, op="avg")
        assert (x == np.arange(5.0)).all() and pscore.get_world_size() == 1
    finally:
        pscore.destroy_process_group()


def test_tf_parameter_server_task_is_told_to_serve(monkeypatch):
    import json

    import pscore

    cluster = {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:2"], "ps": ["127.0.0.1:3"]}
    monkeypatch.setenv(
        "TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "ps", "index": 0}})
    )
    with pytest.raises(ValueError, match="'ps' task, which does not join the collective group"):
        pscore.init_process_group()
