#!/usr/bin/env bash
# Soak (not in CI): 2 `pserver --recover` shards and 4 workers pushing integer deltas; a random
# SIGKILL of a server or worker every ~20 s for SOAK_SECONDS (default 600); at the end the
# tables must equal the acknowledged updates and nothing may have hung (benchmarks/soak_driver.py).
#   SOAK_SECONDS=60 bash benchmarks/soak.sh            # short run
#   SOAK_DIR=/tmp/soak SOAK_SEED=3 bash benchmarks/soak.sh
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
workdir="${SOAK_DIR:-$(mktemp -d /tmp/pscore-soak.XXXXXX)}"
echo "soak: ${SOAK_SECONDS:-600} s, working in $workdir" >&2
exec python "$here/soak_driver.py" --workdir "$workdir" --seconds "${SOAK_SECONDS:-600}" \
  --kill-every "${SOAK_KILL_EVERY:-20}" --seed "${SOAK_SEED:-0}"
