"""The C++ stores of ``pscore._store``: ``TCPStore`` (a server in rank 0, clients elsewhere) and
``HashStore`` (in-process). Blocking calls release the GIL and raise
[pscore.errors.TimeoutError][] naming the keys still missing.
"""

from __future__ import annotations

import math

from .. import _config, _store
from .base import Store, Timeout, to_ms, to_seconds

__all__ = ["HashStore", "TCPStore"]


class _CppStore(Store):
    """A Store backed by a pscore._store object (the C++ implementation)."""

    _impl: _store.Store

    def _set(self, key: str, value: bytes) -> None:
        self._impl.set(key, value)

    def _get(self, key: str) -> bytes:
        return self._impl.get(key)

    def _add(self, key: str, amount: int) -> int:
        return self._impl.add(key, amount)

    def _compare_set(self, key: str, expected: bytes, desired: bytes) -> bytes:
        return self._impl.compare_set(key, expected, desired)

    def _wait(self, keys: list[str], timeout_s: float) -> None:
        self._impl.wait(keys, to_ms(timeout_s))

    def _check(self, keys: list[str]) -> bool:
        return self._impl.check(keys)

    def _delete_key(self, key: str) -> bool:
        return self._impl.delete_key(key)

    def _num_keys(self) -> int:
        return self._impl.num_keys()

    def _get_timeout(self) -> float:
        ms = self._impl.timeout_ms
        return math.inf if ms < 0 else ms / 1000.0

    def _set_timeout(self, seconds: float) -> None:
        self._impl.timeout_ms = to_ms(seconds)


class HashStore(_CppStore):
    """An in-process store: threads of one process share it (ranks as threads, tests)."""

    def __init__(self, timeout: Timeout = 30.0):
        self._impl = _store.HashStore(to_ms(to_seconds(timeout)))

    def __repr__(self) -> str:
        return "HashStore()"


def _check_port(port: object) -> int:
    if isinstance(port, bool) or not isinstance(port, int):
        raise TypeError(f"TCPStore port must be an int, not {type(port).__name__}")
    if not 0 <= port <= 65535:
        raise ValueError(f"TCPStore port must be in 0..65535, got {port}")
    return port


def _check_optional(name: str, value: object, kind: type) -> None:
    if value is not None and not isinstance(value, kind):
        raise TypeError(
            f"TCPStore {name} must be a {kind.__name__} or None, not {type(value).__name__}"
        )


def _check_world_size(world_size: object) -> int | None:
    if world_size is None:
        return None
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int or None, got {world_size!r}")
    return world_size


class TCPStore(_CppStore):
    """torch.distributed.TCPStore: the master (``is_master=True``) runs the server thread and
    binds ``host:port`` (port 0 picks a free one, see ``.port``; a busy port raises
    pscore.errors.NetworkError); everyone connects, retrying until ``timeout`` while the master
    is not up. With ``world_size`` and ``wait_for_workers`` the master's constructor returns once
    ``world_size`` instances (itself included) have connected.

    ``bind_host`` (master only) overrides the bind address: by default ``host`` when it is a
    loopback address, otherwise every interface.

    Security (docs/security.md): with a shared secret - ``auth_token``, or by default
    ``PSCORE_AUTH_TOKEN`` / the file named by ``PSCORE_AUTH_TOKEN_FILE`` - every connection runs
    a mutual HMAC-SHA256 challenge-response bound to ``job_id`` (default ``PSCORE_JOB_ID`` or
    ``"pscore"``); a client whose token differs raises pscore.errors.NetworkError
    "authentication with store at host:port failed (wrong PSCORE_AUTH_TOKEN?)". A master whose
    bind address other hosts can reach needs a token, or ``insecure=True`` (default
    ``PSCORE_INSECURE=1``); otherwise it raises ValueError."""

    def __init__(
        self,
        host: str,
        port: int,
        world_size: int | None = None,
        is_master: bool = False,
        timeout: Timeout = 30.0,
        wait_for_workers: bool = False,
        *,
        bind_host: str | None = None,
        auth_token: str | None = None,
        insecure: bool | None = None,
        job_id: str | None = None,
    ):
        if not isinstance(host, str) or not host:
            raise ValueError(f"TCPStore host must be a non-empty str, got {host!r}")
        _check_port(port)
        if port == 0 and not is_master:
            raise ValueError("TCPStore: a client needs the master's port; 0 is for the master")
        self._world_size = _check_world_size(world_size)
        _check_optional("auth_token", auth_token, str)
        _check_optional("insecure", insecure, bool)
        _check_optional("job_id", job_id, str)
        self._impl = _store.TCPStore(
            host,
            port,
            is_master=bool(is_master),
            world_size=-1 if world_size is None else world_size,
            wait_for_workers=bool(wait_for_workers),
            timeout_ms=to_ms(to_seconds(timeout)),
            bind_host=bind_host,
            auth_token=auth_token,  # None: PSCORE_AUTH_TOKEN / PSCORE_AUTH_TOKEN_FILE
            insecure=insecure,  # None: PSCORE_INSECURE
            job_id=_config.JOB_ID.get() if job_id is None else job_id,
        )

    @property
    def host(self) -> str:
        return self._impl.host

    @property
    def port(self) -> int:
        """The server's port (the one picked when the master asked for port 0)."""
        return self._impl.port

    @property
    def is_master(self) -> bool:
        return self._impl.is_master

    @property
    def world_size(self) -> int | None:
        return self._world_size

    @property
    def dropped_connections(self) -> int:
        """Master only: connections its server dropped for breaking the protocol."""
        return self._impl.dropped_connections

    @property
    def authenticated(self) -> bool:
        """True when this store's connections authenticate with a token."""
        return self._impl.authenticated

    @property
    def auth_failures(self) -> int:
        """Master only: connections its server refused in the handshake (no, wrong or unwanted
        token, another job)."""
        return self._impl.auth_failures

    def __repr__(self) -> str:
        return f"TCPStore(host={self.host!r}, port={self.port}, is_master={self.is_master})"
