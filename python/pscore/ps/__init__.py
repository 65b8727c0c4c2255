"""pscore.ps: a sharded parameter server with server-side optimizers.

Servers (``pscore.PServer`` in-process, or the ``pserver`` command) each hold one shard; workers
use [pscore.ps.PSClient][] to create dense and sparse tables, push gradients and pull parameters.
"""

from .checkpoint import read_checkpoint
from .client import PSClient
from .optim import SGD, Adagrad, Adam, AdamW, Optimizer, RMSprop
from .tables import TableInfo
from .work import PSWork

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
