"""``python -m pscore.status``: the same as ``pscore status``."""

from __future__ import annotations

import sys

from .cli import main

__all__: list[str] = []

if __name__ == "__main__":
    sys.exit(main())
