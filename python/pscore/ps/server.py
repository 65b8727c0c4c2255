"""``pscore.PServer``: one parameter-server shard served from this process (tests, notebooks);
the ``pserver`` command (pscore.ps.pserver) runs one as a process.

Port 0 picks a free port and publishes it in the store, where workers (``pscore.PSClient(
store=...)``) find it. ``recover=DIR`` keeps a write-ahead log and snapshots in DIR and, on
start, rebuilds the shard from them; a snapshot (which truncates the log) is taken whenever the
log passes ``snapshot_log_mb`` or ``snapshot_log_ratio`` times the last snapshot's size, and
every ``checkpoint_every`` seconds, so the directory stays bounded.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from .. import _config, _ps
from ..cluster.spec import advertised_host
from . import discovery, environment
from .client import REQUEST_TIMEOUT_S
from .metrics import MetricsServer
from .stall_watch import ServerWatch

__all__ = ["SNAPSHOT_LOG_MB", "SNAPSHOT_LOG_RATIO", "PServer"]

# The default snapshot policy of a recoverable shard (see PServer).
SNAPSHOT_LOG_MB = 64.0
SNAPSHOT_LOG_RATIO = 2.0

if TYPE_CHECKING:
    from typing_extensions import Self


class PServer:
    """One parameter-server shard served by C++ threads in this process (no GIL held while
    serving). Binds loopback unless `host` says otherwise; an address other hosts can reach needs
    an auth token (``auth_token``, else PSCORE_AUTH_TOKEN or the file PSCORE_AUTH_TOKEN_FILE
    names; workers prove they know it with the HMAC challenge-response of docs/wire.md) or
    ``insecure=True`` (default: PSCORE_INSECURE). Dropped connections are logged at most once
    per peer address per ``log_quiet`` seconds.

    ``recover=DIR`` keeps a write-ahead log and snapshots in DIR. A snapshot, which truncates
    the log, is written when the log passes max(``snapshot_log_mb``, ``snapshot_log_ratio`` x
    the last snapshot's size) and, with ``checkpoint_every`` (seconds), that often while the log
    holds records. Pushes and other updates wait while the log is at twice that bound until the
    snapshot is on disk, so DIR stays under about the snapshot plus twice the bound.
    ``snapshot_log_mb=0`` turns the size trigger off."""

    def __init__(
        self,
        shard: int = 0,
        num_shards: int = 1,
        num_workers: int = 1,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        store=None,
        job_id: str | None = None,
        auth_token: str | None = None,
        insecure: bool | None = None,
        recover: str | None = None,
        checkpoint_every: float | None = None,
        snapshot_log_mb: float = SNAPSHOT_LOG_MB,
        snapshot_log_ratio: float = SNAPSHOT_LOG_RATIO,
        fsync_log: bool = False,
        threads: int = 2,
        max_frame_bytes: int = 1 << 30,
        max_queued_requests: int = 32,
        min_part_bytes: int = 64 * 1024,
        metrics_port: int | None = None,
        log_connections: bool = True,
        log_quiet: float = 60.0,
    ):
        for name, v in (
            ("shard", shard),
            ("num_shards", num_shards),
            ("num_workers", num_workers),
            ("port", port),
            ("threads", threads),
        ):
            if isinstance(v, bool) or not isinstance(v, int):
                raise TypeError(f"{name} must be an int, not {type(v).__name__}")
        for name, v in (("port", port), ("metrics_port", metrics_port)):
            if v is not None and not 0 <= v <= 65535:
                raise ValueError(f"{name} {v} is outside 0..65535")
        if not max_frame_bytes >= 1:
            raise ValueError(f"max_frame_bytes must be >= 1, got {max_frame_bytes}")
        if checkpoint_every and not recover:
            raise ValueError("checkpoint_every needs recover= (the snapshot directory)")
        for name, v in (
            ("checkpoint_every", checkpoint_every or 0),
            ("snapshot_log_mb", snapshot_log_mb),
            ("snapshot_log_ratio", snapshot_log_ratio),
        ):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0:
                raise ValueError(f"{name} must be a number >= 0, got {v!r}")
        o = _ps.ServerOptions()
        o.host, o.port, o.shard, o.num_shards, o.num_workers = (
            host,
            port,
            shard,
            num_shards,
            num_workers,
        )
        o.job_id = environment.job_id() if job_id is None else job_id
        # None: PSCORE_AUTH_TOKEN / PSCORE_AUTH_TOKEN_FILE and PSCORE_INSECURE, as for the store
        o.auth_token = _config.auth_token() if auth_token is None else auth_token
        o.insecure = _config.insecure() if insecure is None else bool(insecure)
        o.recover_dir = os.path.abspath(recover) if recover else ""
        o.fsync_log = bool(fsync_log)
        o.snapshots.every_ms = int(float(checkpoint_every or 0) * 1000)
        o.snapshots.log_min_bytes = int(float(snapshot_log_mb) * (1 << 20))
        o.snapshots.log_ratio = float(snapshot_log_ratio)
        o.num_threads = threads
        o.max_frame_bytes = int(max_frame_bytes)
        o.max_queued_requests = int(max_queued_requests)
        o.min_part_bytes = int(min_part_bytes)
        o.log_connections = bool(log_connections)
        o.log_quiet_ms = int(float(log_quiet) * 1000)
        self._opts = o
        self._cpp = _ps.Server(o)
        self._cpp.start()
        # Reports rounds waiting past half the workers' default request timeout.
        self._stall_watch = ServerWatch(self._cpp, shard, REQUEST_TIMEOUT_S)
        self._store = store
        self._metrics = None
        try:
            if metrics_port is not None:
                try:
                    self._metrics = MetricsServer(self._cpp.stats_json, metrics_port)
                except OSError as e:
                    raise OSError(
                        e.errno, f"cannot serve metrics on 127.0.0.1:{metrics_port}: {e.strerror}"
                    ) from None
            if store is not None:
                discovery.publish(
                    store, o.job_id, shard, num_shards, host, self.port, self._cpp.incarnation
                )
        except BaseException:
            self.stop(0)
            raise

    @property
    def port(self) -> int:
        return self._cpp.port

    @property
    def host(self) -> str:
        return self._opts.host

    @property
    def address(self) -> str:
        return f"{advertised_host(self._opts.host)}:{self.port}"

    @property
    def shard(self) -> int:
        return self._opts.shard

    @property
    def metrics_port(self) -> int | None:
        return self._metrics.port if self._metrics else None

    @property
    def replayed_records(self) -> int:
        """Write-ahead log records replayed when this shard recovered."""
        return self._cpp.replayed_records

    @property
    def snapshots_written(self) -> int:
        """Snapshots the snapshot policy has written into the recover directory."""
        return self._cpp.snapshots_written

    @property
    def running(self) -> bool:
        return self._cpp.running

    def stats(self) -> dict:
        return json.loads(self._cpp.stats_json())

    def save(self, path: str) -> None:
        """Writes this shard to path/shard-IIIII-of-NNNNN.safetensors (zero-padded; atomically)."""
        self._cpp.save(os.path.abspath(path))

    def stop(self, drain_timeout: float = 10.0, checkpoint: str | None = None) -> None:
        """Stops accepting, lets queued requests finish and replies flush (at most
        drain_timeout seconds), closes connections and waits for a snapshot being written (a
        server started on the same directory next must not race it; pscore.TimeoutError after
        two minutes of a stuck disk); then writes `checkpoint` if given."""
        try:
            self._cpp.stop(int(max(0.0, drain_timeout) * 1000))
        finally:
            if self._metrics:
                self._metrics.close()
                self._metrics = None
        if checkpoint:
            self._cpp.save(os.path.abspath(checkpoint))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop(0)

    def __repr__(self) -> str:
        o = self._opts
        return f"PServer(shard {o.shard}/{o.num_shards}, {self.address})"
