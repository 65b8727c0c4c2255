"""The Open MPI side of `python -m pscore.bench COLLECTIVE --compare mpi`: every rank of the
`mpirun` job runs this program (mpi4py, float32 buffers from the allocator pscore's ranks use,
the same element counts as pscore's rows).

Rounds alternate with pscore's through the benchmark's TCPStore: a rank sleeps in a store wait
until pscore's rank 0 sets the round's go key, times its calls, meets the other ranks in an
MPI barrier, and rank 0 sets the done key the pscore ranks sleep on. At the end rank 0 writes
every rank's samples (seconds per call) to the JSON file it was given:
`{"library": ..., "samples": [rank][size] -> [seconds, ...]}`.
"""

from __future__ import annotations

import json
import sys

from .buffers import allocator, operands
from .collectives import _time
from .mpi_compare import done_key, go_key

__all__ = ["main", "run"]

# The MPI ranks may wait this long for pscore's round before their go key: the parent, which
# watches both sides, ends a stuck run long before.
_GO_TIMEOUT_S = 3600.0


def _call(name: str, nbytes: int, comm, mpi, buffers: str):  # noqa: PLR0911 - one per operation
    """One call of the collective over float32 buffers made once per size, as pscore's
    (buffers.py), seen by mpi4py as numpy arrays; allreduce and reduce's root in place."""
    if name == "barrier":
        return comm.Barrier
    ones, empty = allocator(buffers)
    b = operands(
        name, nbytes, comm.Get_size(), lambda n: ones(n).numpy(), lambda n: empty(n).numpy()
    )
    if name == "allreduce":
        return lambda: comm.Allreduce(mpi.IN_PLACE, b.x, op=mpi.SUM)
    if name == "broadcast":
        return lambda: comm.Bcast(b.x, root=0)
    if name == "reduce":
        if comm.Get_rank() == 0:
            return lambda: comm.Reduce(mpi.IN_PLACE, b.x, op=mpi.SUM, root=0)
        return lambda: comm.Reduce(b.x, None, op=mpi.SUM, root=0)
    if name == "allgather":
        return lambda: comm.Allgather(b.part, b.out)
    if name == "reduce_scatter":
        return lambda: comm.Reduce_scatter_block(b.inp, b.out, op=mpi.SUM)
    if name == "alltoall":
        return lambda: comm.Alltoall(b.inp, b.out)
    root = comm.Get_rank() == 0
    if name == "scatter":
        return lambda: comm.Scatter(b.whole if root else None, b.part, root=0)
    if name == "gather":
        return lambda: comm.Gather(b.part, b.whole if root else None, root=0)
    raise ValueError(f"mpi_peer: no collective named {name!r}")


def run(config: dict) -> None:
    from mpi4py import MPI

    from ..store import TCPStore

    comm = MPI.COMM_WORLD
    store = TCPStore("127.0.0.1", config["port"], timeout=_GO_TIMEOUT_S)
    per_size = []
    for i, (nbytes, iters) in enumerate(zip(config["sizes"], config["iters"])):
        call = _call(config["collective"], nbytes, comm, MPI, config["buffers"])
        samples = []
        for r in range(config["rounds"]):
            store.wait([go_key(i, r)], timeout=_GO_TIMEOUT_S)
            _time(call, 2)
            samples += _time(call, iters)
            comm.Barrier()
            if comm.Get_rank() == 0:
                store.set(done_key(i, r), b"1")
        per_size.append(samples)
    gathered = comm.gather(per_size, root=0)
    if comm.Get_rank() == 0:
        with open(config["out"], "w") as f:
            json.dump({"library": MPI.Get_library_version().strip(), "samples": gathered}, f)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: mpirun -n N python -m pscore.bench.mpi_peer CONFIG_JSON", file=sys.stderr)
        return 2
    run(json.loads(argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
