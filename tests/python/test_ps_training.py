"""A real training run through the parameter server: softmax regression on scikit-learn's
digits by two worker processes (sync, each on half of every batch) reaches the accuracy of the
same training done locally."""

from __future__ import annotations

import numpy as np
from test_ps_support import addresses, digits_split, run_workers, start_cluster, stop_cluster

from pscore.ps import SGD, PSClient

EPOCHS, BATCH, LR = 15, 64, 0.5


def gradient(w, b, x, y):
    """Softmax cross-entropy gradients (mean over the batch) of logits x @ w + b."""
    z = x @ w + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z)
    p /= p.sum(axis=1, keepdims=True)
    p[np.arange(len(y)), y] -= 1.0
    p /= len(y)
    return x.T @ p, p.sum(axis=0)


def batches(n, epoch):
    order = np.random.default_rng(epoch).permutation(n)
    return [order[i : i + BATCH] for i in range(0, n - BATCH + 1, BATCH)]


def accuracy(w, b, x, y):
    return float(((x @ w + b).argmax(axis=1) == y).mean())


def local_training():
    x, x_test, y, y_test = digits_split()
    w, b = np.zeros((64, 10), np.float32), np.zeros(10, np.float32)
    for epoch in range(EPOCHS):
        for idx in batches(len(y), epoch):
            gw, gb = gradient(w, b, x[idx], y[idx])
            w -= LR * gw
            b -= LR * gb
    return accuracy(w, b, x_test, y_test)


def ps_worker(rank, addrs):
    x, _, y, _ = digits_split()
    c = PSClient(addrs, worker_id=rank)
    for name, shape in (("w", (64, 10)), ("b", (10,))):
        c.create_dense(name, shape, consistency="sync", optimizer=SGD(lr=LR))
    w, b = c.pull("w"), c.pull("b")
    for epoch in range(EPOCHS):
        for idx in batches(len(y), epoch):
            mine = idx[rank::2]  # each worker takes half of the batch
            gw, gb = gradient(w, b, x[mine], y[mine])
            # the servers average the two halves: the batch's gradient, applied once
            c.push_many({"w": gw, "b": gb})
            got = c.pull_many({"w": w, "b": b})
            w, b = got["w"], got["b"]
    c.worker_done()
    return rank


def test_digits_softmax_regression_matches_local_training():
    servers = start_cluster(2, num_workers=2, min_part_bytes=256)
    try:
        run_workers(ps_worker, 2, (addresses(servers),), timeout=120)
        c = PSClient(addresses(servers), worker_id=0)
        _, x_test, _, y_test = digits_split()
        ps_acc = accuracy(c.pull("w"), c.pull("b"), x_test, y_test)
        local_acc = local_training()
        assert local_acc > 0.9
        assert ps_acc >= local_acc - 0.01, (ps_acc, local_acc)
    finally:
        stop_cluster(servers)
