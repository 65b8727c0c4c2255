"""The Trainer's parameter servers: workers connect to every shard; ps tasks serve theirs."""

from __future__ import annotations

from typing import Any

from ..ps import PSClient

__all__ = ["connect"]


def connect(run: Any, timeout: float = 60.0) -> Any:
    """A PSClient on every shard of the job, found through the environment (PSCORE_STORE, else
    TF_CONFIG's ps tasks); connecting retries until `timeout`, so workers may start before the
    servers."""
    return PSClient(worker_id=run.rank, connect_timeout=timeout)
