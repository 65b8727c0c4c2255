"""Fails when the built documentation site's API reference leaves out a public name: every name
in the `__all__` of `pscore` and of each public module must be an entry of the site's objects.inv
(the inventory mkdocstrings writes of what it rendered).

    mkdocs build --strict -d SITE && python tools/check_api_docs.py SITE

A name of `pscore.__all__` counts as covered when it is documented as `pscore.NAME` or under one
of the public modules (`pscore.store.TCPStore` covers `pscore.TCPStore`). `__all__` is read from
the sources, so no built extension is needed.
"""

from __future__ import annotations

import argparse
import ast
import sys
import zlib
from pathlib import Path

__all__ = ["PUBLIC_MODULES", "documented_names", "missing_names", "public_names"]

ROOT = Path(__file__).resolve().parents[1]
PUBLIC_MODULES = (
    "pscore.collectives",
    "pscore.store",
    "pscore.cluster",
    "pscore.ps",
    "pscore.hogwild",
    "pscore.train",
    "pscore.torch_backend",
    "pscore.errors",
)


def public_names(module: str) -> list[str]:
    """The literal `__all__` of a module of python/, read without importing it."""
    base = ROOT / "python" / Path(*module.split("."))
    source = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
    for node in ast.parse(source.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return list(ast.literal_eval(node.value))
    raise ValueError(f"{source} has no literal __all__")


def documented_names(site: Path) -> set[str]:
    """The object names in SITE/objects.inv (Sphinx inventory version 2: four header lines,
    then zlib-compressed lines that start with the name)."""
    data = (site / "objects.inv").read_bytes()
    header, _, body = data.partition(b"# The remainder of this file is compressed using zlib.\n")
    if not header.startswith(b"# Sphinx inventory version 2"):
        raise ValueError(f"{site / 'objects.inv'} is not a Sphinx inventory version 2")
    return {line.split(" ", 1)[0] for line in zlib.decompress(body).decode().splitlines()}


def missing_names(documented: set[str]) -> list[str]:
    """The public names the reference leaves out."""
    missing = [
        f"{module}.{name}"
        for module in PUBLIC_MODULES
        for name in public_names(module)
        if f"{module}.{name}" not in documented
    ]
    for name in public_names("pscore"):
        places = [f"pscore.{name}", *(f"{module}.{name}" for module in PUBLIC_MODULES)]
        if not documented.intersection(places):
            missing.append(f"pscore.{name}")
    return missing


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", type=Path, help="the directory mkdocs built the site into")
    missing = missing_names(documented_names(parser.parse_args().site))
    if missing:
        print("the API reference leaves out: " + ", ".join(missing), file=sys.stderr)
        return 1
    print(f"the API reference covers pscore.__all__ and {len(PUBLIC_MODULES)} public modules")
    return 0


if __name__ == "__main__":
    sys.exit(main())
