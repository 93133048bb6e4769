"""Writing Kubernetes Events (core/v1, as client-go's recorder) beside acting, best effort.

The pump hands over each decision's notes (`daemon.kube.notes`) with the decision;
the actuator reports each intent's result; a note whose intent is carried out (or, for a
``Failed...`` one, fails) goes on its cluster's queue, and its milestone, if it has one, goes
to the log at once. One writer per cluster empties the queue through the correlator
(`daemon.kube.eventcache`). Nothing here waits for the actuator or makes it wait: a full
queue (1000 Events, client-go's) drops the newest.

A cluster that refuses Events costs one warning: a 403 (no RBAC for events) stops writing
there for `REFUSED_PAUSE` seconds, then one Event is tried again (refused again: a debug line
and another pause; taken: an info line, and writing resumes). A 400 or 422 drops that Event,
with one warning per cluster. A namespace being deleted or gone (403 NamespaceTerminating,
404), a duplicate (409) and any other answer drop that Event quietly, as client-go does;
only a connection that fails is tried again, a few times.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, Final

import anyio
import structlog

from daemon.kube.actuator import Result
from daemon.kube.api import PATCH_TYPES, KubeApi, Response
from daemon.kube.eventcache import Correlator, Occurrence, Write
from daemon.kube.ingest import INGEST_ERRORS, Backoff
from daemon.kube.notes import Note
from daemon.kube.resources import RESOURCES, Resource
from events.intents import Intent
from events.objects import rfc3339

log = structlog.get_logger("kbatchd.events")

COMPONENT: Final = "kbatchd"
# What the writers call on core/v1 events (config/rbac.yaml grants exactly these).
EVENT_VERBS: Final = ("create", "patch")
QUEUE: Final = 1000
REFUSED_PAUSE: Final = 300.0
ATTEMPTS: Final = 3
# `reportingInstance` is at most 128 characters.
_INSTANCE_MAX: Final = 128


class Recorder:
    def __init__(
        self,
        apis: Mapping[str, KubeApi],
        resources: Mapping[str, Mapping[str, Resource]],
        *,
        write: bool = True,
        instance: str = "",
        queue: int = QUEUE,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.apis = apis
        # Cluster -> kind -> the version discovery found (the actuator's map, shared).
        self.resources = resources
        self.write = write
        self.instance = instance[:_INSTANCE_MAX]
        self.queue_size = queue
        self.clock = clock
        self.written = 0
        self.dropped = 0
        # Decision seq -> intent index -> the notes waiting on that intent's result.
        self._expected: dict[int, dict[int, list[Note]]] = {}
        # Cluster -> the Events to write there, each with when it happened.
        self._queues: dict[str, deque[tuple[Occurrence, float]]] = {c: deque() for c in apis}
        self._wake: dict[str, anyio.Event] = {c: anyio.Event() for c in apis}
        self._correlators: dict[str, Correlator] = {c: Correlator() for c in apis}
        # Cluster -> when writing there may be tried again after a 403 (absent: writing).
        self._refused_until: dict[str, float] = {}
        self._warned_invalid: set[str] = set()
        # Writes under way, and an event set whenever a writer finished one or found its
        # queue empty: what `written_all` waits on.
        self._writing = 0
        self._settled = anyio.Event()

    # -- from the pump and the actuator ----------------------------------------------------

    def expect(self, seq: int, notes: list[Note]) -> None:
        """Keep `notes` until the results of decision `seq`'s intents come."""
        if not notes:
            return
        waiting: dict[int, list[Note]] = {}
        for note in notes:
            waiting.setdefault(note.index, []).append(note)
        self._expected[seq] = waiting

    def forget(self) -> None:
        """A term ended: its intents without a result will never have one."""
        self._expected.clear()

    def result(self, seq: int, index: int, intent: Intent, result: Result) -> None:
        """An intent's result, from the actuator. An intent whose work an earlier call had
        done ("already exists", "already gone") announces nothing: that call did."""
        waiting = self._expected.get(seq)
        if waiting is None:
            return
        notes = waiting.pop(index, None)
        if not waiting:
            del self._expected[seq]
        if not notes:
            return
        carried_out = result.ok and 200 <= result.code < 300
        for note in notes:
            if note.on_failure:
                if result.ok:
                    continue
                message = note.message + result.message
            elif carried_out:
                message = note.message
            else:
                continue
            if note.milestone:
                log.info(note.milestone, key=note.about.ref, reason=note.why or note.reason)
            if self.write:
                event = Occurrence(note.about, note.type, note.reason, message)
                self._enqueue(intent.cluster, event)

    def _enqueue(self, cluster: str, event: Occurrence) -> None:
        queue = self._queues.get(cluster)
        if queue is None:
            return
        if len(queue) >= self.queue_size:
            self.dropped += 1
            return
        queue.append((event, self.clock()))
        self._wake[cluster].set()

    # -- the writers -----------------------------------------------------------------------

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            for cluster in self.apis:
                tg.start_soon(self._writer, cluster)

    async def written_all(self) -> None:
        """Until every Event taken so far is written or given up: a drain waits for this
        (bounded by its own deadline) so that a daemon stopping loses none it had queued."""
        while self._writing or any(self._queues.values()):
            self._settled = anyio.Event()
            await self._settled.wait()

    async def _writer(self, cluster: str) -> None:
        queue = self._queues[cluster]
        while True:
            self._settled.set()
            if not queue:
                self._wake[cluster] = anyio.Event()
                await self._wake[cluster].wait()
                continue
            event, at = queue.popleft()
            refused_until = self._refused_until.get(cluster)
            if refused_until is not None and self.clock() < refused_until:
                self.dropped += 1
                continue
            write = self._correlators[cluster].correlate(event, at)
            if write is None:
                self.dropped += 1
                continue
            self._writing += 1
            try:
                await self._write(cluster, event, write)
            finally:
                self._writing -= 1

    async def _write(self, cluster: str, event: Occurrence, write: Write) -> None:
        api = self.apis[cluster]
        backoff = Backoff(first=1.0, cap=10.0)
        patch = write.patch
        for _ in range(ATTEMPTS):
            try:
                response = await self._send(api, event, write, patch)
            except INGEST_ERRORS as exc:
                log.debug("cannot write an Event", cluster=cluster, error=str(exc) or repr(exc))
                await anyio.sleep(backoff.next_delay())
                continue
            if patch and response.status == 404:
                patch = False  # the Event expired (an hour on the server): write it anew
                continue
            self._answered(cluster, event, response)
            return
        self.dropped += 1

    async def _send(self, api: KubeApi, event: Occurrence, write: Write, patch: bool) -> Response:
        collection = f"/api/v1/namespaces/{write.namespace}/events"
        last = rfc3339(int(write.last * 1000))
        if patch:
            body: dict[str, Any] = {"count": write.count, "lastTimestamp": last}
            body["message"] = write.message
            return await api.request(
                "PATCH",
                f"{collection}/{write.name}",
                body=body,
                content_type=PATCH_TYPES["strategic"],
            )
        return await api.request("POST", collection, body=self._body(api.cluster, event, write))

    def _body(self, cluster: str, event: Occurrence, write: Write) -> dict[str, Any]:
        about = event.about
        resource = self.resources.get(cluster, RESOURCES).get(about.kind) or RESOURCES[about.kind]
        involved = {
            "kind": about.kind,
            "namespace": about.namespace,
            "name": about.name,
            "apiVersion": resource.api_version,
        }
        if about.uid:
            involved["uid"] = about.uid
        body: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": write.name, "namespace": write.namespace},
            "involvedObject": involved,
            "reason": event.reason,
            "message": write.message,
            "type": event.type,
            "source": {"component": COMPONENT},
            "firstTimestamp": rfc3339(int(write.first * 1000)),
            "lastTimestamp": rfc3339(int(write.last * 1000)),
            "count": write.count,
            "reportingComponent": COMPONENT,
        }
        if self.instance:
            body["reportingInstance"] = self.instance
        return body

    def _answered(self, cluster: str, event: Occurrence, response: Response) -> None:
        status = response.status
        if response.ok:
            self.written += 1
            if self._refused_until.pop(cluster, None) is not None:
                log.info("the cluster takes Kubernetes Events again", cluster=cluster)
            return
        self.dropped += 1
        message = response.status_message()
        if status == 403 and "being terminated" not in message:
            first = cluster not in self._refused_until
            self._refused_until[cluster] = self.clock() + REFUSED_PAUSE
            if first:
                log.warning(
                    "the cluster refuses Kubernetes Events; not writing them there for a while "
                    "(grant create and patch on events: config/rbac.yaml)",
                    cluster=cluster,
                    code=status,
                    error=message,
                    retry_in=REFUSED_PAUSE,
                )
            else:
                log.debug("Kubernetes Events still refused", cluster=cluster, error=message)
            return
        if status in (400, 422) and cluster not in self._warned_invalid:
            self._warned_invalid.add(cluster)
            log.warning(
                "the cluster refused a Kubernetes Event as invalid; dropped (warned once)",
                cluster=cluster,
                code=status,
                object=event.about.ref,
                reason=event.reason,
                error=message,
            )
            return
        log.debug(
            "Kubernetes Event not written",
            cluster=cluster,
            code=status,
            object=event.about.ref,
            reason=event.reason,
            error=message,
        )
