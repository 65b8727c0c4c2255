"""Writes tests/data/ps_wal_v1: the recover directories of two parameter-server shards whose
write-ahead logs hold every kind of record (new tables, dense parts with initial values,
pushes, a dropped table, the global step) and, in expected.npz, what the
recovered shards must serve (the tables of tests/data/make_ps_checkpoint.py).

ps_wal_v1 was written by this script at commit 780a580, whose logs record table layouts in the
wire encoding of the day (record kinds 4 and 5, read today by checkpoint_legacy_v1). Do not
regenerate it: it is there to prove that such logs still replay. Run as
`python tests/data/make_ps_wal.py OUT_DIR` to write logs in today's format."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np

from pscore.ps import PSClient
from pscore.ps.server import PServer


def _checkpoint_maker():
    """make_ps_checkpoint.py beside this file: the tables, pushes and readers."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "make_ps_checkpoint.py")
    spec = importlib.util.spec_from_file_location("make_ps_checkpoint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make = _checkpoint_maker()


def shard_dirs(root: str) -> list[str]:
    return [os.path.join(root, f"s{shard}") for shard in range(2)]


def main(out_dir: str) -> None:
    # snapshot_log_mb=0: no snapshot trims the log, so every record stays in it.
    servers = [
        PServer(s, 2, 1, recover=d, snapshot_log_mb=0, log_connections=False)
        for s, d in enumerate(shard_dirs(out_dir))
    ]
    try:
        client = PSClient([s.address for s in servers], worker_id=0)
        make.create_tables(client)
        client.create_dense("dropped", (4,))
        for step in (1, 2, 3):
            make.push_step(client, step)
        client.drop_table("dropped")
        client.increment_global_step(7)
        expected = {f"{k}:saved": v for k, v in make.served(client).items()}
        expected["settings"] = np.array(make.settings(client))
        np.savez_compressed(os.path.join(out_dir, "expected.npz"), **expected)
        client.close()
    finally:
        for s in servers:
            s.stop(0)


if __name__ == "__main__":
    main(sys.argv[1])
