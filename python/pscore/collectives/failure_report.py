"""Which rank failed first: each rank that fails posts its account (its error) to the group's
store, and a failing rank follows the accounts to the rank that posted none.

Over TCP a failing rank shuts its connections, so its peers see "connection closed by" that
rank, not by the one that died: with rank 2 killed, rank 1 may read "closed by rank 0", whose
own account says "closed by rank 3", whose says "closed by rank 2". Each account names the peer
its rank lost; following them ends at a rank that posted nothing within REPORT_WAIT_S, the one
that died (or hangs), and the error names it first:

    rank 2 died or hangs (...): rank 1 <- rank 0: ... [rank 0 reported: ...; rank 3 reported: ...]

A rank whose own message already blames the silent rank keeps its form and says so at the end.
When the account that blames the silent rank timed out (the rank hangs: SIGSTOP, a deadlock),
every rank's error is a TimeoutError, whatever its own peer did (closed its connection).
Bounded in time: an unreachable store or a long trail adds at most REPORT_BUDGET_S (+ JOIN_SLACK_S).

When the store itself is unreachable (it refuses this rank's account, or has not taken it
within the budget) and a rank of the group serves it (pscore-run, env:// and tcp:// put it in
rank 0's process), that rank died or hangs, and the error names it first:

    rank 0 (the store's host) is unreachable: it died or hangs: rank 3 <- rank 1: ...
"""

from __future__ import annotations

import atexit
import re
import threading
import time

from ..errors import NetworkError
from ..errors import TimeoutError as PscoreTimeoutError

__all__ = ["explain"]

REPORT_WAIT_S = 0.75  # how long a rank's account may take before the rank counts as silent
JOIN_SLACK_S = 0.25  # for the trail's last wait, which ends at the deadline
REPORT_BUDGET_S = 1.5  # all the time explaining a failure may add

EXIT_WAIT_S = 1.5  # how long exit waits for reports still in a store call

# Report threads still in a store call once explain() returned (a slow store, or one that went
# away mid-call). Exit waits for them: a daemon thread that comes back from a torch store call
# into a finalizing interpreter aborts the process ("terminate called without an active
# exception"), as pscore.torch_backend's completer explains.
_unfinished: set[threading.Thread] = set()


def _wait_for_unfinished_reports() -> None:
    deadline = time.monotonic() + EXIT_WAIT_S
    for worker in list(_unfinished):
        worker.join(max(0.0, deadline - time.monotonic()))


atexit.register(_wait_for_unfinished_reports)

_TIMED_OUT = " timed out after "  # what every pscore TimeoutError of a transfer says
_BLAMED_RANK = re.compile(r"(?:closed by|<- |-> )rank (\d+)")


def _blamed_rank(message: str) -> int | None:
    """The peer a failure message blames: the first "<- rank N", "-> rank N", "closed by rank N"."""
    found = _BLAMED_RANK.search(message)
    return int(found.group(1)) if found else None


class _Trail:
    """The accounts read so far, and the rank at the end of the trail that posted none."""

    def __init__(self):
        self.accounts: list[tuple[int, str]] = []
        self.silent: int | None = None
        self.posted = False  # whether the store took this rank's account


def _follow(store, rank: int, message: str, trail: _Trail, deadline: float) -> None:
    store.set(f"abort/{rank}", message)
    store.check([f"abort/{rank}"])  # a round trip: torch's TCPStore does not answer a set
    trail.posted = True
    seen = {rank}
    peer = _blamed_rank(message)
    while peer is not None and peer not in seen:
        seen.add(peer)
        wait_s = min(REPORT_WAIT_S, deadline - time.monotonic())
        # Silent: a peer that posted nothing in a full wait, or one at the end of a trail of
        # accounts when the budget or the store runs out (another rank's account blames it).
        if wait_s <= 0:
            if trail.accounts:
                trail.silent = peer
            return
        try:
            store.wait([f"abort/{peer}"], wait_s)
        except (PscoreTimeoutError, TimeoutError):
            if wait_s == REPORT_WAIT_S or trail.accounts:
                trail.silent = peer
            return
        except Exception:
            if trail.accounts:  # the store's host left after its own report; trail ends here
                trail.silent = peer
            raise
        account = store.get(f"abort/{peer}").decode()
        trail.accounts.append((peer, account))
        peer = _blamed_rank(account)


def _follow_quietly(store, rank: int, message: str, trail: _Trail, deadline: float) -> None:
    try:
        _follow(store, rank, message, trail, deadline)
    except Exception:  # noqa: BLE001, S110 - the store failed too: explain with what was read
        pass
    finally:
        _unfinished.discard(threading.current_thread())


def _names(store_host: str, rank: int | None) -> bool:
    """Whether `store_host` ("rank R" or "rank R (global rank G)") is group rank `rank`."""
    return rank is not None and (
        store_host == f"rank {rank}" or store_host.startswith(f"rank {rank} (")
    )


def _store_unreachable(exc: BaseException, text: str, store_host: str | None) -> BaseException:
    """`exc` for a store that is gone: its host named first when known."""
    if store_host is None:
        return type(exc)(f"{text} [the store is unreachable: no other rank's account was read]")
    if _names(store_host, _blamed_rank(str(exc))):
        return type(exc)(
            f"{text} [{store_host}, the store's host, is unreachable too: it died or hangs]"
        )
    return type(exc)(f"{store_host} (the store's host) is unreachable: it died or hangs: {text}")


def explain(store, rank: int, exc: BaseException, store_host: str | None = None) -> BaseException:
    """`exc` (a network failure or timeout of this rank) with the rank that failed first named
    at the front and the accounts that led there appended; `exc` itself when there is nothing
    to add. `store_host` names the group's rank whose process serves the store ("rank 0"), if
    any. A store lost after taking this rank's account blames no one: its host may have left
    after reporting a failure of its own."""
    if store is None or not isinstance(exc, (NetworkError, PscoreTimeoutError)):
        return exc
    trail = _Trail()
    deadline = time.monotonic() + REPORT_BUDGET_S
    worker = threading.Thread(
        target=_follow_quietly, args=(store, rank, str(exc), trail, deadline), daemon=True
    )
    _unfinished.add(worker)
    worker.start()
    worker.join(REPORT_BUDGET_S + JOIN_SLACK_S)  # its waits end by the deadline
    silent, accounts = trail.silent, list(trail.accounts)
    text = str(exc)
    if accounts:
        text += " [" + "; ".join(f"rank {r} reported: {a}" for r, a in accounts) + "]"
    if not trail.posted:  # the store refused this rank's account, or gave no answer in time
        return _store_unreachable(exc, text, store_host)
    if silent is None:
        return type(exc)(text) if accounts else exc
    kind = _kind_of_silence(exc, accounts)
    if accounts:  # the rank this one blames is not the one that failed: name that one first
        return kind(f"rank {silent} died or hangs (it posted no account): {text}")
    return kind(f"{text} [rank {silent} posted no account: it died or hangs]")


def _kind_of_silence(exc: BaseException, accounts: list[tuple[int, str]]) -> type:
    """TimeoutError when the silent rank hangs: the account that blames it (the last one read,
    or this rank's own) timed out waiting for it. A dead rank's peers see its connections
    close instead, and `exc`'s class stays."""
    blaming = accounts[-1][1] if accounts else str(exc)
    return PscoreTimeoutError if _TIMED_OUT in blaming else type(exc)
