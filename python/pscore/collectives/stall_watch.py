"""The stall inspector's view of a process group (pscore.stall): the watchdog publishes how many
collectives this rank has entered under the group's store (stall/entered/<rank>, only when it
changed, so the collectives themselves never touch the store), and once this rank's running
collective has waited past the threshold, reads the other ranks' counts and logs the ranks that
have not reached it."""

from __future__ import annotations

from .. import _enums, stall

__all__ = ["GroupWatch"]


def _key(rank: int) -> str:
    return f"stall/entered/{rank}"


class GroupWatch:
    """Held by its ProcessGroup (pscore.collectives.group); the watchdog holds it weakly."""

    def __init__(self, native, store, name: str, timeout_s: float):
        self.native = native
        self.store = store
        self.name = name
        self.threshold_s = stall.threshold(timeout_s)
        self.published = 0
        self.store_error: str | None = None  # publishing stops once the store is gone
        stall.register(self)

    def publish(self) -> None:
        entered = self.native.progress().entered
        if entered == self.published or self.store_error is not None:
            return
        try:
            self.store.add(_key(self.native.rank), entered - self.published)
        except Exception as e:  # noqa: BLE001 - the store's host may have left: reports end
            self.store_error = str(e)
            return
        self.published = entered

    def in_flight(self) -> list[stall.InFlight]:
        p = self.native.progress()
        if not p.running:
            return []
        seq = p.entered - 1
        what = self._what(p, seq)
        peer = f", waiting on rank {p.waiting_on}" if p.waiting_on >= 0 else ""
        return [
            stall.InFlight(
                key=(id(self), seq),
                waited_s=p.elapsed_us / 1e6,
                threshold_s=self.threshold_s,
                line=f"{what}: running {p.elapsed_us / 1e6:.1f} s{peer}",
                report=lambda: self._report(seq, what),
            )
        ]

    def _what(self, p, seq: int) -> str:
        group = "" if self.name == "world" else f" of group {self.name!r}"
        return (
            f"rank {self.native.rank}{group} {p.kind} #{seq} "
            f"({stall.format_bytes(p.nbytes)}, {_enums.name_of(p.dtype)})"
        )

    def _report(self, seq: int, what: str) -> str | None:
        """Which ranks have not entered collective #seq, from their published counts (the
        watchdog has just published this rank's)."""
        if self.store_error is not None:
            return (
                f"pscore: {what} has stalled; the other ranks' progress is unknown "
                f"(store: {self.store_error})"
            )
        me = self.native.rank
        entered = {r: self.store.add(_key(r), 0) for r in range(self.native.size) if r != me}
        p = self.native.progress()
        if not p.running or p.entered != seq + 1:
            return None  # it finished while the others were asked
        waited = f"{what} has waited {p.elapsed_us / 1e6:.1f} s"
        late = sorted(r for r, n in entered.items() if n < seq + 1)
        if not late:
            peer = f" rank {p.waiting_on}" if p.waiting_on >= 0 else " a peer"
            return f"pscore: {waited}; every rank has reached it, waiting on{peer}'s data"
        lasts = {entered[r] - 1 for r in late}
        if len(lasts) == 1:
            last = lasts.pop()
            where = f"last at #{last}" if last >= 0 else "none entered yet"
            verb = "has" if len(late) == 1 else "have"
            return (
                f"pscore: {waited}; {stall.format_ranks('rank', late)} {verb} not arrived ({where})"
            )
        each = ", ".join(
            f"rank {r} ({f'last at #{entered[r] - 1}' if entered[r] else 'none entered yet'})"
            for r in late
        )
        return f"pscore: {waited}; {each} have not arrived"
