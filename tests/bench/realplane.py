"""What the benches that put kbatchd beside an upstream component on one real control plane
(`gang_vs_scheduler`, `job_vs_upstream`, `jobset_vs_upstream`, `gang_vs_kueue`) share: a
namespace per phase made and removed, the nodes' start-up taints waited out, raw watches and
lists, and the API calls of each side counted from kube-apiserver's audit log
(`ControlPlane.start(audit=True)`)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Generic, TypeVar

import aiohttp
import anyio
import msgspec
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.processes import daemon_config, eventually

KBATCHD_USER = "system:serviceaccount:kube-system:kbatchd"
WRITES = frozenset({"create", "update", "patch", "delete", "deletecollection"})


class _User(msgspec.Struct):
    username: str = ""


class _Status(msgspec.Struct):
    code: int = 0


class AuditEvent(msgspec.Struct):
    """The fields of one audit line that the counts read."""

    auditID: str
    verb: str
    user: _User
    requestReceivedTimestamp: str
    userAgent: str = ""
    objectRef: dict[str, Any] | None = None
    responseStatus: _Status | None = None


@dataclass
class Calls:
    all: int = 0
    writes: int = 0
    by: dict[str, int] = field(default_factory=dict)  # "verb resource[/sub]" -> count
    refused: dict[str, int] = field(default_factory=dict)  # "verb resource[/sub] code" -> count


def merged(*parts: Calls) -> Calls:
    """The sum of several callers' counts."""
    total = Calls()
    for part in parts:
        total.all += part.all
        total.writes += part.writes
        for key, value in part.by.items():
            total.by[key] = total.by.get(key, 0) + value
        for key, value in part.refused.items():
            total.refused[key] = total.refused.get(key, 0) + value
    return total


def _received_after(log: Path, stamp: str) -> bool:
    """Whether the last 64 KiB of the audit log hold a request received after `stamp`."""
    decoder = msgspec.json.Decoder(AuditEvent)
    with log.open("rb") as lines:
        lines.seek(max(0, log.stat().st_size - 65_536))
        tail = lines.read().splitlines()[1:]
    return any(decoder.decode(line).requestReceivedTimestamp > stamp for line in tail)


async def audit_logged_past(log: Path, moment: datetime) -> None:
    """Until the audit log holds a request received after `moment`: lines are written as
    requests complete, and kube-apiserver's clients (kwok's leases, the watches) keep it
    going, so the short requests that came before are in by then."""
    stamp = _stamp(moment)

    async def past() -> bool:
        return _received_after(log, stamp)

    await eventually(past, within=60, what="the audit log past the phase's end")


def _stamp(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def count_calls(
    log: Path,
    offset: int,
    begin: datetime,
    end: datetime,
    who: Callable[[AuditEvent], str | None],
) -> dict[str, Calls]:
    """The requests received from `begin` to `end`, read from `offset` on, counted under the
    name `who` gives each (None: not counted): each request once (a watch has a
    ResponseStarted and a ResponseComplete line)."""
    decoder = msgspec.json.Decoder(AuditEvent)
    first, last = _stamp(begin), _stamp(end)
    counted: set[str] = set()
    calls: dict[str, Calls] = {}
    with log.open("rb") as lines:
        lines.seek(offset)
        for line in lines:
            event = decoder.decode(line)
            if event.auditID in counted or not first <= event.requestReceivedTimestamp <= last:
                continue
            name = who(event)
            if name is None:
                continue
            counted.add(event.auditID)
            mine = calls.setdefault(name, Calls())
            mine.all += 1
            mine.writes += event.verb in WRITES
            ref = event.objectRef or {}
            what = f"{event.verb} {ref.get('resource', '?')}"
            what += f"/{ref['subresource']}" if ref.get("subresource") else ""
            mine.by[what] = mine.by.get(what, 0) + 1
            code = event.responseStatus.code if event.responseStatus else 0
            if code >= 400:
                mine.refused[f"{what} {code}"] = mine.refused.get(f"{what} {code}", 0) + 1
    return calls


async def make_namespace(api: client.ApiClient, name: str) -> None:
    core = client.CoreV1Api(api)
    body: Any = {"metadata": {"name": name}}
    await core.create_namespace(body)

    async def has_account() -> bool:
        listed = await core.list_namespaced_service_account(name)
        return bool(listed.items)

    await eventually(has_account, within=60, what=f"namespace {name}'s default ServiceAccount")


async def remove_namespace(api: client.ApiClient, name: str) -> None:
    """The namespace gone, its pods first (grace 0: kwok lets them go at once), so the next
    phase finds every node free."""
    core = client.CoreV1Api(api)
    for attempt in range(1, 11):
        try:
            await core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
            break
        except (ApiException, aiohttp.ClientPayloadError) as exc:
            # kube-apiserver ends a request after 60 s (a 504, or the answer listing the
            # deleted pods cut short): ten thousand pods take longer to delete than that, and
            # each try deletes more of them.
            timed_out = not isinstance(exc, ApiException) or exc.status == 504
            if not timed_out or attempt == 10:
                raise
    await core.delete_namespace(name, grace_period_seconds=0)

    async def gone() -> bool:
        listed = await core.list_namespace(field_selector=f"metadata.name={name}")
        return not listed.items

    await eventually(gone, within=300, what=f"namespace {name} removed")


class _NodeSpec(msgspec.Struct):
    taints: list[dict[str, Any]] | None = None


class _Node(msgspec.Struct):
    spec: _NodeSpec = msgspec.field(default_factory=_NodeSpec)


class _Nodes(msgspec.Struct):
    items: list[_Node]


async def schedulable(api: client.ApiClient, within: float = 300) -> None:
    """Every node free of taints. kube-controller-manager takes each new node's
    `node.kubernetes.io/not-ready` taint off at about 5 nodes a second (its eviction rate
    limit): 256 nodes are all schedulable about 55 s after the start, and a phase begun
    before would find part of the cluster closed (kbatchd refused gang_vs_scheduler's block
    gang three times so, `TopologyPlacementFailed: ... allows to fit only 224 out of 1000
    pod(s)`)."""

    core = client.CoreV1Api(api)
    decoder = msgspec.json.Decoder(_Nodes)

    async def untainted() -> bool:
        # Raw: the generated models took half a core to read 2,000 nodes every poll.
        answer: Any = await core.list_node(_preload_content=False)
        return all(not n.spec.taints for n in decoder.decode(await answer.read()).items)

    await eventually(untainted, within=within, what="every node without taints")


class _Event(msgspec.Struct):
    count: int = 0


class _Events(msgspec.Struct):
    items: list[_Event]


async def events_quiet(api: client.ApiClient, namespace: str, quiet: float) -> None:
    """Until the namespace's Events have stood still for `quiet` s (at most 60 s): controllers
    and schedulers write theirs after the fact, and those of what went before must not be
    counted as calls of what comes next (nor left out of what made them)."""
    core = client.CoreV1Api(api)
    decoder = msgspec.json.Decoder(_Events)
    last: tuple[int, int] | None = None
    since = time.perf_counter()
    with anyio.move_on_after(60):
        while True:
            answer: Any = await core.list_namespaced_event(namespace, _preload_content=False)
            items = decoder.decode(await answer.read()).items
            now, seen = time.perf_counter(), (len(items), sum(e.count for e in items))
            if seen != last:
                last, since = seen, now
            elif now - since >= quiet:
                return
            await anyio.sleep(0.5)


async def ok(answer: Any, what: str) -> None:
    """Read a raw (`_preload_content=False`) answer; fail naming `what` unless it is 2xx."""
    async with answer:
        body = await answer.read()
        if not 200 <= answer.status <= 299:
            raise RuntimeError(f"{what}: HTTP {answer.status}: {body[:300]!r}")


class _ListMeta(msgspec.Struct):
    resourceVersion: str = ""


class _ListHead(msgspec.Struct):
    metadata: _ListMeta


async def list_version(answer: Any) -> str:
    """The resourceVersion of a raw list answer: where a watch of what it listed starts."""
    return msgspec.json.decode(await answer.read(), type=_ListHead).metadata.resourceVersion


Object = TypeVar("Object")


class WatchEvent(msgspec.Struct, Generic[Object]):
    """One line of a raw watch (`watch_namespace`), its object decoded as `Object`."""

    type: str
    object: Object


class Owner(msgspec.Struct):
    name: str = ""
    uid: str = ""


class Condition(msgspec.Struct):
    type: str = ""
    status: str = ""


async def watch_namespace(
    list_call: Callable[..., Awaitable[Any]],
    namespace: str,
    version: str,
    decoder: msgspec.json.Decoder[Any],
    seen: Callable[[str, Any], None],
) -> None:
    """Every object `list_call` lists in `namespace` from `version` on, decoded raw by
    `decoder` (the generated models would cost this process, which shares 2 cores with what
    it measures, more than the watch), handed to `seen` with its event type; bookmarks only
    move the version. Re-watched whenever the server ends the stream."""
    while True:
        response: Any = await list_call(
            namespace,
            watch=True,
            resource_version=version,
            allow_watch_bookmarks=True,
            timeout_seconds=120,
            _preload_content=False,
            _request_timeout=150,
        )
        async with response:
            async for line in response.content:
                event = decoder.decode(line)
                if event.type == "ERROR":
                    raise RuntimeError(f"watch of {namespace}: {line[:300]!r}")
                version = event.object.metadata.resourceVersion or version
                if event.type != "BOOKMARK":
                    seen(event.type, event.object)


# The daemon's settings as `config/kbatchd.toml` ships them, not the tests' quicker ones: the
# failure back-off (10 s) and the tick that releases it are upstream's. Beside them
# `[reconcilers.job] workload_with_job`, as the control plane runs upstream's WorkloadWithJob
# gate: both Job controllers then give every new, unsuspended Job a Workload and a PodGroup.
PRODUCTION: Final[dict[str, Any]] = {
    "tick_seconds": 1.0,
    "watch_inactivity_seconds": 120.0,
    "retry_backoff_seconds": [1.0, 60.0],
    "api_retry_seconds": [1.0, 30.0],
    "act_retry_seconds": [0.1, 5.0],
}


def production_config(tmp: Path, kubeconfig: Path) -> Path:
    """The config of a daemon run as shipped (`PRODUCTION`) against the plane as `real`."""
    return daemon_config(
        tmp,
        kubeconfig,
        cluster="real",
        job={"backoff_base_seconds": 10.0, "workload_with_job": True},
        **PRODUCTION,
    )
