"""Connects the ranks of a group through a store: picks shared memory when every rank is on this
host (and can map the others' segments), TCP otherwise, and returns the connected transport with
whether the group's ranks fit on the cores of every rank's host (the core's algorithm choices
follow it, and every rank must choose alike, whatever its host's cores).

Keys live under the group's prefix: host/<rank>, shm/<rank>, shm_ok/<rank>, tcp/<rank>, fit/<rank>
and done/<rank>.

Global rank 0 usually hosts the store (pscore-run, tcp://, env:// outside torchrun), and its
process may leave as soon as it has connected (a hello-world that destroys the group and exits).
So the rendezvous ends with every rank posting done/<rank> after its last read, and the store's
host returns only once all have: from then on no rank needs the store to finish connecting. The
host is the member that is global rank 0 (connect's `hosts_store`), or, for a new_group without
it, global rank 0 waiting outside the group (wait_until_done).
"""

from __future__ import annotations

import contextlib
import socket
import time
import warnings
from typing import NamedTuple

from .. import _C, _config, stall
from ..errors import TimeoutError as PscoreTimeoutError

__all__ = ["Connected", "advertised_host", "connect", "host_identity", "wait_until_done"]


class Connected(NamedTuple):
    transport: object
    ranks_fit_cores: bool  # as every rank found on its host (_C.ranks_fit_cores of the world)


def host_identity() -> str:
    """Identifies this machine (and boot), so ranks can tell whether they share /dev/shm."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = "?"
    return f"{socket.gethostname()}|{boot}"


def advertised_host(master_addr: str | None) -> str:
    """The address peers should dial: PSCORE_HOST if set, loopback when the master is local,
    else the local address of the route towards the master."""
    explicit = _config.HOST.get()
    if explicit:
        return explicit
    if not master_addr or master_addr in ("localhost", "::1") or master_addr.startswith("127."):
        return "127.0.0.1"
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect((master_addr, 9))
        return probe.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())
    finally:
        probe.close()


def _wait_all(store, prefix: str, who: str, world: int, timeout: float) -> list[str]:
    """Waits for prefix/<r> of every rank r; returns those keys."""
    keys = [f"{prefix}/{r}" for r in range(world)]

    def report(waited: float) -> str | None:
        missing = [r for r, k in enumerate(keys) if not store.check([k])]
        if not missing:
            return None
        return (
            f"pscore: {who}: rendezvous has waited {waited:.1f} s for {prefix}/<rank>; "
            f"{stall.format_ranks('rank', missing)} {'has' if len(missing) == 1 else 'have'} "
            "not registered yet"
        )

    try:
        with stall.waiting(f"{who}: rendezvous wait for {prefix}/<rank>", timeout, report):
            store.wait(keys, timeout)
    except (PscoreTimeoutError, TimeoutError) as e:
        missing = [k for k in keys if not store.check([k])]
        raise PscoreTimeoutError(
            f"{who}: rendezvous timed out after {timeout:.0f} s waiting for "
            f"{', '.join(missing) or 'keys'} ({e})"
        ) from None
    return keys


def _gather(store, prefix: str, rank: int, world: int, value: str, timeout: float) -> list[str]:
    store.set(f"{prefix}/{rank}", value)
    keys = _wait_all(store, prefix, f"rank {rank}", world, timeout)
    return [store.get(k).decode() for k in keys]


def _finish(store, rank: int, world: int, timeout: float, hosts_store: bool) -> None:
    """This rank is done with the store; its host waits until every rank is (the module doc)."""
    if hosts_store:
        store.set(f"done/{rank}", "1")
        wait_until_done(store, world, timeout, f"rank {rank}")
        return
    # The host may leave the moment it sees this key, before its reply reaches us: this rank is
    # connected, and a host that died instead shows at the first collective.
    with contextlib.suppress(ConnectionError):
        store.set(f"done/{rank}", "1")


def wait_until_done(store, world: int, timeout: float, who: str) -> None:
    """Returns once each of the group's `world` ranks has finished its rendezvous."""
    _wait_all(store, "done", who, world, timeout)


def _shm_sizes() -> dict:
    """The ShmTransport's sizes from the environment; an unset single-copy threshold keeps the
    core's default (csrc/transport/shm/shm_channel.h: SingleCopyBytes)."""
    sizes = dict(
        ring_bytes=_config.SHM_RING_BYTES.get(),
        single_copy_bytes=_config.SHM_SINGLE_COPY_BYTES.get(),
        single_copy_reduce_bytes=_config.SHM_SINGLE_COPY_REDUCE_BYTES.get(),
    )
    return {k: v for k, v in sizes.items() if v is not None}


def _try_shm(store, rank, world, job_id, timeout, sizes):
    """(a connected ShmTransport, "") or (None, why not) when some rank could not make or map
    the segments."""
    why = ""
    try:
        t = _C.ShmTransport(rank, world, job_id, **sizes)
        mine = f"{t.segment_name}|{t.token}"
    except Exception as e:  # noqa: BLE001 - /dev/shm unusable: fall back, but every rank must vote
        t, mine, why = None, "-", str(e)
    entries = _gather(store, "shm", rank, world, mine, timeout)
    ok = t is not None and all(e != "-" for e in entries)
    if ok:
        names = [e.split("|")[0] for e in entries]
        tokens = [int(e.split("|")[1]) for e in entries]
        try:
            t.connect(names, tokens)
        except ConnectionError as e:
            ok, why = False, str(e)
    votes = _gather(store, "shm_ok", rank, world, "1" if ok else "0", timeout)
    if t is not None:
        t.unlink()  # every rank has mapped (or given up on) every segment by now
    if all(v == "1" for v in votes):
        return t, ""
    failed = [r for r, v in enumerate(votes) if v != "1"]
    return None, why or f"rank(s) {failed} could not (ranks on several hosts?)"


def _tcp(store, rank, world, job_id, timeout, master_addr):
    host = advertised_host(master_addr)
    options = {"buffer_bytes": _config.SOCKET_BUFFER_BYTES.get()}
    if _config.EPOLL_MIN_FDS.get() is not None:
        options["epoll_min_fds"] = _config.EPOLL_MIN_FDS.get()
    t = _C.TcpTransport(rank, world, host=host, port=0, job_id=job_id, **options)
    entries = _gather(store, "tcp", rank, world, f"{host}:{t.port}", timeout)
    hosts = [e.rsplit(":", 1)[0] for e in entries]
    ports = [int(e.rsplit(":", 1)[1]) for e in entries]
    t.connect(hosts, ports, int(timeout * 1000))
    return t


def connect(
    store,
    rank: int,
    world: int,
    timeout: float,
    job_id: str,
    master_addr=None,
    hosts_store: bool | None = None,
):
    """Builds the transport of one group (a Connected); `store` should already be prefixed for the
    group. `hosts_store`: whether this rank's process serves the store (default: rank 0)."""
    choice = _config.TRANSPORT.get()
    # Read before the store is touched: a malformed size is the user's error to see on every
    # rank, not a reason to fall back to TCP.
    sizes = _shm_sizes() if choice != "tcp" else {}
    deadline = time.monotonic() + timeout

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    t = None
    if choice != "tcp":
        hosts = _gather(store, "host", rank, world, host_identity(), timeout)
        same_host = all(h == hosts[0] for h in hosts)
        why = "the ranks are on several hosts"
        if same_host:
            t, why = _try_shm(store, rank, world, job_id, left(), sizes)
        if t is None and choice == "shm":
            raise RuntimeError(
                f"rank {rank}: {_config.TRANSPORT.name}=shm but not every rank could make or map "
                f"the others' shared memory: {why}"
            )
        if t is None and same_host and rank == 0:
            warnings.warn(
                f"pscore: the {world} ranks share this host, but not every rank could make or "
                f"map the others' shared memory, so they connect over TCP (slower): {why}",
                RuntimeWarning,
                stacklevel=2,
            )
    if t is None:
        t = _tcp(store, rank, world, job_id, left(), master_addr)
    fits = _gather(store, "fit", rank, world, str(int(_C.ranks_fit_cores(world))), left())
    _finish(store, rank, world, left(), rank == 0 if hosts_store is None else hosts_store)
    return Connected(t, all(f == "1" for f in fits))
