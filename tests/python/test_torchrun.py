"""pscore under the real torchrun: the native API meets in the store torchrun's agent serves
(--standalone and a static --master-port rendezvous, restarts included), and the torch backend,
DDP included, exits cleanly with and without destroy_process_group."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from conftest import free_port
from exit_helpers import run_clean, write_script

pytest.importorskip("torch")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def torchrun() -> str:
    beside = Path(sys.executable).parent / "torchrun"
    found = str(beside) if beside.exists() else shutil.which("torchrun")
    if found is None:
        pytest.skip("torchrun is not installed")
    return found


def standalone(nproc: int) -> list[str]:
    return [torchrun(), "--standalone", f"--nproc-per-node={nproc}"]


def static(nproc: int, *extra: str) -> list[str]:
    return [
        torchrun(),
        "--nnodes=1",
        f"--nproc-per-node={nproc}",
        f"--master-port={free_port()}",
        *extra,
    ]


def test_train_digits_example_standalone(tmp_path):
    script = str(EXAMPLES / "train_digits.py")
    out = run_clean([*standalone(2), script, "--epochs", "2"], tmp_path, timeout=300)
    assert "test accuracy" in out, out


# Attempt 0 fails on rank 1 after the group is up; torchrun restarts both workers, which must
# meet afresh and not read what attempt 0 left in the agent's store (rank 1 comes late, so rank
# 0 would find its stale keys).
NATIVE = """
    import os, time
    import numpy as np
    import pscore
    attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
    if attempt == "1" and os.environ["RANK"] == "1":
        time.sleep(1.0)
    pscore.init_process_group()
    x = np.full(4, pscore.get_rank() + 1, np.int64)
    pscore.all_reduce(x)
    assert x.tolist() == [3] * 4, x
    if attempt == "0" and pscore.get_rank() == 1:
        raise SystemExit("attempt 0 fails on purpose")
    print(f"rank {pscore.get_rank()} attempt {attempt}: {x.tolist()}", flush=True)
    pscore.destroy_process_group()
"""


def test_native_api_static_rendezvous_across_a_restart(tmp_path):
    script = write_script(tmp_path, "native.py", NATIVE)
    # Shared memory only: a stale segment name of attempt 0 could not be mapped.
    args = [*static(2, "--max-restarts=1"), script]
    out = run_clean(args, tmp_path, timeout=300, PSCORE_TRANSPORT="shm")
    assert "rank 0 attempt 1: [3, 3, 3, 3]" in out, out
    assert "rank 1 attempt 1: [3, 3, 3, 3]" in out, out


def test_native_api_standalone(tmp_path):
    script = write_script(tmp_path, "native.py", NATIVE)
    out = run_clean([*standalone(2), "--max-restarts=1", script], tmp_path, timeout=300)
    assert "rank 1 attempt 1: [3, 3, 3, 3]" in out, out


# The torch backend's completer thread used to abort the process at exit ("terminate called
# without an active exception"), with or without destroy_process_group.
BACKEND = """
    import sys
    import torch
    import torch.distributed as dist
    import pscore.torch_backend

    dist.init_process_group("pscore")
    t = torch.ones(16)
    dist.all_reduce(t)
    assert t[0].item() == dist.get_world_size(), t
    dist.barrier()
    if sys.argv[1] == "destroy":
        dist.destroy_process_group()
"""


@pytest.mark.parametrize("ending", ["destroy", "exit"])
def test_torch_backend_exits_cleanly(tmp_path, ending):
    script = write_script(tmp_path, "backend.py", BACKEND)
    for _ in range(2):
        run_clean([*standalone(4), script, ending], tmp_path, timeout=300, OMP_NUM_THREADS="1")


DDP = """
    import torch
    import torch.distributed as dist
    import pscore.torch_backend

    dist.init_process_group("pscore")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(5):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    print("trained", flush=True)
"""


def test_ddp_script_exits_cleanly(tmp_path):
    script = write_script(tmp_path, "ddp.py", DDP)
    out = run_clean([*standalone(4), script], tmp_path, timeout=300, OMP_NUM_THREADS="1")
    assert out.count("trained") == 4, out
