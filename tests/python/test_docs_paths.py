"""Every repository path a documentation page names in backticks exists, so a renamed or deleted
file cannot leave a page pointing at nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = ["README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md"))]
TOP_DIRS = ("csrc", "python/pscore", "tests", "docs", "examples", "benchmarks")
# A backticked span that starts with a top directory and holds only path characters; a trailing
# ":func" or "::name" (a function in the file) and a trailing slash are cut off before checking.
_SPAN = re.compile(r"`([^`\s]+)`")
_TOP = "|".join(re.escape(d) for d in TOP_DIRS)
_PATH = re.compile(rf"^(?:{_TOP})/[\w./-]*$")


def named_paths(text: str) -> list[str]:
    paths = []
    for span in _SPAN.findall(text):
        path = span.split(":", 1)[0]
        if _PATH.match(path) and "*" not in path:
            paths.append(path.rstrip("/"))
    return paths


def test_named_paths_finds_files_and_strips_functions():
    text = "`csrc/ps/x.cc` `python/pscore/a.py:f` `docs/` `pscore.x` `tests/python/*.py` `ls csrc`"
    assert named_paths(text) == ["csrc/ps/x.cc", "python/pscore/a.py", "docs"]


def test_architecture_page_names_many_paths():
    assert len(named_paths((ROOT / "docs" / "architecture.md").read_text())) > 40


@pytest.mark.parametrize("page", PAGES)
def test_every_named_path_exists(page):
    missing = sorted({p for p in named_paths((ROOT / page).read_text()) if not (ROOT / p).exists()})
    assert not missing, f"{page} names paths that do not exist: {missing}"
