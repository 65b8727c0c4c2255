"""The ``pscore`` command: ``pscore SUBCOMMAND [options]``, each subcommand a module's main."""

from __future__ import annotations

import importlib
import sys

__all__ = ["COMMANDS", "main"]

# name -> (module with main(argv), what it does)
COMMANDS = {
    "status": ("pscore.status.cli", "a running job's parameter-server shards and ranks"),
}


def _usage() -> str:
    width = max(map(len, COMMANDS)) + 2
    lines = ["usage: pscore COMMAND [options]   (COMMAND --help: its options)", ""]
    lines += [f"  {name.ljust(width)}{what}" for name, (_, what) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(_usage())
        return 0
    if not argv or argv[0] not in COMMANDS:
        if argv:
            print(f"pscore: no command named {argv[0]!r}", file=sys.stderr)
        print(_usage(), file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[argv[0]][0])
    return module.main(argv[1:])
