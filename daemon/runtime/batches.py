"""Which owners marked only by their objects' changes are decided now, and which wait out
their reconciler's batch window (`daemon.controllers.base.Batching`). Times are event times
(ms), as the fold's clock reads them.

A key is held only while a decision of it is younger than its window: the first pod to move
after a quiet spell is decided at once, and a burst costs one decision per window."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from daemon.controllers.base import Batching, Reconciler


def windows(reconcilers: Sequence[Reconciler]) -> dict[str, int]:
    """Kind -> batch window (ms), for the kinds every reconciler of which batches."""
    asked: dict[str, list[int]] = {}
    for reconciler in reconcilers:
        if isinstance(reconciler, Batching):
            for kind, ms in reconciler.batch_windows.items():
                asked.setdefault(kind, []).append(ms)
    return {
        kind: min(ms)
        for kind, ms in asked.items()
        if min(ms) > 0 and len(ms) == sum(kind in r.kinds for r in reconcilers)
    }


class Batches:
    def __init__(self, windows: Mapping[str, int]) -> None:
        self._windows = dict(windows)
        # Key -> when it was last decided; insertion order is time order (`decided` moves a
        # key to the end), so the expired ones are always at the front.
        self._decided: dict[str, int] = {}

    def held(self, owners: Iterable[str], now: int) -> dict[str, int]:
        """Of `owners`, those to decide later: key -> when its window ends."""
        if not self._windows:
            return {}
        decided, found = self._decided, {}
        for key in owners:
            at = decided.get(key)
            if at is None:
                continue
            end = at + self._windows[key.split("/", 1)[0]]
            if end > now:
                found[key] = end
        return found

    def decided(self, keys: Iterable[str], now: int) -> None:
        """`keys` were decided at `now`; forget the decisions whose windows have all ended."""
        windows, decided = self._windows, self._decided
        if not windows:
            return
        for key in keys:
            if key.split("/", 1)[0] in windows:
                decided.pop(key, None)
                decided[key] = now
        longest = max(windows.values())
        expired = []
        for key, at in decided.items():
            if at + longest > now:
                break
            expired.append(key)
        for key in expired:
            del decided[key]

    def clear(self) -> None:
        self._decided.clear()
