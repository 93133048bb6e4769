"""Carrying out intents against the API, idempotently, with an outcome event for each.

Creates use deterministic names, so "already exists" means done; deletes carry a uid
precondition, so "not found" or "uid mismatch" mean the object meant is gone; binds and
patches that conflict are reported as failed and left to the reconciler to decide again from
fresh state. 429 and 5xx answers and broken connections are retried with back-off.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from itertools import groupby
from typing import Any, Final

import aiohttp
import anyio
import msgspec
import structlog

from daemon.kube.api import PATCH_TYPES, KubeApi, Response
from daemon.kube.ingest import Backoff, now_ms
from daemon.kube.resources import RESOURCES
from events.intents import Bind, Create, Delete, Intent, Patch
from events.schema import Decided, Event, Outcome

log = structlog.get_logger("kbatchd.actuator")

Send = Callable[[list[Event]], Awaitable[None]]

RETRIABLE: Final = frozenset({429, 500, 502, 503, 504})


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


class Actuator:
    def __init__(
        self,
        apis: dict[str, KubeApi],
        send: Send,
        *,
        concurrency: int = 32,
        max_attempts: int = 8,
    ) -> None:
        self.apis = apis
        self.send = send
        self.max_attempts = max_attempts
        self._limiter = anyio.CapacityLimiter(concurrency)
        self.in_flight = 0
        self.calls = 0
        self._idle = anyio.Event()
        self._idle.set()

    async def wait_idle(self) -> None:
        """Until no decision is being carried out."""
        await self._idle.wait()

    async def execute(self, seq: int, decision: Decided) -> None:
        """Carry out every intent of a decision, in order; runs of intents of the same kind of
        operation (creating a Job's pods, say) go concurrently."""
        if not self.in_flight:
            self._idle = anyio.Event()
        self.in_flight += 1
        try:
            index = 0
            for _, run in groupby(decision.intents, key=lambda i: type(i)):
                batch = list(enumerate(run, start=index))
                index += len(batch)
                async with anyio.create_task_group() as tg:
                    for i, intent in batch:
                        tg.start_soon(self._one, seq, i, intent)
        finally:
            self.in_flight -= 1
            if not self.in_flight:
                self._idle.set()

    async def _one(self, seq: int, index: int, intent: Intent) -> None:
        async with self._limiter:
            result = await self.perform(intent)
        if not result.ok:
            log.warning(
                "intent failed",
                decision=seq,
                intent=intent.ref,
                code=result.code,
                message=result.message,
            )
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

    async def perform(self, intent: Intent) -> Result:
        """One intent, retried through transient failures."""
        api = self.apis.get(intent.cluster)
        if api is None:
            return Result(False, 0, f"no cluster named {intent.cluster!r}")
        backoff = Backoff(first=0.1, cap=5.0)
        response: Response | None = None
        last_error = ""
        for _ in range(self.max_attempts):
            try:
                self.calls += 1
                response = await self._send(api, intent)
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                await anyio.sleep(backoff.next_delay())
                last_error = str(exc) or type(exc).__name__
                continue
            if response.status not in RETRIABLE:
                return interpret(intent, response)
            await anyio.sleep(response.retry_after or backoff.next_delay())
        if response is not None:
            return Result(False, response.status, response.status_message())
        return Result(False, 0, f"gave up after {self.max_attempts} attempts: {last_error}")

    async def _send(self, api: KubeApi, intent: Intent) -> Response:
        resource = RESOURCES[intent.kind]
        if isinstance(intent, Create):
            body = dict(intent.body)
            metadata = dict(body.get("metadata") or {})
            metadata.setdefault("name", intent.name)
            if resource.namespaced:
                metadata.setdefault("namespace", intent.namespace)
            body["metadata"] = metadata
            body.setdefault("apiVersion", resource.api_version)
            body.setdefault("kind", resource.kind)
            return await api.request("POST", resource.collection(intent.namespace), body=body)
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
                "PATCH", path, body=patch, content_type=PATCH_TYPES[intent.patch_type]
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
            return await api.request("DELETE", path, body=options)
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
            return await api.request("POST", f"{path}/binding", body=binding)
        raise TypeError(f"unknown intent {intent!r}")  # pragma: no cover


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
    if isinstance(intent, Create) and status == 409:
        return Result(True, status, "already exists")
    if isinstance(intent, Delete) and status == 404:
        return Result(True, status, "already gone")
    if isinstance(intent, Delete) and status == 409 and intent.precondition_uid:
        return Result(True, status, "the object meant is gone (uid changed)")
    return Result(False, status, response.status_message())
