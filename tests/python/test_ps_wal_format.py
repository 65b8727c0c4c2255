"""The write-ahead log's format: logs written before the log had its own table records
(tests/data/ps_wal_v1, table layouts in the wire encoding) still replay into the same tables,
values and settings; logs written today replay too."""

from __future__ import annotations

import importlib.util
import os
import shutil

import numpy as np
import pytest

from pscore.ps import PSClient
from pscore.server import PServer

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data")
V1 = os.path.join(DATA, "ps_wal_v1")


def _maker():
    """tests/data/make_ps_wal.py, which wrote V1."""
    spec = importlib.util.spec_from_file_location(
        "make_ps_wal", os.path.join(DATA, "make_ps_wal.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make = _maker()


def recovered(root):
    """Two shards recovered from root's logs, and a client of them."""
    servers = [
        PServer(s, 2, 1, recover=d, snapshot_log_mb=0, log_connections=False)
        for s, d in enumerate(make.shard_dirs(root))
    ]
    return servers, PSClient([s.address for s in servers], worker_id=0)


@pytest.mark.parametrize("written_by", ["780a580", "today"])
def test_a_log_replays_into_the_same_tables_values_and_settings(written_by, tmp_path):
    root = str(tmp_path / "wal")
    if written_by == "today":
        os.mkdir(root)
        make.main(root)
    else:
        shutil.copytree(V1, root)
    expected = np.load(os.path.join(root, "expected.npz"))
    servers, client = recovered(root)
    try:
        assert all(s.replayed_records > 0 for s in servers)
        for name, values in make.make.served(client).items():
            np.testing.assert_array_equal(values, expected[f"{name}:saved"], err_msg=name)
        assert make.make.settings(client) == str(expected["settings"])
        assert "dropped" not in client.list_tables()
        assert client.global_step() == 7
    finally:
        client.close()
        for s in servers:
            s.stop(0)
