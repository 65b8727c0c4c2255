"""pscore.ps: a sharded parameter server with server-side optimizers.

Servers (``pscore.PServer`` in-process, or the ``pserver`` command) each hold one shard; workers
use :class:`PSClient` to create dense and sparse tables, push gradients and pull parameters.
"""

from pscore.ps.checkpoint import read_checkpoint
from pscore.ps.client import PSClient
from pscore.ps.optim import SGD, Adagrad, Adam, AdamW, Optimizer, RMSprop
from pscore.ps.tables import TableInfo
from pscore.ps.work import PSWork

__all__ = [
    "SGD",
    "Adagrad",
    "Adam",
    "AdamW",
    "Optimizer",
    "PSClient",
    "PSWork",
    "RMSprop",
    "TableInfo",
    "read_checkpoint",
]
