"""`pscore status` (also `python -m pscore.status`): a running job's parameter-server shards and
ranks, read through the job's store.

    pscore status --store tcp://127.0.0.1:29400 [--job ID] [--json] [--watch SECONDS]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.parse

from .. import _config, errors
from ..ps import discovery, environment
from .render import render
from .snapshot import job_exists, snapshot

__all__ = ["main"]

_CLEAR_SCREEN = "\x1b[H\x1b[2J"


class StatusError(Exception):
    """What `pscore status` cannot show, said in one line."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pscore status",
        description="Show a running job's parameter-server shards (load, queue depth, latency) "
        "and ranks, read through the job's store.",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        default=_config.STORE.get(),
        help="the job's store: tcp://host:port (pscore-store, pscore-run's store), file:///path "
        f"or redis://host:port (default: ${_config.STORE.name})",
    )
    p.add_argument(
        "--job",
        metavar="ID",
        default=None,
        help=f"job id (default: ${_config.JOB_ID.name}, else {_config.JOB_ID.default!r})",
    )
    p.add_argument(
        "--interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="time between the two stats samples rates are taken over; 0: no rates "
        "(default: %(default)g)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long the store and each shard may take to answer (default: %(default)g)",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of tables")
    p.add_argument(
        "--watch",
        type=float,
        default=None,
        metavar="SECONDS",
        help="refresh every SECONDS until interrupted (with --json: one JSON object per line)",
    )
    return p


def _check_args(p: argparse.ArgumentParser, args) -> None:
    if not args.store:
        p.error(f"--store URL is required (or set {_config.STORE.name})")
    if args.interval < 0 or args.timeout <= 0 or (args.watch is not None and args.watch <= 0):
        p.error("--interval must be >= 0, --timeout and --watch > 0")
    url = urllib.parse.urlsplit(args.store)
    if url.scheme == "file" and not os.path.exists(url.path):
        p.error(
            f"--store {args.store}: no such file (a FileStore's file exists while its job runs)"
        )


def _open(url: str, job_id: str, timeout: float):
    try:
        store = discovery.open_store(url, timeout)
    except ValueError as e:
        raise StatusError(f"--store {url}: {e}") from e
    except Exception as e:  # any store's failure to answer (tcp, file, redis), in one line
        raise StatusError(f"cannot reach the store at {url} (timeout {timeout:g} s): {e}") from e
    store.set_timeout(timeout)
    try:
        found = job_exists(store, job_id)
    except (errors.Error, ConnectionError) as e:
        raise StatusError(f"the store at {url} did not answer: {e}") from e
    if not found:
        raise StatusError(
            f"no job {job_id!r} in the store at {url}: no parameter-server shard and no rank "
            f"registered under it (give --job or {_config.JOB_ID.name})"
        )
    return store


def _snapshot(store, args, job_id: str) -> dict:
    try:
        return snapshot(store, args.store, job_id, args.interval, args.timeout)
    except (errors.StoreError, errors.TimeoutError, ConnectionError) as e:
        raise StatusError(f"the store at {args.store} stopped answering: {e}") from e


def _show(snap: dict, as_json: bool, watching: bool) -> None:
    if as_json:
        print(json.dumps(snap, indent=None if watching else 2), flush=True)
        return
    text = render(snap)
    prefix = _CLEAR_SCREEN if watching and sys.stdout.isatty() else ""
    print(prefix + text + ("\n" if watching else ""), flush=True)


def main(argv: list[str] | None = None) -> int:
    p = _parser()
    args = p.parse_args(argv)
    _check_args(p, args)
    job_id = args.job if args.job is not None else environment.job_id()
    try:
        store = _open(args.store, job_id, args.timeout)
        while True:
            started = time.monotonic()
            _show(_snapshot(store, args, job_id), args.json, args.watch is not None)
            if args.watch is None:
                return 0
            time.sleep(max(0.0, args.watch - (time.monotonic() - started)))
    except StatusError as e:
        print(f"pscore status: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
