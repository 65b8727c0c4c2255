"""The ``pscore-store`` command (also ``python -m pscore.store.server``): serves a TCPStore from
the shell until SIGTERM or SIGINT, for processes that find each other through it - ``pserver
--store URL``, ``PSClient(store=URL)``, ``PSCORE_STORE=URL``:

    pscore-store --port 29400     # prints: pscore-store: serving tcp://127.0.0.1:29400

The bind policy is TCPStore's (docs/security.md): a loopback ``--host`` is bound as it is; any
other binds every interface and needs a token (PSCORE_AUTH_TOKEN / PSCORE_AUTH_TOKEN_FILE) or
``--insecure`` (or PSCORE_INSECURE=1).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .. import errors
from ..cluster.spec import advertised_host
from .native import TCPStore

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pscore-store", description="Serve a TCPStore until SIGTERM or SIGINT."
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to serve on; one other hosts can reach needs PSCORE_AUTH_TOKEN or "
        "--insecure (default: %(default)s)",
    )
    p.add_argument(
        "--port",
        type=int,
        default=0,
        help="TCP port; 0 picks a free one, printed in the URL (default: %(default)s)",
    )
    p.add_argument(
        "--job-id",
        metavar="ID",
        help="job id a client's handshake must carry when there is a token "
        "(default: $PSCORE_JOB_ID, else 'pscore')",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback address without a token (default: $PSCORE_INSECURE, else "
        "refuse)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        store = TCPStore(
            args.host,
            args.port,
            is_master=True,
            insecure=True if args.insecure else None,
            job_id=args.job_id,
        )
    except (ValueError, TypeError, errors.Error, OSError) as e:
        print(f"pscore-store: {e}", file=sys.stderr)
        return 2
    print(f"pscore-store: serving tcp://{advertised_host(args.host)}:{store.port}", flush=True)
    while not stop.wait(0.5):
        pass
    del store  # the last reference: the server thread stops and closes every connection
    print("pscore-store: stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
