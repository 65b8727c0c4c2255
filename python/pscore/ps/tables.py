"""Table descriptions: the settings a table is created with (initializer, optimizer,
consistency) turned into the C++ TableSpec, and TableInfo, a table as the servers hold it."""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import _ps
from .._enums import by_name, name_of
from .optim import SGD, Optimizer, fill_spec

__all__ = ["CONSISTENCY", "INITIALIZERS", "TableInfo", "build_spec", "table_info"]

# The C++ enums (csrc/ps/wire/table_spec.h) by the names build_spec takes.
INITIALIZERS = by_name(_ps.InitKind)
CONSISTENCY = by_name(_ps.Consistency)


@dataclasses.dataclass(frozen=True)
class TableInfo:
    """A table as the servers hold it. parts: (shard, offset, numel) slices of a dense table;
    settings: every setting it was created with, as (name, text) pairs (``dict(settings)``:
    kind, shape or dim, initializer, seed, optimizer and its hyper-parameters, clipping,
    consistency, staleness, backup_workers, capacity, max_rows_per_shard)."""

    name: str
    id: int
    sparse: bool
    shape: tuple
    consistency: str
    parts: tuple
    settings: tuple = ()

    @property
    def dim(self) -> int:
        return self.shape[-1] if self.sparse else 0

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape)) if not self.sparse else 0


def table_info(layout) -> TableInfo:
    spec = layout.spec
    return TableInfo(
        spec.name,
        layout.id,
        spec.sparse,
        tuple(spec.shape),
        name_of(spec.consistency),
        tuple(layout.parts),
        tuple(spec.settings()),
    )


def build_spec(
    name: str,
    sparse: bool,
    shape: tuple,
    *,
    initializer: str = "zeros",
    mean: float = 0.0,
    std: float = 1.0,
    low: float = 0.0,
    high: float = 1.0,
    value: float = 0.0,
    seed: int = 0,
    optimizer: Optimizer | None = None,
    consistency: str = "async",
    staleness: int = 0,
    backup_workers: int = 0,
    clip_norm: float | None = None,
    clip_value: float | None = None,
    capacity: int = 0,
    max_rows_per_shard: int = 0,
):
    """A _ps.TableSpec. initializer: "zeros", "uniform" (low, high), "normal" (mean, std) or
    "constant" (value), seeded by `seed`; optimizer: pscore.ps.SGD/Adagrad/Adam/AdamW/RMSprop
    (default SGD()); consistency: "async", "sync" (with backup_workers) or "ssp" (with
    staleness); clip_norm / clip_value: gradient clipping of every push; capacity (sparse):
    rows to make room for up front over all shards (memory allocated and faulted in at
    creation, as a preallocated tensor would be), so that creating rows costs no allocation;
    max_rows_per_shard (sparse): the most rows one shard holds (0: no limit); a pull or push
    that would create more fails with ValueError and creates nothing."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"table name must be a non-empty str, got {name!r}")
    if initializer not in INITIALIZERS:
        raise ValueError(f"initializer must be one of {sorted(INITIALIZERS)}, got {initializer!r}")
    if consistency not in CONSISTENCY:
        raise ValueError(f"consistency must be one of {sorted(CONSISTENCY)}, got {consistency!r}")
    args = {"uniform": (low, high), "normal": (mean, std), "constant": (value, 0.0)}
    spec = _ps.TableSpec()
    spec.name, spec.sparse, spec.shape = name, sparse, [int(d) for d in shape]
    spec.init_kind = INITIALIZERS[initializer]
    spec.init_a, spec.init_b = (float(v) for v in args.get(initializer, (0.0, 0.0)))
    spec.seed = int(seed) & (2**64 - 1)
    fill_spec(optimizer if optimizer is not None else SGD(), spec.optimizer, clip_norm, clip_value)
    spec.consistency = CONSISTENCY[consistency]
    spec.staleness, spec.backup_workers = int(staleness), int(backup_workers)
    spec.capacity = _sparse_row_count("capacity", capacity, sparse)
    spec.max_rows_per_shard = _sparse_row_count("max_rows_per_shard", max_rows_per_shard, sparse)
    return spec


def _sparse_row_count(what: str, value, sparse: bool) -> int:
    """A row count of a sparse table's spec (0: unset), checked before anything is sent."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be an int >= 0, got {value!r}")
    if value and not sparse:
        raise ValueError(f"{what} applies to sparse tables")
    return value
