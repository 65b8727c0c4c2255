"""Writes the type stubs (.pyi) of pscore's extension modules next to them in python/pscore/, or
with --check fails, showing the difference, when the committed stubs are not what the built
modules give.

    PYTHONPATH=python python tools/gen_stubs.py          # after building into python/pscore
    python tools/gen_stubs.py --check                    # CI, against the installed pscore

The stubs come from whichever pscore is importable; pybind11-stubgen and ruff are pinned (their
output, and pybind11's signatures, differ between versions), so every machine writes the same
text.
"""

from __future__ import annotations

import argparse
import difflib
import subprocess
import sys
import tempfile
from pathlib import Path

MODULES = ("_types", "_C", "_gpu", "_store", "_ps", "_hogwild")
REQUIREMENTS = ("pybind11-stubgen==2.5.5", "ruff==0.17.6")
ROOT = Path(__file__).resolve().parent.parent
STUB_DIR = ROOT / "python" / "pscore"


def _run(*args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "-m", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if done.returncode != 0:
        sys.exit(f"{' '.join(args[:2])} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def generate() -> dict[str, str]:
    """{file name: stub text} of each module, formatted with the repository's ruff settings."""
    stubs = {}
    with tempfile.TemporaryDirectory() as out:
        for module in MODULES:
            _run("pybind11_stubgen", "--exit-code", "-o", out, f"pscore.{module}")
            text = (Path(out) / "pscore" / f"{module}.pyi").read_text()
            name = f"{module}.pyi"
            path = str(STUB_DIR.relative_to(ROOT) / name)
            stubs[name] = _run("ruff", "format", "--stdin-filename", path, "-", stdin=text)
    return stubs


def check(stubs: dict[str, str]) -> int:
    stale = 0
    for name, text in stubs.items():
        path = STUB_DIR / name
        old = path.read_text() if path.exists() else ""
        if old != text:
            stale += 1
            rel = str(path.relative_to(ROOT))
            diff = difflib.unified_diff(
                old.splitlines(True), text.splitlines(True), rel, rel + " (generated)"
            )
            sys.stdout.writelines(diff)
    if stale:
        print(f"\n{stale} stub(s) are stale; regenerate with: python tools/gen_stubs.py")
    return 1 if stale else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the stubs differ")
    parser.add_argument("--install", action="store_true", help="pip install the pinned tools")
    args = parser.parse_args()
    if args.install:
        _run("pip", "install", "-q", *REQUIREMENTS)
    stubs = generate()
    if args.check:
        return check(stubs)
    for name, text in stubs.items():
        (STUB_DIR / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
