"""Reading parameter-server checkpoints without a server: each shard's file is a safetensors file
(8-byte little-endian header length, JSON header, raw tensors), parsed here with json and numpy
only - nothing in a checkpoint is ever executed."""

from __future__ import annotations

import glob
import json
import os
import struct

import numpy as np

__all__ = ["read_checkpoint", "read_safetensors"]

_DTYPES = {
    "F32": np.float32,
    "F64": np.float64,
    "I64": np.int64,
    "I32": np.int32,
    "U8": np.uint8,
    "I8": np.int8,
    "F16": np.float16,
}


def read_safetensors(path: str) -> tuple[dict, dict]:
    """(tensors by name as numpy arrays, metadata) of one safetensors file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file (shorter than 8 bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if n > len(data) - 8:
        raise ValueError(f"{path}: header length {n} exceeds the file")
    header = json.loads(data[8 : 8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        dtype = np.dtype(_DTYPES[t["dtype"]])
        if not 0 <= begin <= end <= len(data) - base:
            raise ValueError(f"{path}: tensor {name!r} lies outside the file")
        arr = np.frombuffer(
            data, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=base + begin
        )
        tensors[name] = arr.reshape(t["shape"])
    return tensors, meta


def read_checkpoint(path: str, with_state: bool = False) -> dict:
    """Tables saved by PSClient.save(path): a dense table as one array of its full shape, a
    sparse table as (ids, rows) sorted by id. with_state adds ``"<name>:state"`` entries (the
    optimizer's slots, dense: (slots, *shape); sparse: (rows, slots, dim))."""
    files = sorted(glob.glob(os.path.join(path, "shard-*-of-*.safetensors")))
    if not files:
        raise FileNotFoundError(f"no shard-*-of-*.safetensors files under {path}")
    dense: dict[str, np.ndarray] = {}
    shapes: dict[str, tuple] = {}
    dense_state: dict[str, np.ndarray] = {}
    sparse: dict[str, list] = {}
    for f in files:
        tensors, meta = read_safetensors(f)
        for d in json.loads(meta["tables"]):
            name = d["name"]
            if d["kind"] == "dense":
                full = dense.setdefault(name, np.zeros(int(np.prod(d["shape"])), np.float32))
                lo, n = d["offset"], d["numel"]
                full[lo : lo + n] = tensors[name]
                if with_state and f"{name}:state" in tensors:
                    st = tensors[f"{name}:state"]
                    buf = dense_state.setdefault(
                        name, np.zeros((st.shape[0], full.size), np.float32)
                    )
                    buf[:, lo : lo + n] = st
                shapes[name] = tuple(d["shape"])
            else:
                parts = sparse.setdefault(name, [])
                parts.append((tensors[f"{name}:ids"], tensors[name], tensors.get(f"{name}:state")))
    out = {}
    for name, full in dense.items():
        shape = shapes[name]
        out[name] = full.reshape(shape)
        if name in dense_state:
            out[f"{name}:state"] = dense_state[name].reshape((-1, *shape))
    for name, parts in sparse.items():
        ids = np.concatenate([p[0] for p in parts])
        rows = np.concatenate([p[1] for p in parts])
        order = np.argsort(ids, kind="stable")
        out[name] = (ids[order], rows[order])
        if with_state and all(p[2] is not None for p in parts):
            out[f"{name}:state"] = np.concatenate([p[2] for p in parts])[order]
    return out
