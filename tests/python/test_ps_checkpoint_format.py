"""The checkpoint format: a checkpoint written before format 2 (tests/data/ps_checkpoint_v1,
table layouts as wire hex) loads with its values, optimizer state and settings; format 2
describes each table with named fields and round-trips; bad metadata is an error naming the
file and the field."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import struct

import numpy as np
import pytest

from pscore.ps import PSClient, read_checkpoint
from pscore.ps.checkpoint import read_safetensors
from pscore.ps.server import PServer

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data")
V1 = os.path.join(DATA, "ps_checkpoint_v1")
SHARD0 = "shard-00000-of-00002.safetensors"


def _maker():
    """tests/data/make_ps_checkpoint.py, which wrote V1: its tables, pushes and readers."""
    spec = importlib.util.spec_from_file_location(
        "make_ps_checkpoint", os.path.join(DATA, "make_ps_checkpoint.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


make = _maker()


@pytest.fixture
def client():
    servers = [PServer(s, 2, 1, log_connections=False) for s in range(2)]
    c = PSClient([s.address for s in servers], worker_id=0)
    yield c
    c.close()
    for s in servers:
        s.stop(0)


def expect_served(client, expected, suffix):
    for name, values in make.served(client).items():
        np.testing.assert_array_equal(values, expected[f"{name}:{suffix}"], err_msg=name)


def test_a_format_1_checkpoint_loads_with_its_values_state_and_settings(client, tmp_path):
    expected = np.load(os.path.join(V1, "expected.npz"))
    assert read_safetensors(os.path.join(V1, SHARD0))[1]["format"] == "pscore.ps.shard/1"
    client.load(V1)
    expect_served(client, expected, "saved")
    assert make.settings(client) == str(expected["settings"])  # the catalog's layouts
    assert client.global_step() == 7
    # Saved again in format 2, the optimizer state is the same bytes.
    client.save(str(tmp_path))
    old, new = read_checkpoint(V1, with_state=True), read_checkpoint(str(tmp_path), True)
    assert sorted(old) == sorted(new)
    for key, value in old.items():
        for a, b in zip(value, new[key]) if isinstance(value, tuple) else [(value, new[key])]:
            np.testing.assert_array_equal(a, b, err_msg=key)
    # The initializers came back (a new row) and so did the step counts (one more push).
    for name in make.SPARSE_IDS:
        np.testing.assert_array_equal(
            client.pull_sparse(name, make.NEW_ID), expected[f"{name}:new"], err_msg=name
        )
    make.push_step(client, 4)
    expect_served(client, expected, "next")


def test_format_2_names_every_field_and_round_trips(client, tmp_path):
    make.create_tables(client)
    make.push_step(client, 1)
    client.save(str(tmp_path))
    before = make.served(client)
    settings = make.settings(client)
    meta = read_safetensors(str(tmp_path / SHARD0))[1]
    assert (meta["format"], meta["format_version"]) == ("pscore.ps.shard", "2")
    catalog = {t["name"]: t for t in json.loads(meta["catalog"])}
    assert catalog["dense_adam"]["optimizer"]["name"] == "adam"
    assert catalog["dense_adam"]["optimizer"]["amsgrad"] is True
    assert catalog["dense_adam"]["optimizer"]["clip_norm"] == 5.0
    assert catalog["emb_adagrad"]["initializer"] == {
        "kind": "uniform",
        "low": -0.5,
        "high": 0.5,
        "seed": "7",
    }
    assert catalog["emb_adagrad"]["consistency"] == {
        "mode": "ssp",
        "staleness": 2,
        "backup_workers": 0,
    }
    assert catalog["dense_sgd"]["kind"] == "dense" and catalog["emb_rms"]["kind"] == "sparse"
    assert catalog["emb_rms"]["dtype"] == "F32" and catalog["emb_rms"]["shape"] == [2]
    make.push_step(client, 2)
    client.load(str(tmp_path))
    for name, values in make.served(client).items():
        np.testing.assert_array_equal(values, before[name], err_msg=name)
    assert make.settings(client) == settings


def rewrite_metadata(path: str, change) -> None:
    """Applies change(metadata) to the safetensors file at path, keeping its tensors."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    change(header["__metadata__"])
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + data[8 + n :])


def set_lr(meta, value):
    tables = json.loads(meta["tables"])
    tables[0]["optimizer"]["lr"] = value
    meta["tables"] = json.dumps(tables)


@pytest.mark.parametrize(
    ("change", "field", "why"),
    [
        (lambda m: m.update(format_version="3"), "format_version", "version '3' is not one"),
        (lambda m: m.pop("format_version"), "format_version", "missing"),
        (lambda m: set_lr(m, "fast"), r"tables\[0\]\.optimizer\.lr", "expected a number"),
        (lambda m: m.update(catalog="[{"), "catalog", "invalid JSON"),
    ],
)
def test_bad_metadata_names_the_file_and_the_field(client, tmp_path, change, field, why):
    client.create_dense("t", (3,))
    client.save(str(tmp_path))
    path = str(tmp_path / SHARD0)
    rewrite_metadata(path, change)
    with pytest.raises(ValueError, match=f"checkpoint {path}: metadata field '{field}': {why}"):
        client.load(str(tmp_path))
    np.testing.assert_array_equal(client.pull("t"), np.zeros(3, np.float32))


def test_a_corrupt_format_1_layout_names_the_file_and_the_field(client, tmp_path):
    shutil.copytree(V1, tmp_path, dirs_exist_ok=True)
    path = str(tmp_path / SHARD0)
    rewrite_metadata(
        path, lambda m: m.update(catalog=json.dumps([json.loads(m["catalog"])[0][:-2]]))
    )
    with pytest.raises(
        ValueError, match=rf"checkpoint {path}: metadata field 'catalog\[0\]': not a format-1"
    ):
        client.load(str(tmp_path))
