"""Embedding tables kept on the parameter servers (the hybrid strategy's sparse half).

A torch.nn.Embedding or EmbeddingBag becomes a ServerEmbedding: its weight is freed and lives
in a sparse table on the servers. Each forward de-duplicates the batch's ids, pulls just those
rows into a small leaf tensor and looks up in it with torch's own functional op, so autograd
gives the rows' gradients; push_async() sends them, and the servers' optimizer applies them.
The worker never holds more than the rows of one batch."""

from __future__ import annotations

from typing import Any

from .timeline import COMMUNICATION, Timeline

__all__ = ["ServerEmbedding", "find_embeddings"]


def _kinds() -> tuple:
    import torch

    return (torch.nn.Embedding, torch.nn.EmbeddingBag)


def _unsupported(name: str, module: Any, tied: list) -> str | None:
    """Why `module` cannot move to the servers, or None. tied: the other modules' parameter
    names its weight also goes by."""
    import torch

    kind = type(module).__name__
    if module.max_norm is not None:
        return (
            f"{kind} {name!r} has max_norm={module.max_norm}: renormalising rows in place is not "
            "supported on the parameter servers (drop max_norm, or keep the table local with "
            "strategy_args={'min_rows': ...} above its size)"
        )
    weight = module.weight
    if weight.dtype != torch.float32:
        return f"{kind} {name!r} has {weight.dtype} weights; the parameter servers hold float32"
    if weight.device.type not in ("cpu", "meta"):
        return f"{kind} {name!r} is on {weight.device}; the parameter servers take CPU tensors"
    if tied:
        return (
            f"{kind} {name!r} shares its weight with {', '.join(tied)} (tied weights); a "
            "table on the parameter servers cannot also be a dense parameter"
        )
    return None


def find_embeddings(model: Any, min_rows: int = 0) -> list[tuple[str, Any]]:
    """(name, module) of each trainable Embedding / EmbeddingBag of `model` with at least
    `min_rows` rows; ValueError naming the module when one of them cannot go to the servers.
    Frozen tables (requires_grad False) stay on the worker: there is nothing to push."""
    names: dict[int, list[str]] = {}  # a parameter's names, one per module holding it
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(n)
    found = []
    for name, module in model.named_modules():
        if not isinstance(module, _kinds()):
            continue
        if module.weight is None:
            raise ValueError(
                f"{type(module).__name__} {name!r} has no weight: it is already on the "
                "parameter servers (one model per hybrid Trainer)"
            )
        if not module.weight.requires_grad or module.num_embeddings < min_rows:
            continue
        tied = [  # the same module reached by two paths is one table, not a tie
            n
            for n in names.get(id(module.weight), ())
            if model.get_submodule(n.rpartition(".")[0]) is not module
        ]
        why = _unsupported(name, module, tied)
        if why:
            raise ValueError(f"strategy 'hybrid': {why}")
        found.append((name, module))
    return found


class ServerEmbedding:
    """`module`'s table on the servers as sparse table `table` (created, or joined, here).
    settings: create_sparse's (initializer, seed, optimizer, consistency...)."""

    def __init__(
        self, client: Any, table: str, name: str, module: Any, timeline: Timeline, **settings: Any
    ):
        import torch

        self.client, self.table, self.name, self.module = client, table, name, module
        self.timeline = timeline
        self._pull_label, self._push_label = f"pull rows {table}", f"push rows {table}"
        self._wait_label, self._lane = f"wait sync round {table}", timeline.lane(self._push_label)
        self._push_started: tuple[int, int] = (0, 0)  # (ns, bytes) of the push in flight
        self.rows, self.dim = module.num_embeddings, module.embedding_dim
        self.padding_idx = module.padding_idx
        self.bag = isinstance(module, torch.nn.EmbeddingBag)
        self._pending: list[tuple[Any, Any]] = []  # (ids, leaf rows) of forwards since a push
        client.create_sparse(table, self.dim, **settings)
        module.register_parameter("weight", None)  # frees the local table
        module.forward = self.forward_bag if self.bag else self.forward

    def _lookup(self, ids: Any) -> tuple[Any, Any, int | None]:
        """(local ids into rows, rows, the padding row's local index or None): the rows of
        `ids`' distinct values pulled from the servers, the padding row zero as torch keeps it."""
        import torch

        unique, local = torch.unique(ids, sorted=True, return_inverse=True)
        n = unique.numel()
        if n and (int(unique[0]) < 0 or int(unique[-1]) >= self.rows):
            bad = int(unique[0]) if int(unique[0]) < 0 else int(unique[-1])
            raise IndexError(
                f"{type(self.module).__name__} {self.name!r}: id {bad} is out of range for a "
                f"table of {self.rows} rows"
            )
        rows = torch.empty((n, self.dim), dtype=torch.float32)
        if n:
            with self.timeline.span(
                self._pull_label, COMMUNICATION, nbytes=unique.nbytes + rows.nbytes
            ):
                self.client.pull_sparse(self.table, unique, rows)
        pad = None
        if self.padding_idx is not None:
            hit = (unique == self.padding_idx).nonzero()
            if hit.numel():
                pad = int(hit[0, 0])
                rows[pad] = 0.0
        if torch.is_grad_enabled():
            rows.requires_grad_(True)
            self._pending.append((unique, rows))
        return local, rows, pad

    def forward(self, input: Any) -> Any:
        import torch.nn.functional as F

        local, rows, pad = self._lookup(input)
        m = self.module
        return F.embedding(
            local,
            rows,
            padding_idx=pad,
            norm_type=m.norm_type,
            scale_grad_by_freq=m.scale_grad_by_freq,
        )

    def forward_bag(self, input: Any, offsets: Any = None, per_sample_weights: Any = None) -> Any:
        import torch.nn.functional as F

        local, rows, pad = self._lookup(input)
        m = self.module
        return F.embedding_bag(
            local,
            rows,
            offsets,
            norm_type=m.norm_type,
            scale_grad_by_freq=m.scale_grad_by_freq,
            mode=m.mode,
            per_sample_weights=per_sample_weights,
            include_last_offset=m.include_last_offset,
            padding_idx=pad,
        )

    def gradient(self) -> tuple[Any, Any]:
        """(ids, row gradients) of every forward since the last call (duplicates across
        forwards are summed by the servers), the padding row left out; empty when none."""
        import torch

        done = [(ids, rows.grad) for ids, rows in self._pending if rows.grad is not None]
        self._pending.clear()
        if not done:
            return torch.empty(0, dtype=torch.int64), torch.empty((0, self.dim))
        ids = torch.cat([i for i, _ in done]) if len(done) > 1 else done[0][0]
        grads = torch.cat([g for _, g in done]) if len(done) > 1 else done[0][1]
        if self.padding_idx is not None:
            keep = ids != self.padding_idx
            ids, grads = ids[keep], grads[keep]
        return ids.contiguous(), grads.contiguous()

    def restore(self, chunk_rows: int = 1 << 16) -> None:
        """Pulls every row back into a local weight (the padding row zero) and gives the module
        its own forward again: after training, the model stands alone."""
        import torch

        weight = torch.empty((self.rows, self.dim), dtype=torch.float32)
        for start in range(0, self.rows, chunk_rows):
            stop = min(start + chunk_rows, self.rows)
            self.client.pull_sparse(self.table, torch.arange(start, stop), weight[start:stop])
        if self.padding_idx is not None:
            weight[self.padding_idx] = 0.0
        self.module.weight = torch.nn.Parameter(weight)
        del self.module.forward  # the instance attribute set above; the class's forward again

    def push_async(self) -> Any:
        """Pushes gradient() to the table (an empty push when this worker has none, which a
        sync table's round still counts); returns the PSWork."""
        ids, grads = self.gradient()
        self._push_started = (self.timeline.now(), ids.nbytes + grads.nbytes)
        return self.client.push_sparse_async(self.table, ids, grads)

    def wait_push(self, work: Any) -> None:
        """Waits for push_async's `work` (a sync table answers once the round closed)."""
        started, nbytes = self._push_started
        self.timeline.wait(work, self._push_label, self._wait_label, started, self._lane, nbytes)
