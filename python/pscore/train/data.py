"""Each worker's shard of the training data, in batches: torch's DistributedSampler semantics
(one permutation per epoch from seed + epoch, the same on every worker; worker r of W takes
positions r, r + W, ...; no padding, so shards differ by at most one sample and the batches per
epoch may differ by one), batches of consecutive shard positions, the last one partial."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .checks import check_int

__all__ = ["ShardedData", "as_dataset"]


class _Tensors:
    """A tuple of equal-length tensors/arrays as a dataset indexed by a whole batch at once."""

    def __init__(self, arrays: Sequence[Any]):
        import torch

        self.tensors = tuple(
            a if isinstance(a, torch.Tensor) else torch.as_tensor(a) for a in arrays
        )
        lengths = {len(t) for t in self.tensors}
        if len(lengths) != 1:
            raise ValueError(
                f"the data's arrays differ in length: {[len(t) for t in self.tensors]}"
            )

    def __len__(self) -> int:
        return len(self.tensors[0])

    def batch(self, indices: Any) -> tuple:
        return tuple(t[indices] for t in self.tensors)


class _Dataset:
    """A map-style dataset (len() and [i]) whose items are collated with torch's default_collate."""

    def __init__(self, dataset: Any):
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def batch(self, indices: Any) -> tuple:
        from torch.utils.data import default_collate

        out = default_collate([self.dataset[int(i)] for i in indices])
        return tuple(out) if isinstance(out, (list, tuple)) else (out,)


def as_dataset(data: Any) -> _Tensors | _Dataset:
    """The Trainer's data argument: a tuple/list of tensors or arrays (inputs..., target), or a
    map-style torch Dataset."""
    if isinstance(data, (tuple, list)):
        if len(data) < 2:
            raise ValueError(f"the data tuple has {len(data)} array(s); pass (inputs..., targets)")
        return _Tensors(data)
    if hasattr(data, "__getitem__") and hasattr(data, "__len__"):
        return _Dataset(data)
    raise TypeError(
        f"data must be a tuple of tensors/arrays or a map-style Dataset, not {type(data).__name__}"
    )


class ShardedData:
    """Worker `rank` of `world`'s batches of `data` for each epoch."""

    def __init__(
        self,
        data: Any,
        rank: int,
        world: int,
        batch_size: int,
        *,
        shuffle: bool = True,
        seed: int = 0,
    ):
        check_int("batch_size", batch_size, 1)
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside [0, {world})")
        self.data = as_dataset(data)
        if len(self.data) == 0:
            raise ValueError("the training data is empty")
        self.rank, self.world, self.batch_size = rank, world, batch_size
        self.shuffle, self.seed = shuffle, seed

    def shard_size(self) -> int:
        n = len(self.data)
        return n // self.world + (1 if self.rank < n % self.world else 0)

    def num_batches(self) -> int:
        """This worker's batches per epoch (the same every epoch)."""
        return math.ceil(self.shard_size() / self.batch_size)

    def max_batches(self) -> int:
        """The most batches any worker has per epoch (worker 0's: its shard is the largest)."""
        n = len(self.data)
        return math.ceil((n // self.world + (1 if n % self.world else 0)) / self.batch_size)

    def indices(self, epoch: int) -> Any:
        import torch

        n = len(self.data)
        if self.shuffle:
            g = torch.Generator().manual_seed(self.seed + epoch)
            order = torch.randperm(n, generator=g)
        else:
            order = torch.arange(n)
        return order[self.rank :: self.world]

    def batches(self, epoch: int, start: int = 0):
        """Yields (index in epoch, batch) from batch `start` on (a resumed epoch skips the
        batches it already took)."""
        shard = self.indices(epoch)
        for i in range(start, self.num_batches()):
            yield i, self.data.batch(shard[i * self.batch_size : (i + 1) * self.batch_size])
