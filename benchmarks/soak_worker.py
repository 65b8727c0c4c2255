"""One soak worker (benchmarks/soak.sh): pushes integer deltas to the soak's tables until the
stop file appears, and logs each push before sending it (``P step delta``) and once it is
acknowledged (``A step``), so the driver can compare the tables with the acknowledged pushes.

Each step pushes ``delta`` to every element of the dense table ``total`` (split over both
shards) and to 4 rows of the sparse table ``rows`` that only this step touches: those rows tell,
push by push, whether an update was lost (0) or applied twice (2 x delta).
"""

from __future__ import annotations

import argparse
import os
import random
import time

import numpy as np

from pscore.ps import SGD, PSClient

__all__ = ["DENSE_NUMEL", "ROWS_PER_STEP", "ROW_DIM", "create_tables", "main", "row_ids"]

DENSE_NUMEL = 32768  # 128 KB: large enough to be split over 2 shards
ROW_DIM = 4
ROWS_PER_STEP = 4


def row_ids(worker: int, step: int) -> np.ndarray:
    """The sparse rows that step `step` of worker `worker` (and nothing else) updates."""
    first = (worker << 40) + step * ROWS_PER_STEP
    return np.arange(first, first + ROWS_PER_STEP, dtype=np.int64)


def create_tables(client: PSClient) -> None:
    # SGD with lr=1 on a gradient of -delta adds delta: integer values, exact in float32
    client.create_dense("total", (DENSE_NUMEL,), initializer="zeros", optimizer=SGD(lr=1.0))
    client.create_sparse("rows", ROW_DIM, initializer="zeros", optimizer=SGD(lr=1.0))


def _last_step(log_path: str) -> int:
    if not os.path.exists(log_path):
        return -1
    with open(log_path) as f:
        steps = [int(line.split()[1]) for line in f if line.startswith("P ")]
    return max(steps, default=-1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--store", required=True)
    p.add_argument("--worker", type=int, required=True)
    p.add_argument("--log", required=True)
    p.add_argument("--stop-file", required=True)
    p.add_argument("--interval", type=float, default=0.05)
    args = p.parse_args()
    client = PSClient(store=args.store, worker_id=args.worker, timeout=30, retry_timeout=120)
    create_tables(client)
    step = _last_step(args.log) + 1
    rng = random.Random(os.getpid())
    with open(args.log, "a", buffering=1) as log:
        while not os.path.exists(args.stop_file):
            delta = rng.randint(1, 7)
            log.write(f"P {step} {delta}\n")
            grad = np.full(DENSE_NUMEL, -delta, np.float32)
            rows = np.full((ROWS_PER_STEP, ROW_DIM), -delta, np.float32)
            client.push("total", grad)
            client.push_sparse("rows", row_ids(args.worker, step), rows)
            log.write(f"A {step}\n")
            step += 1
            time.sleep(args.interval)
    client.close()


if __name__ == "__main__":
    main()
