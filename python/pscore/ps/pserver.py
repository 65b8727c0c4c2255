"""The ``pserver`` command (``python -m pscore.ps.pserver``): one parameter-server shard as a
process.

    pserver --port 7164 --shard 0 --num-shards 2 --num-workers 4 --store tcp://host:port

Under TF_CONFIG (a ``ps`` task of a TFJob) the shard index, address and counts come from
TF_CONFIG; ``PSCORE_STORE`` is the default ``--store`` (pscore.ps.environment). SIGTERM stops
accepting, lets in-flight requests finish, writes a checkpoint when asked
(``--checkpoint-on-exit``) and exits 0. ``--recover DIR`` keeps the shard's write-ahead log and
snapshots in DIR (see pscore.ps.server).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from .. import _config, errors
from . import discovery, environment
from .server import SNAPSHOT_LOG_MB, SNAPSHOT_LOG_RATIO, PServer

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pserver",
        description="Serve one parameter-server shard. In a TF_CONFIG job (Kubeflow TFJob) a 'ps' "
        "task needs no options: its shard index, address, shard and worker counts come from "
        "TF_CONFIG. The options below override them.",
    )
    p.add_argument(
        "--port",
        metavar="PORT",
        type=int,
        help="TCP port; 0 picks a free one, which workers find in --store "
        "(default: the ps task's port in TF_CONFIG, else 0)",
    )
    p.add_argument(
        "--host",
        metavar="HOST",
        help="bind address; one other hosts can reach needs PSCORE_AUTH_TOKEN or --insecure "
        "(default: the ps task's host in TF_CONFIG when it is loopback, every interface when "
        "not; 127.0.0.1 without TF_CONFIG)",
    )
    p.add_argument(
        "--shard",
        metavar="I",
        type=int,
        help="this shard's index, 0 to num-shards - 1 (default: the ps task's index in "
        "TF_CONFIG, else 0)",
    )
    p.add_argument(
        "--num-shards",
        metavar="N",
        type=int,
        help="shards in the job (default: the number of ps tasks in TF_CONFIG, else 1)",
    )
    p.add_argument(
        "--num-workers",
        metavar="N",
        type=int,
        help="workers in the job; a sync round waits for this many (default: the chief and "
        "worker tasks in TF_CONFIG, else 1)",
    )
    p.add_argument(
        "--store",
        metavar="URL",
        help="store URL to publish this shard's address in: tcp://host:port (pscore-store or "
        f"the job's TCPStore), file:///path or redis://host:port (default: ${_config.STORE.name}"
        ", else none)",
    )
    p.add_argument(
        "--store-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="how long to wait for the store to answer (default: %(default)g)",
    )
    p.add_argument(
        "--job-id",
        metavar="ID",
        help="job id every worker's handshake must carry; also names the store keys "
        "(default: $PSCORE_JOB_ID, else 'pscore')",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow a non-loopback bind without PSCORE_AUTH_TOKEN (default: refuse; "
        "PSCORE_INSECURE=1 does the same)",
    )
    p.add_argument(
        "--recover",
        metavar="DIR",
        help="keep a write-ahead log + snapshots in DIR and rebuild from them on start "
        "(default: none, the shard starts empty)",
    )
    p.add_argument(
        "--checkpoint-every",
        type=float,
        metavar="SECONDS",
        help="snapshot into the --recover DIR this often while the log holds records "
        "(truncates the log) (default: never; the log size still triggers snapshots)",
    )
    p.add_argument(
        "--snapshot-log-mb",
        type=float,
        default=SNAPSHOT_LOG_MB,
        metavar="MB",
        help="snapshot when the --recover log passes max(MB, --snapshot-log-ratio x the last "
        "snapshot's size); requests wait at twice that; 0: not by size (default: %(default)s)",
    )
    p.add_argument(
        "--snapshot-log-ratio",
        type=float,
        default=SNAPSHOT_LOG_RATIO,
        metavar="K",
        help="the log may grow to K x the last snapshot's size before the next snapshot "
        "(default: %(default)s)",
    )
    p.add_argument(
        "--checkpoint-on-exit",
        metavar="DIR",
        nargs="?",
        const="",
        help="on SIGTERM, save the shard to DIR; without DIR, to the --recover DIR "
        "(default: no checkpoint)",
    )
    p.add_argument(
        "--fsync",
        action="store_true",
        help="fsync the log after every update (default: off: an update survives a crash of "
        "the process, not of the machine)",
    )
    p.add_argument(
        "--threads",
        type=int,
        default=2,
        metavar="N",
        help="request handler threads (default: %(default)s)",
    )
    p.add_argument(
        "--max-frame-mb",
        metavar="MB",
        type=int,
        default=1024,
        help="largest request accepted after authentication, in MiB (default: %(default)s)",
    )
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="on SIGTERM, how long queued requests may take to finish (default: %(default)g)",
    )
    p.add_argument(
        "--metrics-port",
        metavar="PORT",
        type=int,
        help="serve Prometheus /metrics on 127.0.0.1:PORT; 0 picks one (default: off)",
    )
    return p


def _place_shard(args: argparse.Namespace) -> str:
    """Fills the shard's index, counts and address that the command line left out from
    TF_CONFIG (or the defaults without it); returns where they came from, for the banner.
    Raises ValueError for a TF_CONFIG that is malformed or names another kind of task."""
    tf = environment.shard_from_tf_config()
    if tf is None:
        defaults, source = (0, 1, 1, "127.0.0.1", 0), ""
    else:
        defaults = (tf.shard, tf.num_shards, tf.num_workers, tf.bind_host, tf.port)
        source = f" (TF_CONFIG task ps:{tf.shard} at {tf.address})"
    for name, default in zip(("shard", "num_shards", "num_workers", "host", "port"), defaults):
        if getattr(args, name) is None:
            setattr(args, name, default)
    return source


def _say(message: str) -> None:
    print(f"pserver: {message}", file=sys.stderr, flush=True)


def _check_flags(args: argparse.Namespace) -> None:
    """Refuses flag values that only the command line can get wrong (PServer checks the rest)."""
    if args.checkpoint_on_exit == "" and not args.recover:
        raise ValueError("--checkpoint-on-exit without a DIR needs --recover DIR")
    if args.max_frame_mb < 1:
        raise ValueError(f"--max-frame-mb must be >= 1, got {args.max_frame_mb}")
    if not args.drain_timeout >= 0:
        raise ValueError(f"--drain-timeout must be >= 0 seconds, got {args.drain_timeout}")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        _check_flags(args)
        source = _place_shard(args)
    except ValueError as e:
        print(f"pserver: {e}", file=sys.stderr)
        return 2
    store_url = args.store or environment.store_url()
    try:
        store = (
            discovery.open_store(store_url, args.store_timeout, on_wait=_say) if store_url else None
        )
    except ValueError as e:  # not a store URL: say which setting gave it
        origin = "--store" if args.store else _config.STORE.name
        print(f"pserver: {origin} {store_url!r}: {e}", file=sys.stderr)
        return 2
    except (errors.Error, OSError) as e:
        print(f"pserver: {e}", file=sys.stderr)
        return 1
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    try:
        server = PServer(
            args.shard,
            args.num_shards,
            args.num_workers,
            host=args.host,
            port=args.port,
            store=store,
            job_id=args.job_id,
            insecure=True if args.insecure else None,
            recover=args.recover,
            checkpoint_every=args.checkpoint_every,
            snapshot_log_mb=args.snapshot_log_mb,
            snapshot_log_ratio=args.snapshot_log_ratio,
            fsync_log=args.fsync,
            threads=args.threads,
            max_frame_bytes=args.max_frame_mb << 20,
            metrics_port=args.metrics_port,
        )
    except (ValueError, TypeError, OSError, ConnectionError) as e:
        print(f"pserver: {e}", file=sys.stderr)
        return 2
    except errors.Error as e:  # the shard could not start (e.g. its --recover DIR)
        print(f"pserver: shard {args.shard}: {e}", file=sys.stderr)
        return 1
    metrics = f", metrics on 127.0.0.1:{server.metrics_port}" if server.metrics_port else ""
    replayed = f", recovered ({server.replayed_records} log records)" if args.recover else ""
    print(
        f"pserver: shard {args.shard}/{args.num_shards}{source} serving on {server.address}"
        f"{metrics}{replayed}",
        flush=True,
    )
    while not stop.wait(0.5):
        pass
    target = None
    if args.checkpoint_on_exit is not None:
        target = args.checkpoint_on_exit or args.recover
    server.stop(args.drain_timeout, checkpoint=target)
    print(
        f"pserver: shard {args.shard} stopped" + (f", saved to {target}" if target else ""),
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
