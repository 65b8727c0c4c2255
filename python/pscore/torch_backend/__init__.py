"""pscore as a torch.distributed backend: `import pscore.torch_backend` (or `import pscore` after
torch) registers "pscore", and unmodified code - DDP included - runs on pscore's transports:

    dist.init_process_group("pscore", ...)
    model = torch.nn.parallel.DistributedDataParallel(model)

backend.py holds the ProcessGroup and its Work, ops.py its operations, tensors.py the tensor
checks and staging, sparse.py the sparse allreduce, barrier.py monitored_barrier.
"""

from .backend import BACKEND_NAME, PscoreProcessGroup, register

register()

__all__ = ["BACKEND_NAME", "PscoreProcessGroup", "register"]
