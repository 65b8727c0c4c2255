"""Rendezvous stores (torch.distributed.Store semantics) and ``create_store(init_method, ...)``.

``TCPStore`` and ``HashStore`` are the C++ stores of ``pscore._store`` (store/native.py);
``FileStore`` and ``RedisStore`` are Python; ``PrefixStore`` wraps any of them. All share the
API of [pscore.store.base.Store][]: set, get, add, compare_set, wait, check, delete_key,
num_keys, timeout / set_timeout. Blocking calls release the GIL and raise
[pscore.errors.TimeoutError][] naming the keys still missing. ``pscore-store``
(store/server.py) serves a TCPStore from the shell.
"""

from .base import Store
from .create import create_store, env_store
from .file_store import FileStore
from .native import HashStore, TCPStore
from .prefix import PrefixStore
from .redis_store import RedisStore

__all__ = [
    "FileStore",
    "HashStore",
    "PrefixStore",
    "RedisStore",
    "Store",
    "TCPStore",
    "create_store",
    "env_store",
]
