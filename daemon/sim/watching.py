"""Serving one watch request: JSON lines over a chunked response, bookmarks, timeouts,
410 Expired as an ERROR event, fault-injected drops and stalls."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass

from aiohttp import web

from daemon.sim.errors import expired
from daemon.sim.faults import Faults
from daemon.sim.resources import Resource
from daemon.sim.selectors import Predicate
from daemon.sim.store import Expired, Store, Watcher, encode

# Lines written per chunk when a watcher is far behind: bounds the size of one write.
_BATCH = 2000


@dataclass(frozen=True, slots=True)
class WatchRequest:
    resource: Resource
    namespace: str | None
    predicate: Predicate | None
    since: int | None  # None: start with the current objects as ADDED
    timeout: float
    bookmarks: bool
    initial_events_end: bool  # sendInitialEvents: mark the end of the initial ADDED events


def bookmark(resource: Resource, rv: int, *, initial_end: bool = False) -> bytes:
    metadata: dict[str, object] = {"resourceVersion": str(rv), "creationTimestamp": None}
    if initial_end:
        metadata["annotations"] = {"k8s.io/initial-events-end": "true"}
    obj = {"kind": resource.kind, "apiVersion": resource.api_version, "metadata": metadata}
    return b'{"type":"BOOKMARK","object":' + encode(obj) + b"}\n"


def error_line(status: dict[str, object]) -> bytes:
    return b'{"type":"ERROR","object":' + encode(status) + b"}\n"


async def serve_watch(
    request: web.BaseRequest,
    store: Store,
    faults: Faults,
    spec: WatchRequest,
    bookmark_seconds: float,
) -> web.StreamResponse:
    response = web.StreamResponse(status=200)
    response.content_type = "application/json"
    response.enable_chunked_encoding()
    await response.prepare(request)
    try:
        watcher = store.watch(spec.resource, spec.namespace, spec.predicate, spec.since)
    except Expired as exc:
        with contextlib.suppress(ConnectionError):
            await response.write(error_line(expired(str(exc)).status()))
            await response.write_eof()
        return response
    if spec.initial_events_end and spec.bookmarks:
        watcher.push(bookmark(spec.resource, store.rv, initial_end=True))
    try:
        stalled = await _pump(response, watcher, store, faults, spec, bookmark_seconds)
    except ConnectionError:
        return response  # the client went away
    finally:
        store.unwatch(watcher)
    if stalled:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(spec.timeout):
                await until_gone(request)
        return response
    with contextlib.suppress(ConnectionError):
        await response.write_eof()
    return response


async def _pump(
    response: web.StreamResponse,
    watcher: Watcher,
    store: Store,
    faults: Faults,
    spec: WatchRequest,
    bookmark_seconds: float,
) -> bool:
    """Serve the watch until it ends; True when a fault stalled it (the stream left open)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + spec.timeout
    next_bookmark = loop.time() + bookmark_seconds
    pending = watcher.pending
    while not watcher.closed:
        if pending:
            count = min(len(pending), _BATCH)
            chunk = b"".join(pending.popleft() for _ in range(count))
            await response.write(chunk)
            if faults.drop_watch_now():
                return False
            if faults.stall_watch_now():
                return True
            continue
        now = loop.time()
        if now >= deadline:
            return False
        if spec.bookmarks and now >= next_bookmark:
            watcher.push(bookmark(spec.resource, store.rv))
            next_bookmark = now + bookmark_seconds
            continue
        wake_at = min(deadline, next_bookmark) if spec.bookmarks else deadline
        watcher.wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(watcher.wake.wait(), max(0.0, wake_at - now))
    return False


async def until_gone(request: web.BaseRequest) -> None:
    """Hold a stalled stream open, silent, until the client closes it. aiohttp does not cancel
    a handler whose client left, so the transport is looked at: a stall must cost the client
    its inactivity deadline, not the server a task per stall for the rest of the watch's
    timeout."""
    while True:
        transport = request.transport
        if transport is None or transport.is_closing():
            return
        await asyncio.sleep(0.2)
