"""Lease-based leader election (coordination.k8s.io/v1), as client-go's leaderelection does it.

A candidate reads the Lease; it takes it when nobody holds it or when the holder has not
renewed it for ``leaseDurationSeconds`` *as measured on the candidate's own clock since it
last saw the record change* (never by comparing the holder's timestamps with ours: clocks
skew). Every write carries the resourceVersion it read, so of two candidates racing for an
expired Lease exactly one write succeeds and the other gets 409. The holder renews every
retry period; if it cannot renew for the renew deadline, or sees another holder, it stops
leading at once. On a clean stop it releases the Lease (an empty holder), so a standby takes
over without waiting out the lease (controller-runtime's LeaderElectionReleaseOnCancel).
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Final

import aiohttp
import anyio
import msgspec
import structlog

from daemon.kube.api import KubeApi, Response

log = structlog.get_logger("kbatchd.leader")

JITTER: Final = 1.2
LEASES: Final = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"

OnChange = Callable[[bool], Awaitable[None]]
OnError = Callable[[str, int | str], None]


class LeaseSpec(msgspec.Struct, rename="camel"):
    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    lease_transitions: int = 0


class LeaseMeta(msgspec.Struct, rename="camel", omit_defaults=True):
    name: str = ""
    namespace: str = ""
    resource_version: str = ""


class Lease(msgspec.Struct, rename="camel", omit_defaults=True):
    metadata: LeaseMeta = msgspec.field(default_factory=LeaseMeta)
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)
    api_version: str = "coordination.k8s.io/v1"
    kind: str = "Lease"


_LEASE: Final = msgspec.json.Decoder(Lease)


def micro_time(at: float) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, UTC."""
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    return f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(4)}"


class Elector:
    def __init__(
        self,
        api: KubeApi,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        on_error: OnError | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.api = api
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.leading = False
        self._on_error = on_error
        self._monotonic, self._wall = monotonic, wall
        # What we last read or wrote, and when (our clock) we saw it change.
        self._observed: Lease | None = None
        self._observed_at = 0.0
        self._lost_to: str = ""
        # Attempts made so far: after the first, a non-leader is a standby, not starting.
        self.attempts = 0
        # When the last successful attempt began (our clock).
        self.renewed_at = 0.0

    @property
    def _collection(self) -> str:
        return LEASES.format(namespace=self.namespace)

    @property
    def _item(self) -> str:
        return f"{self._collection}/{self.name}"

    async def run(self, on_change: OnChange) -> None:
        """Forever: acquire, lead until the Lease is lost, repeat. Cancelling it releases the
        Lease if held; the caller stops acting before it cancels (the daemon drains first)."""
        try:
            while True:
                await self._acquire()
                self.leading = True
                log.info("leading", identity=self.identity, lease=f"{self.namespace}/{self.name}")
                await on_change(True)
                await self._renew_until_lost()
                self.leading = False
                log.warning(
                    "lost the lease",
                    identity=self.identity,
                    holder=self._lost_to or "(none: could not renew in time)",
                )
                await on_change(False)
        finally:
            if self.leading:
                self.leading = False
                with anyio.CancelScope(shield=True), anyio.move_on_after(self.retry_period):
                    await self.release()

    async def _acquire(self) -> None:
        reported = False
        while not await self.try_acquire_or_renew():
            if not reported:
                reported = True
                holder = self._observed.spec.holder_identity if self._observed else ""
                log.info("standing by", identity=self.identity, holder=holder or "(unknown)")
            await anyio.sleep(self.retry_period * random.uniform(1.0, JITTER))

    async def _renew_until_lost(self) -> None:
        while True:
            await anyio.sleep(self.retry_period)
            remaining = self.renew_deadline - (self._monotonic() - self.renewed_at)
            ok = False
            if remaining > 0:
                with anyio.move_on_after(remaining):
                    ok = await self.try_acquire_or_renew(within=remaining)
            if ok:
                continue
            if self._lost_to or self._monotonic() - self.renewed_at >= self.renew_deadline:
                return

    async def try_acquire_or_renew(self, within: float = 10.0) -> bool:
        """One attempt: whether this candidate holds the Lease afterwards."""
        # The renew deadline counts from when a successful attempt *began* (pessimistic: the
        # write may have landed at any point after it).
        began = self._monotonic()
        try:
            ok = await self._attempt(within)
        finally:
            self.attempts += 1
        if ok:
            self.renewed_at = began
        return ok

    async def _attempt(self, within: float) -> bool:
        self._lost_to = ""
        now = self._wall()
        response = await self._call("GET", self._item, within=within)
        if response is None:
            return False
        if response.status == 404:
            return await self._create(now, within)
        if not response.ok:
            return False
        try:
            current = _LEASE.decode(response.body)
        except msgspec.DecodeError:
            return False
        self._observe(current)
        spec = current.spec
        held_by_other = spec.holder_identity not in ("", self.identity)
        if held_by_other:
            duration = spec.lease_duration_seconds or self.lease_duration
            if self._observed_at + duration > self._monotonic():
                if self.leading:
                    self._lost_to = spec.holder_identity
                return False
        ours = spec.holder_identity == self.identity
        updated = Lease(
            metadata=LeaseMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=current.metadata.resource_version,
            ),
            spec=LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=self.lease_duration,
                acquire_time=spec.acquire_time if ours else micro_time(now),
                renew_time=micro_time(now),
                lease_transitions=spec.lease_transitions + (0 if ours else 1),
            ),
        )
        return await self._write("PUT", self._item, updated, within)

    async def _create(self, now: float, within: float) -> bool:
        lease = Lease(
            metadata=LeaseMeta(name=self.name, namespace=self.namespace),
            spec=LeaseSpec(
                holder_identity=self.identity,
                lease_duration_seconds=self.lease_duration,
                acquire_time=micro_time(now),
                renew_time=micro_time(now),
                lease_transitions=0,
            ),
        )
        return await self._write("POST", self._collection, lease, within)

    async def _write(self, method: str, path: str, lease: Lease, within: float) -> bool:
        # A 409 is the normal end of a race (another candidate wrote first): not leader.
        response = await self._call(method, path, msgspec.to_builtins(lease), within=within)
        if response is None or not response.ok:
            return False
        with contextlib.suppress(msgspec.DecodeError):
            self._observe(_LEASE.decode(response.body))
        return True

    def _observe(self, lease: Lease) -> None:
        old = self._observed
        if old is None or old.spec != lease.spec:
            self._observed_at = self._monotonic()
        self._observed = lease

    async def release(self) -> None:
        """Give the Lease up: an empty holder lets a standby take it at its next try."""
        current = self._observed
        if current is None or current.spec.holder_identity != self.identity:
            return
        now = micro_time(self._wall())
        released = Lease(
            metadata=LeaseMeta(
                name=self.name,
                namespace=self.namespace,
                resource_version=current.metadata.resource_version,
            ),
            spec=LeaseSpec(
                holder_identity="",
                lease_duration_seconds=1,
                acquire_time=now,
                renew_time=now,
                lease_transitions=current.spec.lease_transitions,
            ),
        )
        if await self._write("PUT", self._item, released, self.retry_period):
            log.info("released the lease", identity=self.identity)

    async def _call(
        self, method: str, path: str, body: Any = None, *, within: float
    ) -> Response | None:
        try:
            response = await self.api.request(
                method, path, body=body, request_timeout=max(within, 0.1)
            )
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.warning("lease request failed", method=method, error=str(exc) or type(exc).__name__)
            self._error("connection")
            return None
        if not response.ok and response.status not in (404, 409):
            log.warning(
                "lease request refused",
                method=method,
                code=response.status,
                message=response.status_message(),
            )
            self._error(response.status)
        return response

    def _error(self, code: int | str) -> None:
        if self._on_error is not None:
            self._on_error(self.api.cluster, code)
