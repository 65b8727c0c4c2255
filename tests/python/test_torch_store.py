"""TorchStore, the pscore Store over a torch.distributed store that rendezvous uses under
torchrun: torch's timeouts and lost connections arrive as pscore's errors, and the agent's store
is seen under the attempt's prefix."""

from __future__ import annotations

import datetime

import pytest

import pscore
from pscore.cluster import discover
from pscore.store.torch_store import TorchStore, agent_store

dist = pytest.importorskip("torch.distributed")

TIMEOUT = datetime.timedelta(seconds=5)


def torch_server() -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=TIMEOUT)


def test_timeouts_are_pscore_timeouts_naming_the_keys():
    store = TorchStore(torch_server())
    store.set("here", b"1")
    with pytest.raises(pscore.TimeoutError, match="keys still missing: 'absent'"):
        store.wait(["here", "absent"], 0.2)
    store.set_timeout(0.2)
    with pytest.raises(pscore.TimeoutError, match=r"get\('absent'\) timed out"):
        store.get("absent")


def test_a_lost_server_is_a_network_error():
    server = torch_server()
    client = TorchStore(dist.TCPStore("127.0.0.1", server.port, is_master=False, timeout=TIMEOUT))
    client.set("k", b"v")
    del server
    with pytest.raises(pscore.NetworkError, match=r"TorchStore: get\('k'\) failed"):
        client.get("k")


def test_agent_store_keys_live_under_the_run_and_attempt():
    server = torch_server()
    env = discover(
        {
            "RANK": "0",
            "WORLD_SIZE": "2",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(server.port),
            "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RUN_ID": "job9",
            "TORCHELASTIC_RESTART_COUNT": "2",
        }
    )
    assert env.agent_store_prefix == "pscore/job9/attempt_2"
    store = agent_store(env.master_addr, env.master_port, env.agent_store_prefix, 5.0)
    store.set("hello", b"world")
    assert server.get("pscore/job9/attempt_2/hello") == b"world"


def test_without_the_agent_store_rank_zero_serves_its_own():
    env = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}
    assert discover(env).agent_store_prefix is None
    assert discover({**env, "TORCHELASTIC_USE_AGENT_STORE": "False"}).agent_store_prefix is None
