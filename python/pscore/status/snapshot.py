"""One look at a running job through its store: each parameter-server shard's stats (asked of
the shard itself, twice `interval` apart for rates) and each rank's registration.

A shard that does not answer is reported "DOWN" with the reason; the others are still read."""

from __future__ import annotations

import json
import os
import socket
import time

from .. import _config, _ps, errors
from ..collectives import registration
from ..ps import discovery

__all__ = ["job_exists", "read_shards", "snapshot"]

_NETWORK_ERRORS = (errors.Error, ConnectionError, TimeoutError, OSError)
# Request types whose rate says nothing about the job: status's own.
_OWN_REQUESTS = ("stats",)


def job_exists(store, job_id: str) -> bool:
    return store.check([discovery.num_shards_key(job_id)]) or store.check(
        [registration.world_key(job_id)]
    )


def _client(job_id: str, num_shards: int, timeout: float) -> _ps.Client:
    opts = _ps.ClientOptions()
    opts.worker = -1  # an observer: counts in no sync round
    opts.job_id = job_id
    opts.auth_token = _config.auth_token()
    opts.timeout_ms = int(timeout * 1000)
    opts.connect_timeout_ms = int(timeout * 1000)
    return _ps.Client(opts, num_shards)


def _connect(client, store, job_id: str, shard: int, timeout: float) -> dict:
    """The shard's row: address and state "up", or "DOWN" / "unregistered" with the error."""
    row = {"shard": shard, "address": None, "state": "unregistered", "error": None, "stats": None}
    if not store.check([discovery.shard_key(job_id, shard)]):
        return row
    host, port, _ = discovery.read_address(store, job_id, shard, timeout)
    row.update(address=f"{host}:{port}", state="up")
    try:
        client.connect(shard, host, port, int(timeout * 1000))
    except _NETWORK_ERRORS as e:
        row.update(state="DOWN", error=str(e))
    return row


def _ask_stats(client, rows: list[dict], timeout: float) -> None:
    """Asks every shard still up for its stats (all at once); fills row["stats"] or marks the
    shard DOWN."""
    asked = {r["shard"]: client.stats(r["shard"]) for r in rows if r["state"] == "up"}
    for r in rows:
        work = asked.get(r["shard"])
        if work is None:
            continue
        try:
            if not work.wait(int(timeout * 1000)):
                raise errors.TimeoutError(f"no stats within {timeout:g} s")
            r["stats"] = json.loads(work.replies()[0])
        except _NETWORK_ERRORS as e:
            r.update(state="DOWN", error=str(e), stats=None)


def _rates(before: dict, after: dict, seconds: float) -> dict:
    def per_s(a, b):
        return max(0.0, (b - a) / seconds)

    by_type_before = before.get("requests_by_type", {})
    by_type = {
        kind: per_s(by_type_before.get(kind, 0), n)
        for kind, n in after.get("requests_by_type", {}).items()
        if kind not in _OWN_REQUESTS
    }
    return {
        "requests_per_s": sum(by_type.values()),
        "requests_by_type_per_s": by_type,
        "bytes_in_per_s": per_s(before.get("bytes_in", 0), after.get("bytes_in", 0)),
        "bytes_out_per_s": per_s(before.get("bytes_out", 0), after.get("bytes_out", 0)),
    }


def read_shards(store, job_id: str, interval: float, timeout: float) -> list[dict]:
    """A row per shard: address, state, stats (the shard's stats JSON) and, with interval > 0,
    rates over interval seconds (requests/s leaves out status's own stats requests)."""
    if not store.check([discovery.num_shards_key(job_id)]):
        return []
    num_shards = discovery.read_num_shards(store, job_id, timeout)
    client = _client(job_id, num_shards, timeout)
    rows = [_connect(client, store, job_id, s, timeout) for s in range(num_shards)]
    _ask_stats(client, rows, timeout)
    if interval > 0 and any(r["state"] == "up" for r in rows):
        first = {r["shard"]: (r["stats"], time.monotonic()) for r in rows if r["state"] == "up"}
        time.sleep(interval)
        _ask_stats(client, rows, timeout)
        for r in rows:
            if r["state"] == "up" and r["shard"] in first:
                stats, at = first[r["shard"]]
                r["rates"] = _rates(stats, r["stats"], time.monotonic() - at)
    for r in rows:
        if r["state"] == "up":
            r["connections"] = r["stats"].get("connections", 1) - 1  # not counting status's own
    return rows


def _with_liveness(ranks: list[dict]) -> list[dict]:
    """Marks "exited" a rank whose process ran on this host and is gone (other hosts' ranks
    cannot be checked from here)."""
    here = socket.gethostname()
    for r in ranks:
        if r.get("host") == here and r["state"] != "missing" and not _alive(r["pid"]):
            r["state"] = "exited"
    return ranks


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def snapshot(store, store_url: str, job_id: str, interval: float, timeout: float) -> dict:
    """Everything `pscore status` shows, as plain data (what --json prints)."""
    ranks = registration.read_ranks(store, job_id)
    return {
        "store": store_url,
        "job": job_id,
        "time": time.time(),
        "interval_s": interval,
        "shards": read_shards(store, job_id, interval, timeout),
        "ranks": [] if ranks is None else _with_liveness(ranks),
    }
