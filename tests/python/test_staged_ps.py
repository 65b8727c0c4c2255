"""PSClient push/pull (dense and sparse) of CUDA buffers, staged through pinned host memory, on
the host with the fake CUDA runtime: the same tables as the same calls on host arrays, every
copy on the caller's stream, and a CUDA error naming the request."""

from __future__ import annotations

import json

from fake_cuda import fake_cudart, run_python  # noqa: F401 - fake_cudart is a fixture

_SCRIPT = r"""
import json
import numpy as np
import pscore
from fake_cuda import FakeCudaBuffer, FakeRuntime, caller_stream, use_fake_runtime
from test_ps_support import addresses, start_cluster, stop_cluster
from pscore.ps import SGD, PSClient

STREAM = 77
fake = use_fake_runtime(PATH)
servers = start_cluster(2)
client = PSClient(addresses(servers), worker_id=0)


def session(prefix, wrap, sync):
    client.create_dense(prefix + "d", (50,), optimizer=SGD(lr=0.5))
    client.create_sparse(prefix + "s", 4, optimizer=SGD(lr=1.0))
    client.push(prefix + "d", wrap(np.arange(50, dtype=np.float32)))
    pulled = wrap(np.zeros(50, np.float32))
    client.pull(prefix + "d", pulled)
    both = wrap(np.zeros(50, np.float32))
    client.push_pull(prefix + "d", wrap(np.ones(50, np.float32)), both)
    ids = wrap(np.array([3, 9, 3, 1000], np.int64))
    client.push_sparse(prefix + "s", ids, wrap(np.ones((4, 4), np.float32)))
    rows = wrap(np.zeros((4, 4), np.float32))
    client.pull_sparse(prefix + "s", ids, rows)
    rows2 = wrap(np.zeros((4, 4), np.float32))
    client.push_pull_sparse(prefix + "s", ids, wrap(np.full((4, 4), 2, np.float32)), rows2)
    sync()
    return [np.array(getattr(b, "array", b)).tolist() for b in (pulled, both, rows, rows2)]


with caller_stream(STREAM):
    staged = session("gpu_", FakeCudaBuffer, fake.synchronize)
cpu = session("cpu_", lambda a: a, lambda: None)
streams = sorted({c["stream"] for _, c in fake.copies()})
fake.fail("cudaMemcpyAsync", 700)
try:
    client.push("gpu_d", FakeCudaBuffer(np.zeros(50, np.float32)))
except pscore.Error as e:
    error = str(e)
fake.fail(None)
try:
    client.push_sparse("gpu_s", np.array([1]), FakeCudaBuffer(np.ones((1, 4), np.float32)))
except ValueError as e:
    mixed = str(e)
client.close()
stop_cluster(servers)
print(json.dumps({"staged": staged, "cpu": cpu, "streams": streams, "error": error,
                  "mixed": mixed}))
"""


def test_push_and_pull_of_cuda_buffers_match_host_arrays(fake_cudart):  # noqa: F811
    result = run_python(_SCRIPT.replace("PATH", repr(fake_cudart)), fake_cudart)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["staged"] == out["cpu"]
    assert out["cpu"][0][:3] == [0.0, -0.5, -1.0]  # a real update went through
    assert out["streams"] == [77]
    assert out["error"].startswith("push: cudaMemcpyAsync device to host of 200 bytes")
    assert "(CUDA error 700)" in out["error"]
    assert out["mixed"] == (
        "push_sparse: tensors on cuda:0 and cpu in one call; pass every tensor on one device"
    )
