"""Where pscore loads the CUDA runtime and NCCL from, at run time and only when a CUDA buffer
first reaches it: the path in PSCORE_CUDART_LIBRARY / PSCORE_NCCL_LIBRARY, then the libraries of
the nvidia-* wheels that torch's CUDA builds install (site-packages/nvidia/*/lib), then the
system's (by soname). pscore links against neither, so it imports where neither exists."""

from __future__ import annotations

import glob
import importlib.util
import os
import threading

from . import _config

__all__ = ["cuda_runtime_candidates", "nccl_candidates", "register_candidates"]

_CUDART_SONAMES = ("libcudart.so.13", "libcudart.so.12", "libcudart.so")
_NCCL_SONAMES = ("libnccl.so.2", "libnccl.so")
_registered = threading.Event()
_registering = threading.Lock()


def _wheel_libraries(pattern: str) -> list[str]:
    """Files matching `pattern` in the lib folders of the installed nvidia-* wheels."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    found: list[str] = []
    for root in spec.submodule_search_locations:
        found.extend(sorted(glob.glob(os.path.join(root, "*", "lib", pattern)), reverse=True))
    return found


def _candidates(explicit: str | None, pattern: str, sonames: tuple[str, ...]) -> list[str]:
    if explicit:  # the user's choice alone: a wrong path must fail, not fall back silently
        return [explicit]
    return [*_wheel_libraries(pattern), *sonames]


def cuda_runtime_candidates() -> list[str]:
    return _candidates(_config.CUDART_LIBRARY.get(), "libcudart.so.*", _CUDART_SONAMES)


def nccl_candidates() -> list[str]:
    return _candidates(_config.NCCL_LIBRARY.get(), "libnccl.so.*", _NCCL_SONAMES)


def register_candidates() -> None:
    """Hands the candidate lists (and the staging chunk size) to the C++ core, once per
    process; loads nothing."""
    if _registered.is_set():
        return
    with _registering:
        if _registered.is_set():
            return
        from . import _gpu

        _gpu.set_cuda_runtime_candidates(cuda_runtime_candidates())
        variable = _config.STAGING_CHUNK_BYTES
        chunk = variable.get()
        if chunk < 1:
            raise ValueError(f"{variable.name}={chunk}: a chunk holds at least 1 byte")
        _gpu.set_staging_chunk_bytes(chunk)
        if hasattr(_gpu, "set_nccl_candidates"):
            _gpu.set_nccl_candidates(nccl_candidates())
        _registered.set()
