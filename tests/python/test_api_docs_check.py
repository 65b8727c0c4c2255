"""tools/check_api_docs.py, which fails the docs build when the API reference leaves out a public
name: it reads the same `__all__` lists the package exports, reads a Sphinx inventory, and names
exactly what is missing."""

from __future__ import annotations

import importlib
import importlib.util
import zlib
from pathlib import Path

import pytest

import pscore

TOOL = Path(__file__).resolve().parents[2] / "tools" / "check_api_docs.py"


@pytest.fixture(scope="module")
def tool():
    spec = importlib.util.spec_from_file_location("check_api_docs", TOOL)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_inventory(site: Path, names: list[str]) -> None:
    lines = "".join(f"{n} py:function 1 api/#{n} -\n" for n in names)
    header = (
        b"# Sphinx inventory version 2\n# Project: pscore\n# Version: 0.0.0\n"
        b"# The remainder of this file is compressed using zlib.\n"
    )
    (site / "objects.inv").write_bytes(header + zlib.compress(lines.encode()))


def test_static_all_is_what_the_modules_export(tool):
    assert tool.public_names("pscore") == pscore.__all__
    for name in tool.PUBLIC_MODULES:
        assert tool.public_names(name) == importlib.import_module(name).__all__


def test_a_complete_inventory_passes_and_a_missing_name_is_named(tool, tmp_path):
    modules = ("pscore", *tool.PUBLIC_MODULES)
    names = [f"{m}.{n}" for m in modules for n in tool.public_names(m)]
    _write_inventory(tmp_path, names)
    assert tool.missing_names(tool.documented_names(tmp_path)) == []

    _write_inventory(tmp_path, [n for n in names if n != "pscore.store.TCPStore"])
    assert tool.missing_names(tool.documented_names(tmp_path)) == ["pscore.store.TCPStore"]

    # pscore.TCPStore is covered by pscore.store.TCPStore or by itself; with neither, both count.
    gone = ("pscore.store.TCPStore", "pscore.TCPStore")
    _write_inventory(tmp_path, [n for n in names if n not in gone])
    assert tool.missing_names(tool.documented_names(tmp_path)) == list(gone)


def test_not_an_inventory_is_an_error(tool, tmp_path):
    (tmp_path / "objects.inv").write_bytes(b"<html>404</html>")
    with pytest.raises(ValueError, match="not a Sphinx inventory version 2"):
        tool.documented_names(tmp_path)
