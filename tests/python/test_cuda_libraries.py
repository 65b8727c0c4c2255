"""Where the CUDA runtime and NCCL are loaded from: chosen at run time, never at import, with an
error naming every place tried. Each case runs in a fresh interpreter, since a process loads
the runtime once."""

from __future__ import annotations

from fake_cuda import run_code

from pscore import cuda_libraries


def test_explicit_path_is_the_only_candidate(monkeypatch):
    monkeypatch.setenv("PSCORE_CUDART_LIBRARY", "/opt/my/libcudart.so.12")
    monkeypatch.setenv("PSCORE_NCCL_LIBRARY", "/opt/my/libnccl.so.2")
    assert cuda_libraries.cuda_runtime_candidates() == ["/opt/my/libcudart.so.12"]
    assert cuda_libraries.nccl_candidates() == ["/opt/my/libnccl.so.2"]


def test_default_candidates_end_with_the_system_sonames(monkeypatch):
    monkeypatch.delenv("PSCORE_CUDART_LIBRARY", raising=False)
    monkeypatch.delenv("PSCORE_NCCL_LIBRARY", raising=False)
    runtime = cuda_libraries.cuda_runtime_candidates()
    nccl = cuda_libraries.nccl_candidates()
    assert runtime[-3:] == ["libcudart.so.13", "libcudart.so.12", "libcudart.so"]
    assert nccl[-2:] == ["libnccl.so.2", "libnccl.so"]
    assert all("libcudart" in p for p in runtime) and all("libnccl" in p for p in nccl)


def test_import_loads_no_gpu_library():
    result = run_code(
        "import pscore, pscore.torch_backend\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'libcudart' not in maps and 'libnccl' not in maps, 'loaded at import'\n"
    )
    assert result.returncode == 0, result.stderr


def test_missing_runtime_names_every_candidate():
    result = run_code(
        "import pscore\n"
        "from pscore import _gpu, cuda_libraries\n"
        "cuda_libraries.register_candidates()\n"
        "try:\n"
        "    _gpu.cuda_runtime_path()\n"
        "except pscore.errors.Error as e:\n"
        "    print(e)\n"
        "else:\n"
        "    raise SystemExit('loaded a library that does not exist')\n",
        PSCORE_CUDART_LIBRARY="/no/such/libcudart.so.12",
    )
    assert result.returncode == 0, result.stderr
    assert "could not load the CUDA runtime" in result.stdout
    assert "/no/such/libcudart.so.12" in result.stdout
