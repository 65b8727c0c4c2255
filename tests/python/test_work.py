"""One Work protocol (pscore.collectives.work): collectives, the parameter-server client and
operations that finished at once all return a pscore.Work with wait(timeout) -> True,
is_completed, exception and result; a timed-out wait leaves the operation running. (The torch
backend's Work: test_torch_backend.)
"""

from __future__ import annotations

import datetime

import numpy as np
import pytest
from dist_helpers import run_ranks

import pscore
from pscore.collectives.work import CollectiveWork, CompletedWork
from pscore.ps import PSClient, PSWork
from pscore.ps.server import PServer


def check_finished(work: pscore.Work, value=None) -> None:
    assert isinstance(work, pscore.Work)
    assert work.wait() is True and work.wait(timeout=0) is True
    assert work.is_completed() and work.is_success() and work.exception() is None
    if value is None:
        assert work.result() is None
    else:
        np.testing.assert_array_equal(work.result(), value)


def test_completed_work_follows_the_protocol():
    check_finished(CompletedWork())
    assert CompletedWork(7).result() == 7


def test_parameter_server_work_follows_the_protocol():
    with PServer(num_workers=2, log_connections=False) as server:
        client = PSClient([server.address])
        other = PSClient([server.address], worker_id=1)
        client.create_dense("w", (4,))
        push = client.push_async("w", np.ones(4, np.float32))
        assert isinstance(push, PSWork)
        check_finished(push)
        pull = client.pull_async("w")
        check_finished(pull, client.pull("w"))
        other.drop_table("w")  # the server answers this client's next pull with the failure
        failed = client.pull_async("w")
        with pytest.raises(KeyError, match="was dropped"):
            failed.wait()
        assert failed.is_completed() and not failed.is_success()
        assert isinstance(failed.exception(), KeyError)
        with pytest.raises(KeyError, match="was dropped"):
            failed.result()
        with pytest.raises(ValueError, match="timeout must be a number of seconds >= 0"):
            push.wait(timeout=-1)
        other.close()
        client.close()


def two_ranks(rank, _world):
    """Rank 1 sends only after the barrier, so rank 0's first wait on the receive times out."""
    got = np.zeros(4, np.float32)
    if rank == 0:
        w = pscore.irecv(got, 1, tag=5)
        assert isinstance(w, CollectiveWork)
        with pytest.raises(pscore.TimeoutError, match=r"not completed within 0.2 s"):
            w.wait(datetime.timedelta(milliseconds=200))
        assert not w.is_completed() and w.exception() is None
        pscore.barrier()
        check_finished(w)
        assert got.tolist() == [1.0] * 4 and w.source_rank() == 1
    else:
        pscore.barrier()
        pscore.send(np.ones(4, np.float32), 0, tag=5)
    x = np.full(4, rank + 1, np.float32)
    w = pscore.all_reduce(x, async_op=True)
    check_finished(w)
    assert x.tolist() == [3.0] * 4
    return True


def test_collective_work_follows_the_protocol():
    assert all(run_ranks(two_ranks, 2, timeout=60).values())
