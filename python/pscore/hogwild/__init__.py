"""Hogwild: shared-memory parameter tables updated without locks by many threads and processes
(HOGWILD!, Niu et al. 2011), a helper that starts the worker processes, and Distributed Hogwild
(SINGA): one Hogwild group per machine with its tables averaged across machines periodically."""

from .distributed import DistributedHogwild, average_tables
from .table import SharedTable, close_all
from .train import WorkerError, train

__all__ = [
    "DistributedHogwild",
    "SharedTable",
    "WorkerError",
    "average_tables",
    "close_all",
    "train",
]
