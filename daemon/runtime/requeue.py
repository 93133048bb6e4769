"""When keys are decided again without a new event: the timers decisions ask for
(`Decision.requeue_at`) and the back-off of keys whose intents failed. Times are event times
(ms), as the fold's clock reads them.

Like client-go's delaying workqueue, a key waits at most once: a later request for a key
already due earlier is dropped, since the earlier decision asks again if it still needs to.
Keeping every request instead made the heap grow with every retry of every waiting key, and
the back-off check scanned all of it at every pass."""

from __future__ import annotations

import heapq
from collections.abc import Iterable


class Requeues:
    def __init__(self, first_ms: int, cap_ms: int) -> None:
        # A failing key waits first_ms, doubling up to cap_ms.
        self.first_ms, self.cap_ms = first_ms, cap_ms
        self._heap: list[tuple[int, str]] = []
        self._at: dict[str, int] = {}
        self._failures: dict[str, int] = {}
        # Keys whose intents failed -> until when they back off.
        self._until: dict[str, int] = {}

    def schedule(self, at: int, key: str) -> None:
        """Decide `key` again at `at` (unless it is already due by then)."""
        if self._at.get(key, at + 1) <= at:
            return
        self._at[key] = at
        heapq.heappush(self._heap, (at, key))

    def due(self, now: int) -> list[str]:
        """The keys whose time has come, each once, in time order."""
        found: list[str] = []
        heap, at = self._heap, self._at
        while heap and heap[0][0] <= now:
            when, key = heapq.heappop(heap)
            if at.get(key) == when:  # else superseded by an earlier time, already handed out
                del at[key]
                found.append(key)
        return found

    def next_at(self) -> int | None:
        """When the earliest key falls due (None: none waits)."""
        heap, at = self._heap, self._at
        while heap and at.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)  # superseded, or already handed out
        return heap[0][0] if heap else None

    def failed(self, key: str, now: int) -> int:
        """An intent of `key` failed: it backs off (first_ms, doubling to cap_ms) and is
        decided again when that ends. Returns the end."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay: int = self.first_ms * 2 ** min(failures - 1, 40)
        until = now + min(self.cap_ms, delay)
        self._until[key] = until
        self.schedule(until, key)
        return until

    def succeeded(self, key: str) -> None:
        self._failures.pop(key, None)
        self._until.pop(key, None)

    def backing_off(self, now: int) -> set[str]:
        """The keys still backing off at `now` (each is decided again when its wait ends).

        A key whose wait ended a whole cap ago without failing again is forgotten, so its next
        failure waits first_ms again, as a success would have it: a key whose object went
        while it backed off is decided to do nothing, and never succeeds."""
        until, cap = self._until, self.cap_ms
        for key in [key for key, end in until.items() if end + cap <= now]:
            del until[key]
            self._failures.pop(key, None)
        return {key for key, end in until.items() if end > now}

    def ready(self, keys: Iterable[str], now: int) -> set[str]:
        """`keys` less those still backing off, which are put back for when it ends."""
        found: set[str] = set()
        until = self._until
        for key in keys:
            end = until.get(key)
            if end is not None and end > now:
                self.schedule(end, key)
            else:
                found.add(key)
        return found

    def clear(self) -> None:
        self._heap.clear()
        self._at.clear()
        self._failures.clear()
        self._until.clear()
