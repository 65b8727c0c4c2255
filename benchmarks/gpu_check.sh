#!/usr/bin/env bash
# What to run on a machine with a GPU: the gpu-marked tests and the GPU Hogwild benchmark, with
# JSON written to $OUT (or benchmarks/results). The CUDA kernels come from a build in place when
# nvcc is on PATH; otherwise from the extension modules already in python/pscore, built with
# nvcc on another machine (the dev build's PSCORE_DEV_OUTPUT_DIR) and copied over.
# Usage: benchmarks/gpu_check.sh   (from anywhere; needs torch with CUDA)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/results}
mkdir -p "$out"
if command -v nvcc >/dev/null; then
  cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPSCORE_DEV_OUTPUT_DIR="$PWD/python/pscore" \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" >/dev/null
  cmake --build build/gpu -j"$(nproc)"
fi
export PYTHONPATH=$PWD/python:$PWD/tests/python${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
python3 - <<'PY'
import torch
from pscore.hogwild import cuda
print(f"pscore CUDA kernels built: {cuda.is_built()}; usable: {cuda.is_available()}; "
      f"torch {torch.__version__} sees {torch.cuda.device_count()} GPU(s)")
if not (cuda.is_available() and torch.cuda.is_available()):
    raise SystemExit("no usable GPU path: see the line above")
PY
if python3 -c "import pytest" 2>/dev/null; then
  python3 -m pytest -m gpu tests/python -q -p no:cacheprovider -rs
else
  echo "pytest is not installed here: the gpu tests did not run" >&2
  status=1
fi
python3 -m pscore.bench hogwild-cuda --json "$out/hogwild_cuda.json"
exit "${status:-0}"
