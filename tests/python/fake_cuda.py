"""pscore's CUDA paths on a host without a GPU: the fake CUDA runtime (tests/fakes/fake_cudart.c)
compiled into a tmp dir, "CUDA" buffers over host memory, and the fake's test switches.

A process loads the CUDA runtime once, so code that meets the fake runs in a subprocess
(`run_python`) or in forked ranks (`use_fake_runtime` first thing in each), never in the pytest
process itself."""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import pscore

__all__ = [
    "COPY_CALLS",
    "HELPERS_DIR",
    "PACKAGE_ROOT",
    "FakeCudaBuffer",
    "FakeNccl",
    "FakeRuntime",
    "caller_stream",
    "compile_fake",
    "compile_library",
    "fake_cudart",
    "read_log",
    "run_code",
    "run_python",
    "use_fake_runtime",
]

# The runtime calls that queue a copy: flat, or in rows (small copies to the device).
COPY_CALLS = ("cudaMemcpyAsync", "cudaMemcpy2DAsync")

FAKES_DIR = Path(__file__).resolve().parents[1] / "fakes"
HELPERS_DIR = str(Path(__file__).resolve().parent)
PACKAGE_ROOT = os.path.dirname(os.path.dirname(pscore.__file__))
DLPACK_CUDA = 2


def compile_library(source: str | os.PathLike, out_dir: str | os.PathLike) -> str:
    """The C file `source` built with `cc -shared -fPIC` into out_dir/lib<stem>.so; its path."""
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip(f"no C compiler (cc) to build {source}")
    out = os.path.join(out_dir, "lib" + Path(source).stem + ".so")
    cmd = [cc, "-shared", "-fPIC", "-O1", "-o", out, str(source), "-lpthread"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{result.stderr}")
    return out


def compile_fake(source: str, out_dir: str | os.PathLike) -> str:
    """tests/fakes/<source> built by compile_library."""
    return compile_library(FAKES_DIR / source, out_dir)


@pytest.fixture(scope="session")
def fake_cudart(tmp_path_factory) -> str:
    """The path of the fake CUDA runtime, built once per session."""
    return compile_fake("fake_cudart.c", tmp_path_factory.mktemp("fake_cudart"))


def run_code(code: str, timeout: float = 120, **env) -> subprocess.CompletedProcess:
    """Runs `code` in a fresh interpreter that can import pscore and this helper, with `env`
    added to this process's environment."""
    path = os.pathsep.join([PACKAGE_ROOT, HELPERS_DIR])
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": path, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def run_python(
    code: str, fake_path: str, timeout: float = 120, **env
) -> subprocess.CompletedProcess:
    """run_code with the fake runtime as the CUDA runtime (PSCORE_CUDART_LIBRARY)."""
    return run_code(code, timeout, PSCORE_CUDART_LIBRARY=fake_path, **env)


def use_fake_runtime(fake_path: str) -> FakeRuntime:
    """Points this process's core at the fake (before its first CUDA buffer) and returns the
    fake's switches. For forked ranks, whose parent may have registered other candidates."""
    from pscore import _config, _gpu, cuda_libraries

    cuda_libraries.register_candidates()
    _gpu.set_cuda_runtime_candidates([fake_path])
    _gpu.set_staging_chunk_bytes(_config.STAGING_CHUNK_BYTES.get())
    return FakeRuntime(fake_path)


class FakeRuntime:
    """The fake's test switches, through the handle the core loaded (dlopen of the same path
    returns the same library)."""

    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.lib.fake_cudart_read_log.restype = ctypes.c_size_t
        self.lib.fake_cudart_read_log.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self.lib.fake_cudart_fail.argtypes = [ctypes.c_char_p, ctypes.c_int]
        self.lib.fake_cudart_set_stuck.argtypes = [ctypes.c_int]

    def log(self) -> list[str]:
        """Every call since the last reset, one line each."""
        return read_log(self.lib.fake_cudart_read_log)

    def copies(self) -> list[tuple[str, dict[str, int]]]:
        """calls() of the copies queued, flat (cudaMemcpyAsync) or in rows (cudaMemcpy2DAsync:
        small ones to the device), in order."""
        return [(name, c) for name, c in self.calls() if name in COPY_CALLS]

    def calls(self, name: str | None = None) -> list[tuple[str, dict[str, int]]]:
        """The log parsed: (entry point, {field: integer}), only `name`'s when given."""
        parsed = []
        for line in self.log():
            fn, *fields = line.split()
            values = dict(f.split("=", 1) for f in fields if "=" in f)
            if name is None or fn == name:
                parsed.append((fn, {k: int(v) for k, v in values.items()}))
        return parsed

    def synchronize(self) -> None:
        """Runs every copy queued so far (the caller synchronizing its stream)."""
        assert self.lib.cudaStreamSynchronize(None) == 0

    def reset(self) -> None:
        self.lib.fake_cudart_reset()

    def set_stuck(self, stuck: bool) -> None:
        self.lib.fake_cudart_set_stuck(int(stuck))

    def fail(self, name: str | None, status: int = 700) -> None:
        """Entry point `name` returns `status` from now on (None: nothing fails)."""
        self.lib.fake_cudart_fail(name.encode() if name else None, status)


class FakeNccl:
    """The fake NCCL's test switches (tests/fakes/fake_nccl.c), through the handle the core
    loaded."""

    def __init__(self, path: str):
        self.lib = ctypes.CDLL(path)
        self.lib.fake_nccl_read_log.restype = ctypes.c_size_t
        self.lib.fake_nccl_read_log.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        self.lib.fake_nccl_set_async_error.argtypes = [ctypes.c_int]

    def log(self) -> list[str]:
        """Every call since the last reset, one line each."""
        return read_log(self.lib.fake_nccl_read_log)

    def set_async_error(self, code: int) -> None:
        """ncclCommGetAsyncError reports `code` from now on."""
        self.lib.fake_nccl_set_async_error(code)


def read_log(read_function) -> list[str]:
    """A fake's call log, through its read_log(out, capacity) export (tests/fakes/fake_log.h)."""
    size = read_function(None, 0)
    out = ctypes.create_string_buffer(size + 1)
    read_function(out, size + 1)
    return out.value.decode().splitlines()


class FakeCudaBuffer:
    """A numpy array presented through DLPack as memory of CUDA device `device`: pscore takes it
    for a CUDA buffer, and the fake runtime copies its "device" bytes with memcpy."""

    def __init__(self, array: np.ndarray, device: int = 0):
        self.array = np.ascontiguousarray(array)
        self.device = device

    def __dlpack_device__(self) -> tuple[int, int]:
        return (DLPACK_CUDA, self.device)

    def __dlpack__(self, stream=None, max_version=None, **_):
        return self.array.__dlpack__()  # describes host memory; pscore trusts the device above


@contextlib.contextmanager
def caller_stream(stream: int):
    """Makes pscore see `stream` as the caller's current CUDA stream for FakeCudaBuffers, as it
    sees torch.cuda.current_stream() for torch tensors (the host has no CUDA torch)."""
    from pscore import buffer

    fake_torch = types.SimpleNamespace(
        Tensor=type("NoTensor", (), {}),
        cuda=types.SimpleNamespace(
            is_initialized=lambda: True,
            current_stream=lambda _index: types.SimpleNamespace(cuda_stream=stream),
        ),
    )
    saved = buffer._torch
    buffer._torch = lambda: fake_torch
    try:
        yield
    finally:
        buffer._torch = saved
