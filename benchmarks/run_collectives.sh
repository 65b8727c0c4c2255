#!/usr/bin/env bash
# Runs the collective benchmarks against torch gloo, and Open MPI when mpirun and mpi4py are
# installed, and writes JSON next to this script.
# Usage: benchmarks/run_collectives.sh [world]   (needs pscore and torch installed)
set -euo pipefail
world=${1:-2}
out=$(dirname "$0")/results
mkdir -p "$out"
peers=gloo
if command -v mpirun >/dev/null && python -c "import mpi4py" 2>/dev/null; then peers=gloo,mpi; fi
python -m pscore.bench loopback --json "$out/loopback.json"
for transport in shm tcp; do
  python -m pscore.bench allreduce --world "$world" --transport "$transport" --compare "$peers" \
    --json "$out/allreduce_${transport}_w${world}.json"
done
for op in broadcast allgather reduce_scatter alltoall; do
  python -m pscore.bench "$op" --world "$world" --compare "$peers" --sizes 4K,1M,16M \
    --json "$out/${op}_w${world}.json"
done
