"""The getting-started page's first parameter-server job (docs/index.md): two workers push
gradients to a synchronous dense table, and the servers apply SGD to their mean.

    pscore-store --port 29400 &
    export PSCORE_STORE=tcp://127.0.0.1:29400
    pserver --shard 0 --num-shards 1 --num-workers 2 &
    pscore-run -n 2 examples/quickstart_ps.py
"""

import numpy as np

import pscore
from pscore.ps import SGD

client = pscore.PSClient()  # the shards from PSCORE_STORE; worker id = the launcher's rank
me = client.worker_id
# Every worker creates the table with the same settings: the first creates it, the others join.
client.create_dense("w", (4,), optimizer=SGD(lr=0.1), consistency="sync")
for step in range(3):
    grad = np.full(4, me + 1, dtype=np.float32)  # worker 0 pushes 1s, worker 1 pushes 2s
    w = client.push_pull("w", grad)  # a round applies SGD to the mean gradient, 1.5
    print(f"worker {me}, step {step}: w = {w}")
client.worker_done()
client.close()
