"""The fake CUDA runtime the host tests of pscore's CUDA paths stand on: it loads through
PSCORE_CUDART_LIBRARY like the real one, and runs queued copies only when the host waits."""

from __future__ import annotations

from fake_cuda import fake_cudart, run_python  # noqa: F401 - fake_cudart is a fixture


def test_core_loads_the_fake_through_the_configured_path(fake_cudart):  # noqa: F811
    result = run_python(
        "from pscore import _gpu, cuda_libraries\n"
        "cuda_libraries.register_candidates()\n"
        "print(_gpu.cuda_device_count(), _gpu.cuda_runtime_path())\n",
        fake_cudart,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["1", fake_cudart]


def test_queued_copies_run_when_the_host_waits(fake_cudart):  # noqa: F811
    result = run_python(
        "import ctypes\n"
        "from fake_cuda import FakeRuntime\n"
        "fake = FakeRuntime(PATH)\n"
        "lib = fake.lib\n"
        "src = (ctypes.c_int * 4)(1, 2, 3, 4)\n"
        "dst = (ctypes.c_int * 4)()\n"
        "event = ctypes.c_void_p()\n"
        "assert lib.cudaEventCreateWithFlags(ctypes.byref(event), 2) == 0\n"
        "assert lib.cudaMemcpyAsync(dst, src, 16, 2, ctypes.c_void_p(7)) == 0\n"
        "assert lib.cudaEventRecord(event, ctypes.c_void_p(7)) == 0\n"
        "assert list(dst) == [0, 0, 0, 0], 'a copy ran before anyone waited'\n"
        "fake.set_stuck(True)\n"
        "assert lib.cudaEventQuery(event) == 600\n"
        "fake.set_stuck(False)\n"
        "assert lib.cudaEventQuery(event) == 0 and list(dst) == [1, 2, 3, 4]\n"
        "fake.fail('cudaMemcpyAsync', 700)\n"
        "assert lib.cudaMemcpyAsync(dst, src, 16, 2, None) == 700\n"
        "kinds = [f['kind'] for _, f in fake.calls('cudaMemcpyAsync')]\n"
        "assert kinds == [2, 2], kinds\n"
        "print('ok')\n".replace("PATH", repr(fake_cudart)),
        fake_cudart,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"
