"""Hogwild: shared-memory parameter tables updated without locks by many threads and processes
(HOGWILD!, Niu et al. 2011), a torch module's parameters held in them (SharedParameters), a
helper that starts the worker processes, and Distributed Hogwild
(SINGA): one Hogwild group per machine with its tables averaged across machines periodically."""

from .. import _config
from .._hogwild import kernel_isa, kernel_isas, set_kernel_isa
from .distributed import DistributedHogwild, average_tables
from .module import HogwildOptimizer, SharedParameters
from .table import SharedTable, close_all
from .train import WorkerError, train


def _kernel_isa_from_env() -> None:
    """PSCORE_HOGWILD_ISA=baseline|avx2 picks the kernels (to compare, or to rule one out)."""
    isa = _config.HOGWILD_ISA.get()
    if isa is None:
        return
    if isa not in kernel_isas():
        raise ValueError(
            f"{_config.HOGWILD_ISA.name}={isa}: this CPU or build has no {isa} kernels"
        )
    set_kernel_isa(isa)


_kernel_isa_from_env()

# kernel_isa(): the instruction set the update kernels run with ("avx2" or "baseline");
# kernel_isas(): those this CPU supports; set_kernel_isa(name) picks one (tests, benchmarks).
__all__ = [
    "DistributedHogwild",
    "HogwildOptimizer",
    "SharedParameters",
    "SharedTable",
    "WorkerError",
    "average_tables",
    "close_all",
    "kernel_isa",
    "kernel_isas",
    "set_kernel_isa",
    "train",
]
