"""The write-ahead log's format: logs written before the log had its own table records
(tests/data/ps_wal_v1, table layouts in the wire encoding) still replay into the same tables,
values and settings; logs written today replay too."""

from __future__ import annotations

import os
import runpy
import shutil
import struct
from types import SimpleNamespace

import numpy as np
import pytest

from pscore.ps import PSClient
from pscore.ps.server import PServer

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data")
V1 = os.path.join(DATA, "ps_wal_v1")


# tests/data/make_ps_wal.py, which wrote V1 (run as a module: its main does not run).
make = SimpleNamespace(**runpy.run_path(os.path.join(DATA, "make_ps_wal.py")))


# Record kinds that hold a table layout (csrc/ps/durability/update_log.h): 4 and 5 in the wire
# encoding (logs up to 780a580), 9 and 10 as the log's own table records.
LAYOUT_KINDS = {"780a580": {4, 5}, "today": {9, 10}}


def layout_record_kinds(root):
    """The kinds of the records in root's logs that hold a table layout."""
    kinds = set()
    for d in make.shard_dirs(root):
        (wal,) = [os.path.join(d, f) for f in os.listdir(d) if f.endswith(".wal")]
        with open(wal, "rb") as f:
            data = f.read()
        at = 0
        while at < len(data):  # header: u32 magic, u8 kind, 3 reserved, u64 index, u64 length
            _, kind, _, length = struct.unpack_from("<IB3xQQ", data, at)
            kinds.add(kind)
            at += 24 + length + 4  # the payload and its u32 checksum
    return kinds & {4, 5, 9, 10}


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
    assert layout_record_kinds(root) == LAYOUT_KINDS[written_by]
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
