"""A rank dies in a stream of all_reduce calls, in real processes started the way pscore-run
starts them (rank 0's process serves the store): every survivor names the dead rank first, also
when it is rank 0 and the store went with it, so no account can be exchanged; and survivors that
exit without destroy_process_group exit cleanly (native API and torch backend)."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import uuid

import pytest
from exit_helpers import child_env, write_script

TORCH_STREAM = """
    import os, signal, threading
    import torch
    import torch.distributed as dist
    import pscore.torch_backend

    dist.init_process_group("pscore")  # env://: torch's TCPStore in rank 0
    rank, victim = dist.get_rank(), int(os.environ["VICTIM"])
    x = torch.ones(1000)
    dist.all_reduce(x)
    if rank == victim:
        threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    try:
        while True:
            dist.all_reduce(x)
    except RuntimeError as e:
        print("FAILURE:", e, flush=True)  # and exit without destroy_process_group
"""

STREAM = """
    import os, signal, threading
    import numpy as np
    import pscore

    pscore.init_process_group()  # env:// as pscore-run sets it: rank 0 serves the store
    rank, victim = pscore.get_rank(), int(os.environ["VICTIM"])
    x = np.ones(1000, dtype=np.float32)
    pscore.all_reduce(x)  # everyone is connected
    if rank == victim and os.environ["HOW"] == "kill":
        threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    if rank == victim and os.environ["HOW"] == "raise":
        raise SystemExit("the victim leaves with an error")
    try:
        while True:
            pscore.all_reduce(x)
    except (ConnectionError, TimeoutError) as e:
        print("FAILURE:", e, flush=True)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_world(
    script: str, world: int, victim: int, transport: str, how: str = "kill"
) -> dict[int, str]:
    """Starts the ranks with pscore-run's variables; returns each survivor's failure message."""
    common = {
        "WORLD_SIZE": str(world),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "PSCORE_JOB_ID": uuid.uuid4().hex[:16],
        "PSCORE_TRANSPORT": transport,
        "PSCORE_TIMEOUT": "60",
        "VICTIM": str(victim),
        "HOW": how,
    }
    procs = [
        subprocess.Popen(
            [sys.executable, script],
            env=child_env(RANK=str(r), **common),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world)
    ]
    outputs = {}
    try:
        for r, p in enumerate(procs):
            outputs[r] = p.communicate(timeout=120)[0]
    finally:
        for p in procs:
            p.kill()
            p.wait()
    messages = {}
    for r, p in enumerate(procs):
        if r == victim:
            assert p.returncode == (-9 if how == "kill" else 1), (r, p.returncode, outputs[r])
            continue
        assert p.returncode == 0, (r, p.returncode, outputs[r])
        assert "terminate called" not in outputs[r], (r, outputs[r])
        found = re.search(r"^FAILURE: (.*)$", outputs[r], re.MULTILINE)
        assert found, (r, outputs[r])
        messages[r] = found.group(1)
    return messages


def first_rank_named(message: str, me: int) -> int:
    return next(int(r) for r in re.findall(r"rank (\d+)", message) if int(r) != me)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
@pytest.mark.parametrize("world", [3, 4])
def test_survivors_name_the_store_host_first_when_it_dies(tmp_path, transport, world):
    script = write_script(tmp_path, "stream.py", STREAM)
    for _ in range(2):
        for rank, msg in run_world(script, world, 0, transport).items():
            assert first_rank_named(msg, rank) == 0, (rank, msg)
            assert "rank 0" in msg and "store" in msg and "died or hangs" in msg, (rank, msg)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_survivors_name_another_victim_first_while_the_store_lives(tmp_path, transport):
    script = write_script(tmp_path, "stream.py", STREAM)
    for rank, msg in run_world(script, 4, 2, transport).items():
        assert first_rank_named(msg, rank) == 2, (rank, msg)
        # "died or hangs" from the accounts, or "rank 2 (pid P) died" where shm saw the pid go
        assert "died" in msg and "store" not in msg, (rank, msg)


@pytest.mark.parametrize("transport", ["tcp", "shm"])
def test_a_store_host_leaving_after_its_report_is_not_blamed(tmp_path, transport):
    # Rank 1 leaves; rank 0 reports, then exits and takes the store along while rank 2 may
    # still be reading accounts: rank 2 names rank 1, never the store's host.
    script = write_script(tmp_path, "stream.py", STREAM)
    for _ in range(3):
        for rank, msg in run_world(script, 3, 1, transport, how="raise").items():
            assert first_rank_named(msg, rank) == 1, (rank, msg)
            assert "store" not in msg, (rank, msg)


def test_torch_backend_names_the_victim_and_survivors_exit_cleanly(tmp_path):
    # Their failure reports may still be in a call on torch's store when the script ends, and
    # the completer thread and the caller both see each failure.
    script = write_script(tmp_path, "torch_stream.py", TORCH_STREAM)
    for victim in (2, 0, 2):
        for rank, msg in run_world(script, 4, victim, "tcp").items():
            assert first_rank_named(msg, rank) == victim, (rank, msg)
            assert "died or hangs" in msg, (rank, msg)
