"""pscore: distributed-training communication - collectives over TCP and shared memory,
rendezvous stores, a parameter server and Hogwild tables."""

# The C++ core first: it makes its parts the modules pscore._C, _store, _ps and _hogwild.
from . import _ext

# isort: split
from . import hogwild
from .cluster import ClusterEnv, discover
from .cluster_spec import ClusterSpec
from .collectives import (
    ReduceOp,
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    all_to_all,
    all_to_all_single,
    barrier,
    broadcast,
    gather,
    get_backend,
    get_rank,
    get_world_size,
    irecv,
    isend,
    recv,
    reduce,
    reduce_scatter,
    reduce_scatter_tensor,
    scatter,
    send,
)
from .errors import Error, NetworkError, StoreError, TimeoutError
from .group import (
    NON_GROUP_MEMBER,
    ProcessGroup,
    destroy_process_group,
    init_process_group,
    is_initialized,
    new_group,
)
from .hogwild import SharedTable
from .ps import PSClient
from .server import PServer
from .store import FileStore, HashStore, PrefixStore, RedisStore, Store, TCPStore, create_store
from .work import Work

__version__ = "0.1.0"

if "torch" in __import__("sys").modules:  # register the torch.distributed backend for free
    from . import torch_backend
