"""pscore: distributed-training communication - collectives over TCP and shared memory,
rendezvous stores, a parameter server and Hogwild tables."""

# The C++ core first: it makes its parts the modules pscore._types, _C, _gpu, _store, _ps and
# _hogwild.
from . import _ext  # noqa: F401 - loading it registers the parts

# isort: split
from . import hogwild
from .cluster import ClusterEnv, ClusterSpec, discover
from .collectives import (
    NON_GROUP_MEMBER,
    ProcessGroup,
    ReduceOp,
    Work,
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    all_to_all,
    all_to_all_single,
    barrier,
    broadcast,
    destroy_process_group,
    gather,
    get_backend,
    get_rank,
    get_world_size,
    init_process_group,
    irecv,
    is_initialized,
    isend,
    new_group,
    recv,
    reduce,
    reduce_scatter,
    reduce_scatter_tensor,
    scatter,
    send,
)
from .errors import Error, NetworkError, StoreError, TimeoutError
from .hogwild import SharedTable
from .ps import PSClient
from .ps.server import PServer
from .store import FileStore, HashStore, PrefixStore, RedisStore, Store, TCPStore, create_store

__version__ = "0.1.0"


def __getattr__(name: str):
    # pscore.Trainer imports torch, so it loads on first use: `import pscore` stays torch-free.
    if name == "Trainer":
        from .train import Trainer

        return Trainer
    raise AttributeError(f"module 'pscore' has no attribute {name!r}")


__all__ = [
    "NON_GROUP_MEMBER",
    "ClusterEnv",
    "ClusterSpec",
    "Error",
    "FileStore",
    "HashStore",
    "NetworkError",
    "PSClient",
    "PServer",
    "PrefixStore",
    "ProcessGroup",
    "RedisStore",
    "ReduceOp",
    "SharedTable",
    "Store",
    "StoreError",
    "TCPStore",
    "TimeoutError",
    "Trainer",
    "Work",
    "all_gather",
    "all_gather_into_tensor",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "barrier",
    "broadcast",
    "create_store",
    "destroy_process_group",
    "discover",
    "gather",
    "get_backend",
    "get_rank",
    "get_world_size",
    "hogwild",
    "init_process_group",
    "irecv",
    "is_initialized",
    "isend",
    "new_group",
    "recv",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "scatter",
    "send",
]

if "torch" in __import__("sys").modules:  # register the torch.distributed backend for free
    from . import torch_backend  # noqa: F401 - importing it registers the backend
