"""Exception classes raised by pscore; each subclasses what users already catch."""

__all__ = ["Error", "NetworkError", "StoreError", "TimeoutError"]


class Error(RuntimeError):
    """Base of pscore's failures (bad arguments raise ValueError / TypeError instead)."""


class TimeoutError(Error, TimeoutError):
    """A blocking call ran past its timeout; the message names the peer and the operation."""


class NetworkError(Error, ConnectionError):
    """A peer died, closed its connection or sent bytes that are not a pscore frame."""


class StoreError(Error):
    """A store refused or failed an operation."""
