"""``pscore status``: a running job's parameter-server shards and ranks at a glance (see
docs/observability.md). The CLI is in cli.py; snapshot.py gathers, render.py draws."""

from __future__ import annotations

from .cli import main
from .snapshot import snapshot

__all__ = ["main", "snapshot"]
