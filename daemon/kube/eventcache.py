"""client-go's EventCorrelator: which Kubernetes Events to write, which to fold into an Event
already written, and which to drop.

For each Event, in client-go's order:

1. *Aggregation.* Events of one object, type and reason that differ only by message are
   similar; once 10 distinct messages are seen with no gap of more than 10 minutes, the next
   ones become one Event whose message is ``(combined from similar events): MESSAGE``.
2. *Counting.* The same Event again (object, type, reason and message, or the same aggregate)
   is a PATCH of the one already written: `count` + 1 and a new `lastTimestamp`.
3. *Spam filter.* Each object has a token bucket of 25 Events refilled at one per 5 minutes;
   an Event (or a count) beyond it is dropped.

Every cache holds the 4096 keys used last. Time is passed in (seconds), so that the filter
and the windows can be tested without a clock.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final, Generic, TypeVar

import msgspec

from daemon.kube.notes import EventType, Involved

CACHE_ENTRIES: Final = 4096
SIMILAR_MAX: Final = 10
SIMILAR_WINDOW_SECONDS: Final = 600.0
SPAM_BURST: Final = 25
SPAM_REFILL_PER_SECOND: Final = 1 / 300
COMBINED: Final = "(combined from similar events): "

K = TypeVar("K")
V = TypeVar("V")


class _Lru(Generic[K, V]):
    """A mapping that keeps the `size` keys used last."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class Occurrence(msgspec.Struct, frozen=True, gc=False):
    """An Event to write about `about`."""

    about: Involved
    type: EventType
    reason: str
    message: str


class Write(msgspec.Struct, frozen=True, gc=False):
    """What to send: a new Event named `name` (`patch` false), or a patch of the Event of that
    name already written, to `count` and `last`."""

    name: str
    namespace: str
    message: str
    count: int
    first: float
    last: float
    patch: bool


class _Similar(msgspec.Struct, gc=False):
    messages: set[str]
    last: float


class _Written(msgspec.Struct, frozen=True, gc=False):
    name: str
    count: int
    first: float


class _Bucket(msgspec.Struct, gc=False):
    tokens: float
    at: float


class Correlator:
    def __init__(
        self,
        *,
        entries: int = CACHE_ENTRIES,
        burst: int = SPAM_BURST,
        refill: float = SPAM_REFILL_PER_SECOND,
        similar_max: int = SIMILAR_MAX,
        similar_window: float = SIMILAR_WINDOW_SECONDS,
    ) -> None:
        self.burst, self.refill = burst, refill
        self.similar_max, self.similar_window = similar_max, similar_window
        self._similar: _Lru[tuple[str, ...], _Similar] = _Lru(entries)
        self._written: _Lru[tuple[str, ...], _Written] = _Lru(entries)
        self._buckets: _Lru[tuple[str, ...], _Bucket] = _Lru(entries)

    def correlate(self, event: Occurrence, now: float) -> Write | None:
        """What to send for `event` at `now`, or None when the spam filter drops it."""
        about = event.about
        obj = (about.cluster, about.kind, about.namespace, about.name, about.uid)
        similar_key: tuple[str, ...] = (*obj, event.type, event.reason)
        similar = self._similar.get(similar_key)
        if similar is None or now - similar.last > self.similar_window:
            similar = _Similar(set(), now)
        similar.messages.add(event.message)
        similar.last = now
        self._similar.put(similar_key, similar)
        message, key = event.message, (*similar_key, event.message)  # client-go's event key
        if len(similar.messages) >= self.similar_max:
            similar.messages.pop()  # the set stays at its bound, as client-go's
            message, key = COMBINED + event.message, similar_key

        written = self._written.get(key)
        if written is None:
            written = _Written(f"{about.name}.{int(now * 1e9):x}", 1, now)
            patch = False
        else:
            written = _Written(written.name, written.count + 1, written.first)
            patch = True
        self._written.put(key, written)

        if not self._take(obj, now):
            return None
        return Write(
            written.name, about.namespace, message, written.count, written.first, now, patch
        )

    def _take(self, obj: tuple[str, ...], now: float) -> bool:
        bucket = self._buckets.get(obj)
        if bucket is None:
            bucket = _Bucket(float(self.burst), now)
            self._buckets.put(obj, bucket)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.at) * self.refill)
        bucket.at = now
        if bucket.tokens < 1:
            return False
        bucket.tokens -= 1
        return True
