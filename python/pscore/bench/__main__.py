"""Dispatches `python -m pscore.bench NAME args...` to the benchmark module for NAME."""

from __future__ import annotations

import importlib
import sys

COLLECTIVES = (
    "allreduce",
    "broadcast",
    "reduce",
    "allgather",
    "reduce_scatter",
    "alltoall",
    "barrier",
)
MODULES = {name: "collectives" for name in COLLECTIVES}
MODULES.update(
    hogwild="hogwild",
    **{"hogwild-cuda": "hogwild_cuda"},
    ps="ps",
    loopback="loopback",
    store="store",
)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in MODULES:
        print("usage: python -m pscore.bench {" + ",".join(MODULES) + "} [options]")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    module = importlib.import_module(f"pscore.bench.{MODULES[argv[0]]}")
    return module.main(argv)


if __name__ == "__main__":
    sys.exit(main())
