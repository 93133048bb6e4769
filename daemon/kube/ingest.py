"""List, then watch, one kind on one cluster, turning what the API says into log events.

client-go's reflector in anyio: list (paginated) and synthesize the deltas against what the
log already holds, append a `Resynced` marker, then watch from the list's resourceVersion with
bookmarks. A 410 Gone (history expired) or a broken stream leads to a relist whose deltas
cover whatever happened while disconnected, objects gone meanwhile becoming DELETED events.
The informer keeps its own map of what it has emitted (not the folded state, which lags
behind the channel), so deltas are exact.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal, TypeVar

import aiohttp
import anyio
import msgspec
import structlog

from daemon.kube.api import KubeApi, Response, StreamStalled, WatchHttpError
from daemon.kube.resources import Resource
from events.objects import (
    MAX_ANNOTATION_CHARS,
    ObjectError,
    SlimObject,
    decode_object,
    decode_watch_line,
)
from events.schema import Change, Event, Observed, Resynced

log = structlog.get_logger("kbatchd.ingest")

# What `error_code` calls the failures that are no answer at all (see `Reachability`).
UNANSWERED: Final = frozenset({"connection", "timeout"})

Send = Callable[[list[Event]], Awaitable[None]]
# (cluster, code) of a failed list or watch, for the API error metric.
OnError = Callable[[str, int | str], None]

PAGE: Final = 500
# (uid, annotation key) pairs warned about, per informer, before the set starts afresh.
_WARNED_MAX: Final = 4096
# Watch events handed on in one item at most. The pump's channel bounds items, so this times
# its capacity (`daemon.runtime.supervisor.CHANNEL`) bounds the watch events a slow pump leaves
# waiting; a read can hold thousands.
EVENTS_PER_SEND: Final = 16


class _ListMeta(msgspec.Struct, rename="camel"):
    resource_version: str = ""
    # `continue` is a Python keyword.
    continue_: str = msgspec.field(default="", name="continue")


class _List(msgspec.Struct):
    metadata: _ListMeta = msgspec.field(default_factory=_ListMeta)
    items: list[msgspec.Raw] = []


class _Meta(msgspec.Struct, rename="camel"):
    resource_version: str = ""


class _Object(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    code: int = 0
    reason: str = ""
    message: str = ""


class _WatchEvent(msgspec.Struct):
    type: str
    object: msgspec.Raw


_CHANGES: Final[dict[str, Change]] = {c: c for c in ("ADDED", "MODIFIED", "DELETED")}
_LIST: Final = msgspec.json.Decoder(_List)
_WATCH: Final = msgspec.json.Decoder(_WatchEvent)
_OBJECT: Final = msgspec.json.Decoder(_Object)
_T = TypeVar("_T")


def _decoded(decoder: msgspec.json.Decoder[_T], data: bytes | msgspec.Raw) -> _T:
    """`decoder.decode(data)`; JSON nested too deeply for msgspec's recursive decoding (even
    in what it skips) raises the `msgspec.DecodeError` of any malformed answer, which the
    informer retries (`INGEST_ERRORS`), rather than a RecursionError that would end it."""
    try:
        return decoder.decode(data)
    except RecursionError:
        raise msgspec.DecodeError("JSON nested too deeply to decode") from None


class Expired(Exception):
    """The watch's resourceVersion is older than the server's history (410 Gone)."""


class Backoff:
    """Exponential back-off with jitter: the n-th delay in a row is drawn from the upper half
    of min(cap, first x 2^n). client-go's reflector doubles from 800 ms to a 30 s cap; the
    cap bounds the delay itself here (client-go's jitter adds up to as much again), so that
    what changes during a long storm of 429s and 500s is seen at most `cap` after the server
    answers again. The owner resets it when the server answers."""

    def __init__(
        self, first: float = 0.8, cap: float = 30.0, rng: random.Random | None = None
    ) -> None:
        self.first, self.cap = first, cap
        self.attempt = 0
        # Made on the first delay: seeding from the OS costs more than a request, and the
        # actuator makes one Backoff per intent that almost never needs it.
        self._rng = rng

    def next_delay(self) -> float:
        ceiling = self.first * 2**self.attempt
        if ceiling < self.cap:
            self.attempt += 1
        else:
            # At the cap the count stops: 2^n of a storm's thousandth failure is no float.
            ceiling = self.cap
        if self._rng is None:
            self._rng = random.Random()
        return self._rng.uniform(ceiling / 2, ceiling)

    def reset(self) -> None:
        self.attempt = 0


# What a list, a watch or a discovery request can fail with that is worth asking again.
INGEST_ERRORS: Final = (
    OSError,
    TimeoutError,
    aiohttp.ClientError,
    WatchHttpError,
    StreamStalled,
    msgspec.DecodeError,
)


def error_code(exc: Exception) -> int | str:
    if isinstance(exc, WatchHttpError):
        return exc.response.status
    if isinstance(exc, StreamStalled):
        return "stalled"
    if isinstance(exc, TimeoutError):
        return "timeout"
    if isinstance(exc, msgspec.DecodeError):
        return "decode"
    return "connection"


class Reachability:
    """Whether one cluster answers at all, shared by everything that calls it in the
    background: discovery, the managedBy question and every kind's informer fail together
    when it cannot be reached. The first failure of a back-off round logs one warning and
    opens the round; failures while it is open log nothing above debug and wait for its end,
    so that all callers retry together and the next failure opens the next round. The first
    answer ends the outage, with one info line. An HTTP error is an answer: it stays with its
    caller."""

    def __init__(
        self,
        cluster: str,
        *,
        first: float = 1.0,
        cap: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self._backoff = Backoff(first=first, cap=cap, rng=rng)
        self._round_ends: float | None = None
        # Rounds of the outage under way (0: the cluster answers).
        self.rounds = 0

    def failed(self, caller: str, error: str) -> float:
        """A call by `caller` (a kind, ``discovery``) got no answer: the seconds to wait
        before it tries again."""
        now = self.clock()
        if self._round_ends is not None and now < self._round_ends:
            log.debug("no answer", cluster=self.cluster, caller=caller, error=error)
            return self._round_ends - now
        delay = self._backoff.next_delay()
        self._round_ends = now + delay
        self.rounds += 1
        log.warning(
            "cannot reach the cluster; trying again",
            cluster=self.cluster,
            caller=caller,
            error=error,
            retry_in=round(delay, 2),
            round=self.rounds,
        )
        return delay

    def answered(self) -> None:
        """A call got an answer: the outage, if any, is over."""
        if self._round_ends is None:
            return
        log.info("the cluster answers again", cluster=self.cluster, rounds=self.rounds)
        self._round_ends = None
        self.rounds = 0
        self._backoff.reset()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Informer:
    """Keeps one kind of one cluster flowing into the log."""

    def __init__(
        self,
        api: KubeApi,
        resource: Resource,
        send: Send,
        known: dict[str, SlimObject],
        *,
        watch_timeout: tuple[int, int] = (300, 600),
        read_timeout: float = 120.0,
        on_error: OnError | None = None,
        backoff: Backoff | None = None,
        reachability: Reachability | None = None,
    ) -> None:
        self.api = api
        self.resource = resource
        self.send = send
        # ``namespace/name`` -> the object as last emitted.
        self.known = known
        self.watch_timeout = watch_timeout
        self.read_timeout = read_timeout
        self.resource_version = ""
        self.relists = 0
        self._on_error = on_error
        self._backoff = backoff or Backoff()
        # The cluster's, shared by its informers: a cluster that does not answer is one
        # warning per back-off round, not one per kind.
        self._reachability = reachability
        self._rng = random.Random()
        # Annotation keys the last decode dropped for their length, and those warned about.
        self._dropped: list[str] = []
        self._warned: set[tuple[str, str]] = set()

    async def run(self) -> None:
        """Forever: list, watch, and on any failure back off and start over."""
        listed = False
        while True:
            try:
                if not listed:
                    await self.relist()
                    listed = True
                    # The server answers again: a failure from here on starts the back-off
                    # afresh rather than from where a storm left it.
                    self._backoff.reset()
                    if self._reachability is not None:
                        self._reachability.answered()
                await self.watch()
                self._backoff.reset()
            except Expired:
                log.info("watch expired, relisting", **self._context())
                listed = False
            except StreamStalled as exc:
                # The cluster answered: one stream of it wedged, which is no outage of the
                # cluster's. The deadline already spaced the tries, so the watch goes on at
                # once from the version it reached.
                if self._on_error is not None:
                    self._on_error(self.api.cluster, "stalled")
                log.warning("watch stalled; watching again", error=str(exc), **self._context())
                if self._reachability is not None:
                    self._reachability.answered()
            except INGEST_ERRORS as exc:
                code = error_code(exc)
                if self._on_error is not None:
                    self._on_error(self.api.cluster, code)
                error = str(exc) or type(exc).__name__
                if self._reachability is not None and code in UNANSWERED:
                    delay = self._reachability.failed(self.resource.kind, error)
                else:
                    delay = self._backoff.next_delay()
                    log.warning(
                        "watch failed", error=error, retry_in=round(delay, 2), **self._context()
                    )
                await anyio.sleep(delay)
                listed = False if isinstance(exc, WatchHttpError) else listed

    def _context(self) -> dict[str, Any]:
        return {"cluster": self.api.cluster, "kind": self.resource.kind}

    async def relist(self) -> None:
        """List everything and append the deltas against what was emitted before."""
        seen: dict[str, SlimObject] = {}
        token = ""
        resource_version = ""
        while True:
            query: dict[str, str | int] = {"limit": PAGE}
            if token:
                query["continue"] = token
            response = await self.api.request("GET", self.resource.collection(), query=query)
            if response.status == 410:
                token = ""  # the continue token expired: start the list over
                seen.clear()
                continue
            if not response.ok:
                raise WatchHttpError(response)
            page = _decoded(_LIST, response.body)
            resource_version = page.metadata.resource_version
            for raw in page.items:
                obj = self._decode(raw)
                if obj is not None:
                    seen[f"{obj.namespace}/{obj.name}"] = obj
            token = page.metadata.continue_
            if not token:
                break
        await self._emit_deltas(seen, resource_version, self.resource.api_version)

    async def list_nothing(self) -> None:
        """The kind is not served: it lists as empty, so whatever was known of it is gone."""
        await self._emit_deltas({}, "", "")

    async def _emit_deltas(
        self, seen: dict[str, SlimObject], resource_version: str, api_version: str
    ) -> None:
        at = now_ms()
        cluster = self.api.cluster
        events: list[Event] = []
        for key, obj in seen.items():
            old = self.known.get(key)
            if old is None:
                events.append(Observed(at=at, cluster=cluster, change="ADDED", obj=obj))
            elif old.rv != obj.rv or old.uid != obj.uid:
                if old.uid != obj.uid:
                    # Deleted and recreated while we were not watching.
                    events.append(Observed(at=at, cluster=cluster, change="DELETED", obj=old))
                    events.append(Observed(at=at, cluster=cluster, change="ADDED", obj=obj))
                else:
                    events.append(Observed(at=at, cluster=cluster, change="MODIFIED", obj=obj))
        for key, old in self.known.items():
            if key not in seen:
                events.append(Observed(at=at, cluster=cluster, change="DELETED", obj=old))
        reason: Literal["listed", "relisted"] = "relisted" if self.relists else "listed"
        events.append(
            Resynced(
                at=at,
                cluster=cluster,
                kind=self.resource.kind,
                resource_version=resource_version,
                reason=reason,
                api_version=api_version,
            )
        )
        self.relists += 1
        self.known = seen
        self.resource_version = resource_version
        await self.send(events)

    async def watch(self) -> None:
        """Watch from `resource_version` until the server ends the stream."""
        low, high = self.watch_timeout
        query: dict[str, str | int] = {
            "watch": "true",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": self._rng.randint(low, high),
        }
        stream = self.api.stream_lines(
            self.resource.collection(),
            query,
            connect_timeout=10.0,
            read_timeout=self.read_timeout,
        )
        kind, cluster = self.resource.kind, self.api.cluster
        # Set until the stream's first read, which is the cluster answering.
        reachability = self._reachability
        async for lines in stream:
            if reachability is not None:
                # An outage that cut this watch is over: the next starts the back-off afresh.
                reachability.answered()
                reachability = None
            events: list[Event] = []
            at = now_ms()
            for line in lines:
                try:
                    observed = self._observed(kind, line)
                except Exception:
                    # An ERROR line (an expired watch) after events of the same read: those
                    # are in the cache already, so they must reach the log before a relist.
                    if events:
                        await self.send(events)
                    raise
                if observed is not None:
                    change, obj = observed
                    events.append(Observed(at=at, cluster=cluster, change=change, obj=obj))
                    if len(events) == EVENTS_PER_SEND:
                        await self.send(events)
                        events = []
            if events:
                # A burst of events costs the pump one item per EVENTS_PER_SEND, not per event.
                await self.send(events)

    def _observed(self, kind: str, line: bytes) -> tuple[Change, SlimObject] | None:
        """One watch line: the change and object to log (the informer's cache and
        resourceVersion updated), or None for a bookmark or an object skipped."""
        # Most lines decode in one pass (a pod's envelope and object together, a fifth
        # cheaper than two); the others go the general way.
        self._dropped.clear()
        decoded = decode_watch_line(kind, line, self._dropped)
        if decoded is not None and decoded[0] != "ERROR":
            type_, obj = decoded
            if type_ == "BOOKMARK":
                self.resource_version = obj.rv
                return None
            if self._dropped:
                self._warn_dropped(obj)
        else:
            event = _decoded(_WATCH, line)
            type_ = event.type
            if type_ == "BOOKMARK":
                self.resource_version = _decoded(_OBJECT, event.object).metadata.resource_version
                return None
            if type_ == "ERROR":
                status = _decoded(_OBJECT, event.object)
                if status.code == 410:
                    raise Expired(status.message)
                raise WatchHttpError(Response(status.code or 500, bytes(event.object)))
            found = self._decode(event.object)
            if found is None:
                return None
            obj = found
        change = _CHANGES.get(type_)
        if change is None:
            log.warning("unknown watch event type", type=type_, **self._context())
            return None
        key = f"{obj.namespace}/{obj.name}"
        if change == "DELETED":
            self.known.pop(key, None)
        else:
            self.known[key] = obj
        self.resource_version = obj.rv
        return change, obj

    def _decode(self, raw: bytes) -> SlimObject | None:
        self._dropped.clear()
        try:
            obj = decode_object(self.resource.kind, raw, self._dropped)
        except ObjectError as exc:
            # One malformed object must not stop the watch: log it with what is wrong.
            log.error("undecodable object skipped", error=str(exc), **self._context())
            return None
        if self._dropped:
            self._warn_dropped(obj)
        return obj

    def _warn_dropped(self, obj: SlimObject) -> None:
        """One warning per object and key for annotations dropped for their length (each
        event of the object drops them again)."""
        for key in self._dropped:
            if (obj.uid, key) in self._warned:
                continue
            if len(self._warned) >= _WARNED_MAX:
                self._warned.clear()
            self._warned.add((obj.uid, key))
            log.warning(
                "annotation too long, not kept",
                annotation=key,
                limit_chars=MAX_ANNOTATION_CHARS,
                object=f"{obj.namespace}/{obj.name}",
                **self._context(),
            )
