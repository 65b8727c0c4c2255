"""Writes tests/data/ps_checkpoint_v1: a small parameter-server checkpoint (two shards, dense and
sparse tables, optimizers with state, every consistency mode) and, in expected.npz, what a
server that loads it must serve: the values, the rows a new id gets from the seeded
initializer, and the values after one more push of known gradients (which needs the optimizer
state and step counts back exactly).

ps_checkpoint_v1 was written by this script at commit d0a3da7, whose checkpoints embed the
wire encoding of table layouts (format "pscore.ps.shard/1"). Do not regenerate it: it is there
to prove that such old files still load. Run as
`python tests/data/make_ps_checkpoint.py OUT_DIR` to write a checkpoint in today's format."""

from __future__ import annotations

import json
import sys

import numpy as np

from pscore.ps import SGD, Adagrad, Adam, PSClient, RMSprop
from pscore.ps.server import PServer

DENSE = ("dense_adam", "dense_sgd")
SPARSE_IDS = {"emb_adagrad": np.array([3, -7, 2**40]), "emb_rms": np.array([1, 2, 5, 11])}
NEW_ID = np.array([99])


def create_tables(client: PSClient) -> None:
    client.create_dense(
        "dense_adam",
        init=np.arange(12, dtype=np.float32).reshape(3, 4) / 8,
        optimizer=Adam(lr=0.1, weight_decay=0.01, amsgrad=True),
        clip_norm=5.0,
    )
    client.create_dense(
        "dense_sgd",
        (5,),
        initializer="constant",
        value=0.25,
        optimizer=SGD(lr=0.5, momentum=0.9, nesterov=True),
        consistency="sync",
    )
    client.create_sparse(
        "emb_adagrad",
        3,
        initializer="uniform",
        low=-0.5,
        high=0.5,
        seed=7,
        optimizer=Adagrad(lr=0.2, initial_accumulator_value=0.1),
        consistency="ssp",
        staleness=2,
        capacity=16,
    )
    client.create_sparse(
        "emb_rms",
        2,
        initializer="normal",
        mean=0.0,
        std=0.1,
        seed=3,
        optimizer=RMSprop(lr=0.01, momentum=0.5, centered=True),
        clip_value=0.75,
        max_rows_per_shard=64,
    )


def push_step(client: PSClient, step: int) -> None:
    """One push of gradients that depend on `step` to every table."""
    client.push("dense_adam", np.linspace(-1, 1, 12, dtype=np.float32).reshape(3, 4) * step)
    client.push("dense_sgd", np.arange(5, dtype=np.float32) - step)
    for name, ids in SPARSE_IDS.items():
        dim = 3 if name == "emb_adagrad" else 2
        grads = np.arange(len(ids) * dim, dtype=np.float32).reshape(len(ids), dim) / 4 - step
        client.push_sparse(name, ids, grads)


def served(client: PSClient) -> dict[str, np.ndarray]:
    out = {name: client.pull(name) for name in DENSE}
    for name, ids in SPARSE_IDS.items():
        out[name] = client.pull_sparse(name, ids)
    return out


def settings(client: PSClient) -> str:
    return json.dumps({n: list(i.settings) for n, i in sorted(client.list_tables().items())})


def main(out_dir: str) -> None:
    servers = [PServer(s, 2, 1, log_connections=False) for s in range(2)]
    try:
        client = PSClient([s.address for s in servers], worker_id=0)
        create_tables(client)
        for step in (1, 2, 3):
            push_step(client, step)
        client.increment_global_step(7)
        client.save(out_dir)
        expected = {f"{k}:saved": v for k, v in served(client).items()}
        expected["settings"] = np.array(settings(client))
        for name in SPARSE_IDS:  # a row the checkpoint does not hold: made by the initializer
            expected[f"{name}:new"] = client.pull_sparse(name, NEW_ID)
        push_step(client, 4)
        expected.update({f"{k}:next": v for k, v in served(client).items()})
        np.savez_compressed(f"{out_dir}/expected.npz", **expected)
        client.close()
    finally:
        for s in servers:
            s.stop(0)


if __name__ == "__main__":
    main(sys.argv[1])
