"""The getting-started page's first collective (docs/index.md): every rank adds its numbers
into everyone's array, then rank 0 broadcasts it asynchronously.

    pscore-run -n 2 examples/quickstart_collective.py
"""

import numpy as np

import pscore

pscore.init_process_group()  # rank, world size and master from the launcher's environment
rank, world = pscore.get_rank(), pscore.get_world_size()

x = np.full(4, rank + 1, dtype=np.float32)
pscore.all_reduce(x)  # in place: every rank now holds 1 + 2 + ... + world
print(f"rank {rank} of {world}: {x}")

work = pscore.broadcast(x, src=0, async_op=True)  # a pscore.Work
work.wait(timeout=30)
pscore.destroy_process_group()
