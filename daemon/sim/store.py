"""The in-memory object store behind the simulated API server.

One global resourceVersion counter orders every write, as etcd's revision does. Each stored
object is kept as an immutable dict together with its JSON encoding, so lists and watch
events are assembled from shared bytes: an event is serialized once whatever the number of
watchers. Each kind keeps a bounded history of events (the watch cache); a watch or a list
continuation from before the retained history is answered 410 Expired.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import random
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Final

import msgspec

from daemon.sim.resources import RESOURCES, Resource
from daemon.sim.selectors import Predicate
from events.objects import rfc3339 as rfc3339_ms
from events.objects import timestamp_ms

Obj = dict[str, Any]

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()

DEFAULT_HISTORY: Final = 10_000


def encode(obj: Any) -> bytes:
    return _ENCODER.encode(obj)


def decode(data: bytes) -> Any:
    return _DECODER.decode(data)


def rfc3339(when: float) -> str:
    """A `metav1.Time` string for `when` (Unix seconds): UTC, whole seconds, like the real
    server serializes them."""
    return rfc3339_ms(int(when * 1000))


def parse_rfc3339(text: str) -> float:
    """Unix seconds of a `metav1.Time` string (`events.objects.timestamp_ms`, the one parser);
    a `ValueError` when it is not one."""
    return (timestamp_ms(text, "time") or 0) / 1000


def object_key(namespace: str, name: str) -> str:
    # The etcd key suffix: lists come back ordered by it, continue tokens point into it.
    return f"{namespace}/{name}"


# Stored objects and events are never tracked by the garbage collector (`gc=False`): they
# hold JSON trees and constants, never a cycle, so their reference counts free them. Every
# write makes one of each and they live on in the history, so leaving them out makes every
# full collection shorter and less frequent.
class Stored(msgspec.Struct, gc=False):
    """An object as stored: the dict is never mutated once stored (copy before changing)."""

    obj: Obj
    data: bytes
    rv: int

    def copy(self) -> Obj:
        result: Obj = decode(self.data)
        return result


class WatchEvent(msgspec.Struct, gc=False):
    type: str  # ADDED, MODIFIED or DELETED
    resource: Resource
    rv: int
    key: str
    obj: Obj
    data: bytes
    prev: Obj | None  # the object before a MODIFIED or DELETED
    _lines: dict[str, bytes] = msgspec.field(default_factory=dict)

    @property
    def namespace(self) -> str:
        ns: str = self.obj["metadata"].get("namespace", "")
        return ns

    def line(self, type_: str | None = None) -> bytes:
        """The watch stream line for this event, built once and shared by all watchers."""
        kind = type_ or self.type
        line = self._lines.get(kind)
        if line is None:
            data = self.data
            if kind == "DELETED" and self.type == "MODIFIED" and self.prev is not None:
                # An object leaving a watcher's selector is reported as deleted with its
                # previous content at the new resourceVersion, as the watch cache does.
                prev = decode(encode(self.prev))
                prev["metadata"]["resourceVersion"] = str(self.rv)
                data = encode(prev)
            line = b'{"type":"' + kind.encode() + b'","object":' + data + b"}\n"
            self._lines[kind] = line
        return line


class Watcher:
    """One open watch: filtered lines waiting to be written to the client."""

    __slots__ = ("closed", "namespace", "pending", "predicate", "resource", "wake")

    def __init__(self, resource: Resource, namespace: str | None, predicate: Predicate | None):
        self.resource = resource
        self.namespace = namespace
        self.predicate = predicate
        self.pending: deque[bytes] = deque()
        self.wake = asyncio.Event()
        self.closed = False

    def push(self, line: bytes) -> None:
        self.pending.append(line)
        self.wake.set()

    def offer(self, event: WatchEvent) -> None:
        if self.namespace and event.namespace != self.namespace:
            return
        predicate = self.predicate
        if predicate is None:
            self.push(event.line())
            return
        now = predicate(event.obj)
        before = event.prev is not None and event.type == "MODIFIED" and predicate(event.prev)
        if event.type == "MODIFIED":
            if now and before:
                self.push(event.line())
            elif now:
                self.push(event.line("ADDED"))
            elif before:
                self.push(event.line("DELETED"))
        elif now:
            self.push(event.line())

    def close(self) -> None:
        self.closed = True
        self.wake.set()


class Expired(Exception):
    """A resourceVersion older than the retained history; carries the oldest usable one."""

    def __init__(self, requested: int, floor: int):
        super().__init__(f"too old resource version: {requested} ({floor})")
        self.requested = requested
        self.floor = floor


class Table:
    """All objects of one kind, their sorted keys, event history and open watches."""

    def __init__(self, resource: Resource, history: int):
        self.resource = resource
        self.objects: dict[str, Stored] = {}
        self.keys: list[str] = []
        self.history: deque[WatchEvent] = deque()
        self.capacity = history
        # Every event with rv > floor is still in `history`.
        self.floor = 0
        self.watchers: set[Watcher] = set()

    def record(self, event: WatchEvent) -> None:
        self.history.append(event)
        while len(self.history) > self.capacity:
            self.floor = self.history.popleft().rv
        for watcher in self.watchers:
            watcher.offer(event)

    def expire(self, rv: int) -> None:
        self.history.clear()
        self.floor = rv

    def events_after(self, rv: int) -> list[WatchEvent]:
        if rv < self.floor:
            raise Expired(rv, self.floor)
        events: list[WatchEvent] = []
        for event in reversed(self.history):
            if event.rv <= rv:
                break
            events.append(event)
        events.reverse()
        return events


Listener = Callable[[WatchEvent], None]


class Store:
    """Objects of every served kind under one resourceVersion counter."""

    def __init__(self, *, seed: int | None = None, history: int = DEFAULT_HISTORY):
        self.rng = random.Random(seed)
        self._seeded = seed is not None
        self.rv = 1
        self.tables: dict[Resource, Table] = {r: Table(r, history) for r in RESOURCES}
        self.uids: dict[str, tuple[Resource, str]] = {}
        # owner uid -> dependents (kind, key), for garbage collection.
        self.dependents: dict[str, set[tuple[Resource, str]]] = {}
        self.listeners: list[Listener] = []
        self.compaction_listeners: list[Callable[[], None]] = []
        self.clock: Callable[[], float] = _wall_clock

    # -- identity -------------------------------------------------------------------------

    def new_uid(self) -> str:
        if self._seeded:
            return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))
        return str(uuid.uuid4())

    def name_suffix(self) -> str:
        # The alphabet of apimachinery's utilrand.String: no vowels, no confusable digits.
        alphabet = "bcdfghjklmnpqrstvwxz2456789"
        return "".join(self.rng.choice(alphabet) for _ in range(5))

    def now(self) -> str:
        return rfc3339(self.clock())

    # -- reads ----------------------------------------------------------------------------

    def table(self, resource: Resource) -> Table:
        return self.tables[resource]

    def get(self, resource: Resource, namespace: str, name: str) -> Stored | None:
        return self.tables[resource].objects.get(object_key(namespace, name))

    def by_uid(self, uid: str) -> Stored | None:
        found = self.uids.get(uid)
        if found is None:
            return None
        return self.tables[found[0]].objects.get(found[1])

    def count(self, resource: Resource) -> int:
        return len(self.tables[resource].objects)

    def iter_objects(self, resource: Resource, namespace: str | None = None) -> Iterator[Stored]:
        table = self.tables[resource]
        if not namespace:
            yield from table.objects.values()
            return
        prefix = namespace + "/"
        keys = table.keys
        start = bisect.bisect_left(keys, prefix)
        for key in keys[start:]:
            if not key.startswith(prefix):
                break
            yield table.objects[key]

    def page(
        self,
        resource: Resource,
        namespace: str | None,
        predicate: Predicate | None,
        *,
        after: str = "",
        limit: int = 0,
        at_rv: int | None = None,
    ) -> tuple[list[bytes], str | None]:
        """One page of a list, ordered by key, as the objects were at `at_rv`.

        Returns the encoded items and the key of the last one when more remain. Objects
        changed since `at_rv` are reconstructed from the history (raises `Expired` if it no
        longer reaches back that far), so paging is consistent without copying the table.
        """
        table = self.tables[resource]
        then: dict[str, Obj | None] = {}
        if at_rv is not None and at_rv < self.rv:
            for event in table.events_after(at_rv):
                if event.key not in then:
                    then[event.key] = None if event.type == "ADDED" else event.prev
        prefix = f"{namespace}/" if namespace else ""
        lower = max(after, prefix) if after else prefix
        keys = table.keys
        start = bisect.bisect_right(keys, lower) if after else bisect.bisect_left(keys, lower)
        gone = sorted(k for k in then if k not in table.objects and k > lower)
        items: list[bytes] = []
        last = ""
        for key in heapq.merge(_islice_from(keys, start), gone):
            if prefix and not key.startswith(prefix):
                break
            if key in then:
                old = then[key]
                if old is None:
                    continue
                obj, data = old, b""
            else:
                stored = table.objects[key]
                obj, data = stored.obj, stored.data
            if predicate is not None and not predicate(obj):
                continue
            if limit and len(items) == limit:
                return items, last
            items.append(data or encode(obj))
            last = key
        return items, None

    # -- writes ---------------------------------------------------------------------------

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def put(self, resource: Resource, obj: Obj) -> Stored:
        """Store a created or updated object, stamping a new resourceVersion."""
        table = self.tables[resource]
        meta = obj["metadata"]
        key = object_key(meta.get("namespace", ""), meta["name"])
        rv = self._next_rv()
        meta["resourceVersion"] = str(rv)
        data = encode(obj)
        stored = Stored(obj, data, rv)
        old = table.objects.get(key)
        table.objects[key] = stored
        if old is None:
            bisect.insort(table.keys, key)
            self.uids[meta["uid"]] = (resource, key)
        else:
            self._unindex_owners(resource, key, old.obj)
        self._index_owners(resource, key, obj)
        event_type = "ADDED" if old is None else "MODIFIED"
        self._emit(WatchEvent(event_type, resource, rv, key, obj, data, old.obj if old else None))
        return stored

    def remove(
        self, resource: Resource, namespace: str, name: str, final: Obj | None = None
    ) -> Stored | None:
        """Delete an object for good; the DELETED event carries `final` (default: the stored
        object) at a new resourceVersion."""
        table = self.tables[resource]
        key = object_key(namespace, name)
        old = table.objects.pop(key, None)
        if old is None:
            return None
        index = bisect.bisect_left(table.keys, key)
        del table.keys[index]
        self.uids.pop(old.obj["metadata"]["uid"], None)
        self._unindex_owners(resource, key, old.obj)
        rv = self._next_rv()
        if final is None:
            final = old.copy()
        final["metadata"]["resourceVersion"] = str(rv)
        data = encode(final)
        stored = Stored(final, data, rv)
        self._emit(WatchEvent("DELETED", resource, rv, key, final, data, old.obj))
        return stored

    def _emit(self, event: WatchEvent) -> None:
        self.tables[event.resource].record(event)
        for listener in self.listeners:
            listener(event)

    def _index_owners(self, resource: Resource, key: str, obj: Obj) -> None:
        for ref in obj["metadata"].get("ownerReferences") or ():
            uid = ref.get("uid")
            if uid:
                self.dependents.setdefault(uid, set()).add((resource, key))

    def _unindex_owners(self, resource: Resource, key: str, obj: Obj) -> None:
        for ref in obj["metadata"].get("ownerReferences") or ():
            deps = self.dependents.get(ref.get("uid", ""))
            if deps is not None:
                deps.discard((resource, key))
                if not deps:
                    del self.dependents[ref["uid"]]

    def dependents_of(self, uid: str) -> list[Stored]:
        found: list[Stored] = []
        for resource, key in sorted(
            self.dependents.get(uid, ()), key=lambda d: (d[0].plural, d[1])
        ):
            stored = self.tables[resource].objects.get(key)
            if stored is not None:
                found.append(stored)
        return found

    # -- watches --------------------------------------------------------------------------

    def watch(
        self,
        resource: Resource,
        namespace: str | None,
        predicate: Predicate | None,
        since: int | None,
    ) -> Watcher:
        """Open a watch. `since=None` starts with the current objects as ADDED events;
        otherwise events after `since` are replayed (raises `Expired` if too old)."""
        table = self.tables[resource]
        watcher = Watcher(resource, namespace, predicate)
        if since is None:
            for stored in self.iter_objects(resource, namespace):
                if predicate is None or predicate(stored.obj):
                    watcher.push(b'{"type":"ADDED","object":' + stored.data + b"}\n")
        else:
            for event in table.events_after(since):
                watcher.offer(event)
        table.watchers.add(watcher)
        return watcher

    def unwatch(self, watcher: Watcher) -> None:
        self.tables[watcher.resource].watchers.discard(watcher)

    def drop_watches(self) -> int:
        """Close every open watch (a fault: clients must re-watch)."""
        count = 0
        for table in self.tables.values():
            for watcher in list(table.watchers):
                watcher.close()
                count += 1
            table.watchers.clear()
        return count

    def expire_history(self) -> None:
        """Forget all retained events: every watch from an older version gets 410."""
        for table in self.tables.values():
            table.expire(self.rv)
        for listener in self.compaction_listeners:
            listener()


def _islice_from(keys: list[str], start: int) -> Iterator[str]:
    for index in range(start, len(keys)):
        yield keys[index]


def _wall_clock() -> float:
    return time.time()
