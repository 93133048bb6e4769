"""Carrying out intents against the API, idempotently, with an outcome event for each.

Creates use deterministic names, so "already exists" means done; deletes carry a uid
precondition, so "not found" or "uid mismatch" mean the object meant is gone; binds and
patches that conflict are reported as failed and left to the reconciler to decide again from
fresh state. 429 and 5xx answers and broken connections are retried with back-off.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from contextlib import suppress
from itertools import groupby
from typing import Any, Final

import aiohttp
import anyio
import msgspec
import structlog
from opentelemetry.context import Context
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from daemon.kube.api import PATCH_TYPES, KubeApi, Response
from daemon.kube.ingest import Backoff, now_ms
from daemon.kube.resources import RESOURCES, Resource
from daemon.kube.spans import intent_attributes, trace_headers
from events.intents import Bind, Create, Delete, Intent, Patch
from events.schema import Decided, Event, Outcome

log = structlog.get_logger("kbatchd.actuator")

Send = Callable[[list[Event]], Awaitable[None]]
# (cluster, code) of a failed call: an HTTP status, or "connection" for a broken one.
OnError = Callable[[str, int | str], None]
# Seconds one intent took, retries included.
OnDone = Callable[[float], None]
# (decision seq, intent index, intent, result) of each intent answered: what Kubernetes
# Events are written from. Called before the outcome is sent; it must not wait.
OnResult = Callable[[int, int, Intent, "Result"], None]

RETRIABLE: Final = frozenset({429, 500, 502, 503, 504})
# An intent's retries: the first delay and the cap of its exponential back-off (seconds).
RETRY_BACKOFF: Final = (0.1, 5.0)


class _Created(msgspec.Struct):
    metadata: _Meta


class _Meta(msgspec.Struct, rename="camel"):
    uid: str = ""
    resource_version: str = ""


_CREATED: Final = msgspec.json.Decoder(_Created)


class Result(msgspec.Struct, frozen=True):
    ok: bool
    code: int
    message: str = ""
    resource_version: str = ""
    uid: str = ""


class Slots:
    """At most `size` holders at once, first come first served.

    Taking a free slot does not yield to the event loop: anyio's CapacityLimiter checkpoints
    on every acquire and looks up the current task twice, which at one slot per API call
    cost a few per cent of the daemon's CPU. A released slot goes straight to the oldest
    waiter, through a bare future: an anyio Event looks up the running backend and loop each
    time it is made, about half of what waiting cost when all slots were taken."""

    __slots__ = ("_free", "_waiters")

    def __init__(self, size: int) -> None:
        self._free = size
        self._waiters: deque[asyncio.Future[None]] = deque()

    async def __aenter__(self) -> None:
        if self._free > 0 and not self._waiters:
            self._free -= 1
            return
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(turn)
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self._release()  # handed a slot just as it was cancelled: pass it on
            else:
                turn.cancel()  # never to be handed one; `_release` may already have skipped it
                with suppress(ValueError):
                    self._waiters.remove(turn)
            raise

    async def __aexit__(self, *_: object) -> None:
        self._release()

    def _release(self) -> None:
        # A waiter cancelled but not yet run again has a cancelled future still queued.
        while self._waiters:
            turn = self._waiters.popleft()
            if not turn.done():
                turn.set_result(None)
                return
        self._free += 1


class Actuator:
    def __init__(
        self,
        apis: dict[str, KubeApi],
        send: Send,
        *,
        concurrency: int = 64,
        max_attempts: int = 8,
        retry_backoff: tuple[float, float] = RETRY_BACKOFF,
        tracer: Tracer | None = None,
        on_error: OnError | None = None,
        on_done: OnDone | None = None,
        on_result: OnResult | None = None,
    ) -> None:
        self.apis = apis
        self.send = send
        # Cluster -> kind -> the resource (version) discovery found it serves.
        self.resources: dict[str, dict[str, Resource]] = {}
        self.max_attempts = max_attempts
        self.retry_backoff = retry_backoff
        self.tracer = tracer
        self._on_error = on_error
        self._on_done = on_done
        self._on_result = on_result
        self._slots = Slots(concurrency)
        self.in_flight = 0
        self.calls = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def wait_idle(self) -> None:
        """Until no decision is being carried out."""
        await self._idle.wait()

    async def execute(self, seq: int, decision: Decided, parent: Context | None = None) -> None:
        """Carry out every intent of a decision, in order; runs of intents of the same kind of
        operation (creating a Job's pods, say) go concurrently. `parent` is the decision's
        trace context: each intent gets an ``act`` span under it."""
        if not self.in_flight:
            self._idle = anyio.Event()
        self.in_flight += 1
        try:
            index = 0
            for _, run in groupby(decision.intents, key=lambda i: type(i)):
                batch = list(enumerate(run, start=index))
                index += len(batch)
                if len(batch) == 1:
                    # Most runs are one status patch: a task group for it costs more than
                    # the bookkeeping of the request itself.
                    await self._one(seq, batch[0][0], batch[0][1], decision, parent)
                    continue
                # asyncio's own task group: anyio's gives every task a handle, a cancel scope
                # and an event (16 µs a task against 4.5 here), and each of a gang's binds is
                # a task. Cancelling the term's scope cancels this task, and with it the
                # group's children.
                async with asyncio.TaskGroup() as tg:
                    for i, intent in batch:
                        tg.create_task(self._one(seq, i, intent, decision, parent))
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    async def _one(
        self, seq: int, index: int, intent: Intent, decision: Decided, parent: Context | None
    ) -> None:
        span = self._start_span(seq, index, intent, parent)
        headers = trace_headers(span) if span is not None else None
        result: Result | None = None
        try:
            async with self._slots:
                began = time.monotonic()
                result = await self.perform(intent, headers)
                if self._on_done is not None:
                    self._on_done(time.monotonic() - began)
        finally:
            # A cancelled intent (a lost lease, a drain running out) ends its span too.
            if span is not None:
                _finish_span(span, result)
        # The decision and object go on the line itself: binding them as context variables
        # for every intent cost more than a binding request.
        about = {
            "intent": intent.ref,
            "code": result.code,
            "cluster": intent.cluster,
            "key": decision.key,
            "reconciler": decision.reconciler,
            "seq": seq,
        }
        if result.ok:
            log.debug("intent done", **about)
        else:
            log.warning("intent failed", decision=seq, message=result.message, **about)
        if self._on_result is not None:
            self._on_result(seq, index, intent, result)
        await self._send_outcome(seq, index, result)

    def _start_span(
        self, seq: int, index: int, intent: Intent, parent: Context | None
    ) -> Span | None:
        if self.tracer is None or parent is None:
            return None
        attributes = intent_attributes(intent)
        attributes["kbatchd.decision.seq"] = seq
        attributes["kbatchd.intent.index"] = index
        return self.tracer.start_span("act", parent, attributes=attributes)

    async def _send_outcome(self, seq: int, index: int, result: Result) -> None:
        await self.send(
            [
                Outcome(
                    at=now_ms(),
                    decision=seq,
                    index=index,
                    ok=result.ok,
                    code=result.code,
                    message=result.message,
                    resource_version=result.resource_version,
                    uid=result.uid,
                )
            ]
        )

    async def perform(self, intent: Intent, headers: Mapping[str, str] | None = None) -> Result:
        """One intent, retried through transient failures; `headers` go on every request (the
        act span's ``traceparent``)."""
        api = self.apis.get(intent.cluster)
        if api is None:
            return Result(False, 0, f"no cluster named {intent.cluster!r}")
        backoff = Backoff(*self.retry_backoff)
        response: Response | None = None
        last_error = ""
        for _ in range(self.max_attempts):
            try:
                self.calls += 1
                response = await self._send(api, intent, headers)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                self._error(intent.cluster, "connection")
                await anyio.sleep(backoff.next_delay())
                last_error = str(exc) or type(exc).__name__
                continue
            if response.status not in RETRIABLE:
                result = interpret(intent, response)
                if not result.ok:
                    self._error(intent.cluster, response.status)
                return result
            self._error(intent.cluster, response.status)
            await anyio.sleep(response.retry_after or backoff.next_delay())
        if response is not None:
            return Result(False, response.status, response.status_message())
        return Result(False, 0, f"gave up after {self.max_attempts} attempts: {last_error}")

    def _error(self, cluster: str, code: int | str) -> None:
        if self._on_error is not None:
            self._on_error(cluster, code)

    async def _send(
        self, api: KubeApi, intent: Intent, headers: Mapping[str, str] | None = None
    ) -> Response:
        resource = self.resources.get(intent.cluster, RESOURCES).get(intent.kind)
        resource = resource or RESOURCES[intent.kind]
        if isinstance(intent, Create):
            body = dict(intent.body)
            metadata = dict(body.get("metadata") or {})
            metadata.setdefault("name", intent.name)
            if resource.namespaced:
                metadata.setdefault("namespace", intent.namespace)
            body["metadata"] = metadata
            body.setdefault("apiVersion", resource.api_version)
            body.setdefault("kind", resource.kind)
            return await api.request(
                "POST", resource.collection(intent.namespace), body=body, headers=headers
            )
        path = resource.item(intent.namespace, intent.name)
        if isinstance(intent, Patch):
            patch: Any = intent.patch
            if intent.precondition_rv and isinstance(patch, dict):
                # A resourceVersion in a merge patch makes the server refuse a stale write.
                patch = {
                    **patch,
                    "metadata": {
                        **patch.get("metadata", {}),
                        "resourceVersion": intent.precondition_rv,
                    },
                }
            if intent.subresource:
                path = f"{path}/{intent.subresource}"
            return await api.request(
                "PATCH",
                path,
                body=patch,
                content_type=PATCH_TYPES[intent.patch_type],
                headers=headers,
            )
        if isinstance(intent, Delete):
            options: dict[str, Any] = {
                "apiVersion": "v1",
                "kind": "DeleteOptions",
                "propagationPolicy": intent.propagation,
            }
            if intent.grace_seconds is not None:
                options["gracePeriodSeconds"] = intent.grace_seconds
            if intent.precondition_uid:
                options["preconditions"] = {"uid": intent.precondition_uid}
            return await api.request("DELETE", path, body=options, headers=headers)
        if isinstance(intent, Bind):
            metadata = {"name": intent.name, "namespace": intent.namespace}
            if intent.uid:
                metadata["uid"] = intent.uid
            binding = {
                "apiVersion": "v1",
                "kind": "Binding",
                "metadata": metadata,
                "target": {"apiVersion": "v1", "kind": "Node", "name": intent.node},
            }
            return await api.request("POST", f"{path}/binding", body=binding, headers=headers)
        raise TypeError(f"unknown intent {intent!r}")  # pragma: no cover


def _finish_span(span: Span, result: Result | None) -> None:
    if result is None:
        span.set_status(Status(StatusCode.ERROR, "cancelled before an answer"))
    else:
        span.set_attribute("kbatchd.outcome.ok", result.ok)
        if result.code:
            span.set_attribute("http.response.status_code", result.code)
        if not result.ok:
            span.set_status(Status(StatusCode.ERROR, result.message))
    span.end()


def interpret(intent: Intent, response: Response) -> Result:
    """Whether a final answer means the intent is done."""
    if response.ok:
        uid, rv = "", ""
        if isinstance(intent, Create | Patch):
            try:
                meta = _CREATED.decode(response.body).metadata
                uid, rv = meta.uid, meta.resource_version
            except msgspec.DecodeError:
                pass
        return Result(True, response.status, "", rv, uid)
    status = response.status
    # A 409 is two different answers: the object exists (a create's work is done), or the
    # write conflicted with another (nothing happened; decide again from fresh state).
    if isinstance(intent, Create) and status == 409 and response.status_reason() == "AlreadyExists":
        return Result(True, status, "already exists")
    if isinstance(intent, Delete) and status == 404:
        return Result(True, status, "already gone")
    if (
        isinstance(intent, Bind)
        and status == 409
        and f'is already assigned to node "{intent.node}"' in response.status_message()
    ):
        # The bind was made and its answer lost (a cut connection, then a retry).
        return Result(True, status, "already bound to that node")
    if (
        isinstance(intent, Delete)
        and status == 409
        and intent.precondition_uid
        and "Precondition failed: UID in precondition" in response.status_message()
    ):
        return Result(True, status, "the object meant is gone (uid changed)")
    return Result(False, status, response.status_message())
