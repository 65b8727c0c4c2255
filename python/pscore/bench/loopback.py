"""Loopback TCP bandwidth of this machine, the ceiling for the TCP transport:
`python -m pscore.bench loopback [--mb 256] [--json out.json]`. Two processes send to each other
at once (full duplex, as a ring step does) over one connection per direction."""

from __future__ import annotations

import argparse
import multiprocessing as mp
import socket
import threading
import time

from .report import print_table, write_json

__all__ = ["main", "measure"]

CHUNK = 1 << 20


def _pump(sock: socket.socket, nbytes: int, send: bool) -> None:
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    left = nbytes
    while left > 0:
        if send:
            sock.sendall(view[: min(CHUNK, left)])
            left -= min(CHUNK, left)
        else:
            got = sock.recv_into(view, min(CHUNK, left))
            if not got:
                raise ConnectionError("peer closed early")
            left -= got


def _side(conn: socket.socket, nbytes: int, duplex: bool, queue) -> None:
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
    t0 = time.perf_counter()
    if duplex:
        rx = threading.Thread(target=_pump, args=(conn, nbytes, False))
        rx.start()
        _pump(conn, nbytes, True)
        rx.join()
    else:
        _pump(conn, nbytes, True)
    queue.put(time.perf_counter() - t0)


def _receiver(port: int, nbytes: int, duplex: bool, queue) -> None:
    conn = socket.create_connection(("127.0.0.1", port))
    if duplex:
        _side(conn, nbytes, True, queue)
    else:
        _pump(conn, nbytes, False)
    conn.close()


def measure(nbytes: int, duplex: bool) -> float:
    """GB/s per direction."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    listener = socket.create_server(("127.0.0.1", 0))
    proc = ctx.Process(target=_receiver, args=(listener.getsockname()[1], nbytes, duplex, queue))
    proc.start()
    conn, _ = listener.accept()
    _side(conn, nbytes, duplex, queue)
    seconds = queue.get()
    proc.join()
    conn.close()
    listener.close()
    return nbytes / seconds / 1e9


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pscore.bench loopback",
        description="Loopback TCP bandwidth per direction, one-way and full-duplex (two "
        "processes, one connection per direction): the ceiling of the TCP transport here.",
    )
    parser.add_argument(
        "--mb", type=int, default=256, help="MiB sent in each direction (default %(default)s)"
    )
    parser.add_argument(
        "--json", default=None, help="also write the results to this JSON file (default none)"
    )
    args = parser.parse_args(argv[1:])
    nbytes = args.mb << 20
    simplex = measure(nbytes, False)
    duplex = measure(nbytes, True)
    print_table(
        "loopback TCP, GB/s per direction",
        ["mode", "GB/s"],
        [["one-way", simplex], ["full-duplex", duplex]],
    )
    write_json(args.json, {"bytes": nbytes, "simplex_GBps": simplex, "duplex_GBps": duplex})
    return 0
