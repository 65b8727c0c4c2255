"""A /dev/shm too small for the rings: made in a mount namespace of its own (root and unshare),
so the rest of the machine keeps its /dev/shm. The rings are allocated up front, so a full
/dev/shm is an error at init naming it (with PSCORE_TRANSPORT=shm) or a fallback to TCP (auto),
never a SIGBUS at the first large message."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import pscore

PACKAGE_ROOT = os.path.dirname(os.path.dirname(pscore.__file__))

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)

RANK = textwrap.dedent(
    """
    import os, sys, numpy as np, pscore
    rank, port = int(sys.argv[1]), sys.argv[2]
    pscore.init_process_group(rank=rank, world_size=2, init_method="tcp://127.0.0.1:" + port)
    x = np.full(1 << 20, rank + 1, np.float32)  # 4 MB: goes round the ring
    pscore.all_reduce(x)
    assert (x == 3).all(), x[:4]
    os.write(1, f"transport {pscore.get_backend()}\\n".encode())  # one write: ranks share stdout
    """
)


def _run_two_ranks(tmp_path, transport: str) -> subprocess.CompletedProcess:
    script = tmp_path / "rank.py"
    script.write_text(RANK)
    port = "29" + str(500 + os.getpid() % 400)
    py = f"{sys.executable} {script}"
    shell = (
        "mount -t tmpfs -o size=1M tmpfs /dev/shm && "
        f"({py} 1 {port} & {py} 0 {port}; s=$?; wait $! && exit $s)"
    )
    env = {**os.environ, "PYTHONPATH": PACKAGE_ROOT, "PSCORE_TRANSPORT": transport}
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", shell],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def _unshare_works() -> bool:
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True, check=False)
    return probe.returncode == 0


def test_full_dev_shm_falls_back_to_tcp(tmp_path):
    if not _unshare_works():
        pytest.skip("mount namespaces are not allowed here")
    result = _run_two_ranks(tmp_path, "auto")
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.count("transport pscore/tcp") == 2, result.stdout
    assert "share this host, but not every rank could make or map" in result.stderr
    assert "is /dev/shm full?" in result.stderr, result.stderr[-2000:]


def test_full_dev_shm_with_shm_forced_names_it(tmp_path):
    if not _unshare_works():
        pytest.skip("mount namespaces are not allowed here")
    result = _run_two_ranks(tmp_path, "shm")
    assert result.returncode != 0
    assert "PSCORE_TRANSPORT=shm but not every rank could make or map" in result.stderr
    assert "is /dev/shm full?" in result.stderr, result.stderr[-2000:]
