"""Dispatches `python -m pscore.bench NAME args...` to the benchmark module for NAME; with no
name (or -h) lists the benchmarks, a line on each."""

from __future__ import annotations

import importlib
import sys

__all__ = ["main", "usage"]

_COLLECTIVE = "busbw and p50 latency per size vs torch gloo and Open MPI, same run"
# name -> (module, what it measures)
BENCHMARKS = {
    "allreduce": ("collectives", f"all_reduce {_COLLECTIVE}"),
    "broadcast": ("collectives", f"broadcast {_COLLECTIVE}"),
    "reduce": ("collectives", f"reduce {_COLLECTIVE}"),
    "allgather": ("collectives", f"all_gather_into_tensor {_COLLECTIVE}"),
    "reduce_scatter": ("collectives", f"reduce_scatter_tensor {_COLLECTIVE}"),
    "alltoall": ("collectives", f"all_to_all_single {_COLLECTIVE}"),
    "scatter": ("collectives", f"scatter from rank 0 {_COLLECTIVE}"),
    "gather": ("collectives", f"gather to rank 0 {_COLLECTIVE}"),
    "barrier": ("collectives", "barrier p50 latency vs torch gloo and Open MPI, same run"),
    "loopback": ("loopback", "this machine's loopback TCP bandwidth, the TCP transport's ceiling"),
    "store": ("store", "TCPStore op latency and add throughput against torch's TCPStore"),
    "ps": ("ps", "parameter server dense and sparse push/pull against a torch RPC server"),
    "hogwild": ("hogwild", "shared-table update rows/s against torch.multiprocessing workers"),
    "train": ("train", "Trainer strategies' time to accuracy and samples/s vs torch DDP, same run"),
    "hogwild-cuda": ("hogwild_cuda", "GPU sparse updates against torch CUDA ops (needs CUDA)"),
    "staging": ("staging", "all_reduce of a CUDA tensor on the TCP path vs host bytes (CUDA)"),
    "plot": ("plot", "draws --json results: busbw per collective, ps and hogwild rows/s"),
}


def usage() -> str:
    width = max(map(len, BENCHMARKS)) + 2
    lines = ["usage: python -m pscore.bench NAME [options]   (NAME --help: its options)", ""]
    lines += [f"  {name.ljust(width)}{what}" for name, (_, what) in BENCHMARKS.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(usage())
        return 0
    if not argv or argv[0] not in BENCHMARKS:
        if argv:
            print(f"python -m pscore.bench: no benchmark named {argv[0]!r}", file=sys.stderr)
        print(usage(), file=sys.stderr)
        return 2
    module = importlib.import_module(f"pscore.bench.{BENCHMARKS[argv[0]][0]}")
    return module.main(argv)


if __name__ == "__main__":
    sys.exit(main())
