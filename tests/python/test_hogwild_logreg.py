"""Sparse logistic regression on scikit-learn data, trained Hogwild: two processes sharing one
weight table reach the test accuracy of one process doing the same work.

Every feature is cut into quantile buckets, so a sample is a handful of active binary features
out of many and each batch updates only the table rows its samples touch: binary logistic
regression on breast-cancer (30 features), softmax regression on digits (64 pixels, 10 classes,
rows of 10 logits)."""

from __future__ import annotations

import uuid

import numpy as np
import pytest

EPOCHS = 8
BATCH = 4


def _bucketize(x, train_rows, bins):
    edges = np.quantile(x[:train_rows], np.linspace(0, 1, bins + 1)[1:-1], axis=0)
    buckets = np.stack([np.searchsorted(edges[:, f], x[:, f]) for f in range(x.shape[1])], 1)
    active = buckets + bins * np.arange(x.shape[1])
    bias = np.full((len(x), 1), bins * x.shape[1])
    return np.concatenate([active, bias], axis=1).astype(np.int64), bins * x.shape[1] + 1


def _dataset(name):
    datasets = pytest.importorskip("sklearn.datasets")
    loader = {"breast_cancer": datasets.load_breast_cancer, "digits": datasets.load_digits}[name]
    x, y = loader(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    x, y = x[order].astype(np.float64), y[order].astype(np.int64)
    split = int(0.8 * len(y))
    active, features = _bucketize(x, split, 8 if name == "breast_cancer" else 4)
    classes = 1 if name == "breast_cancer" else 10
    return active[:split], y[:split], active[split:], y[split:], features, classes


def _predict(w, rows):
    """Probabilities: sigmoid for one output column, softmax for several."""
    z = w[rows].sum(axis=1)
    if z.ndim == 1:
        return 1.0 / (1.0 + np.exp(-z))
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def _dlogits(p, y):
    if p.ndim == 1:
        return p - y
    p = p.copy()
    p[np.arange(len(y)), y] -= 1.0
    return p


def _lr_worker(rank, table, num_procs, active, y, optimizer):
    """Epochs over this worker's shard; each batch updates only the rows its samples touch."""
    w = table.numpy()
    rng = np.random.default_rng(rank)
    shard = np.arange(rank, len(y), num_procs)
    for _ in range(EPOCHS):
        rng.shuffle(shard)
        for start in range(0, len(shard), BATCH):
            idx = shard[start : start + BATCH]
            rows = active[idx]  # (b, features per sample)
            d = _dlogits(_predict(w, rows), y[idx]) / len(idx)  # (b,) or (b, classes)
            ids = rows.reshape(-1)
            grads = np.repeat(d, rows.shape[1], axis=0).astype(np.float32)
            if optimizer == "adagrad":
                table.adagrad(ids, grads, lr=0.1)
            else:
                table.sgd(ids, grads, lr=0.2)
    return len(shard)


def _accuracy(w, active, y):
    p = _predict(w, active)
    pred = (p > 0.5).astype(np.int64) if p.ndim == 1 else p.argmax(axis=1)
    return float((pred == y).mean())


@pytest.mark.parametrize(
    ("data", "optimizer"), [("breast_cancer", "sgd"), ("digits", "adagrad"), ("digits", "sgd")]
)
def test_two_hogwild_processes_reach_the_one_process_accuracy(data, optimizer):
    from pscore.hogwild import SharedTable, train

    xa, ya, xt, yt, features, classes = _dataset(data)
    shape = (features,) if classes == 1 else (features, classes)
    acc = {}
    for n in (1, 2):
        name = f"plr-{data}-{optimizer}-{n}-{uuid.uuid4().hex[:8]}"
        with SharedTable.create(name, shape, optimizer=optimizer) as t:
            seen = train(_lr_worker, num_procs=n, args=(t, n, xa, ya, optimizer), timeout=240)
            assert sum(seen) == len(ya)  # the same samples, split over the workers
            acc[n] = _accuracy(t.numpy(), xt, yt)
    assert acc[1] >= 0.9, acc
    assert acc[2] >= acc[1] - 0.03, acc
