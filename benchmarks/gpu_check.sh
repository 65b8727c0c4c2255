#!/usr/bin/env bash
# What to run on a machine with a GPU, in one command: every gpu-marked test and every GPU
# benchmark, each step's log and JSON written to $OUT (or benchmarks/results), and a summary in
# $OUT/gpu_check.json. A failing step fails the script; the steps after it still run. The CUDA
# kernels come from a build in place when nvcc is on PATH; otherwise from the extension modules
# already in python/pscore (built with nvcc elsewhere and copied over). The tests need only
# pytest itself (no plugin: each step is bounded by `timeout` instead of pytest-timeout).
# Usage: benchmarks/gpu_check.sh   (from anywhere; needs torch with CUDA)
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-benchmarks/results}
mkdir -p "$out"
export PYTHONPATH=$PWD/python:$PWD/tests/python${PYTHONPATH:+:$PYTHONPATH}
steps=()
failed=()

# step NAME SECONDS CMD...: runs CMD (at most SECONDS), its output also in $out/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  echo "== $name: $*"
  steps+=("$name")
  if timeout "$limit" "$@" 2>&1 | tee "$out/$name.log"; then
    echo "== $name: ok"
  else
    echo "== $name: FAILED (exit ${PIPESTATUS[0]}; log $out/$name.log)"
    failed+=("$name")
  fi
}

if command -v nvcc >/dev/null; then
  step build 1800 bash -c 'cmake -S . -B build/gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPSCORE_DEV_OUTPUT_DIR="$PWD/python/pscore" \
    -Dpybind11_DIR="$(python3 -m pybind11 --cmakedir)" >/dev/null &&
    cmake --build build/gpu -j"$(nproc)"'
fi
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
step device 120 python3 - <<'PY'
import torch
from pscore.hogwild import cuda
print(f"pscore CUDA kernels built: {cuda.is_built()}; usable: {cuda.is_available()}; "
      f"torch {torch.__version__} sees {torch.cuda.device_count()} GPU(s)")
if not torch.cuda.is_available():
    raise SystemExit("torch sees no GPU: nothing below can run")
PY

if python3 -c "import pytest" 2>/dev/null; then
  step gpu_tests 2400 python3 -m pytest -m gpu tests/python -q -p no:cacheprovider -rs \
    --junitxml="$out/gpu_tests.xml"
else
  echo "pytest is not installed here: the gpu tests did not run" >&2
  steps+=(gpu_tests)
  failed+=(gpu_tests)
fi
step hogwild_cuda 900 python3 -m pscore.bench hogwild-cuda --batch 256,4096,65536,262144,1048576 \
  --json "$out/hogwild_cuda.json"
step staging_tcp_w2 900 python3 -m pscore.bench staging --world 2 --json "$out/staging_tcp_w2.json"
step staging_tcp_w4 900 python3 -m pscore.bench staging --world 4 --json "$out/staging_tcp_w4.json"
step allreduce_cuda 1800 python3 -m pscore.bench allreduce --device cuda \
  --compare nccl-torch,gloo-torch --json "$out/allreduce_cuda.json"
step allreduce_cuda_w4 1800 python3 -m pscore.bench allreduce --device cuda --world 4 \
  --compare gloo-torch --json "$out/allreduce_cuda_w4.json"

python3 - "$out/gpu_check.json" "${steps[*]}" "${failed[*]:-}" <<'PY'
import json, sys
path, steps, failed = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
summary = {"steps": [{"name": s, "ok": s not in failed, "log": f"{s}.log"} for s in steps],
           "failed": failed}
with open(path, "w") as f:
    json.dump(summary, f, indent=2)
print(f"# wrote {path}")
PY
if ((${#failed[@]})); then
  echo "gpu_check: FAILED steps: ${failed[*]}" >&2
  exit 1
fi
echo "gpu_check: every step passed"
