"""The same gangs scheduled by kbatchd and by kube-scheduler, one after the other on one real
control plane (`tests/realcluster`, Kubernetes 1.37.2: kube-scheduler with the
GenericWorkload and TopologyAwareWorkloadScheduling gates, scheduling.k8s.io/v1beta1 served;
kwok nodes, 2 blocks × 8 racks × 16 hosts × 8 GPUs).

Two scenarios, each played once with the pods' `schedulerName` "kbatchd" (the daemon running,
started as `gang_real` starts it) and once with "default-scheduler" (the daemon stopped), each
phase in a namespace of its own, removed before the next phase starts:

- `block`: one PodGroup of 1,000 one-GPU pods (gang minCount 1,000) required inside one block;
- `racks`: 200 PodGroups of 2–16 one-GPU pods (sizes from a fixed seed, 1,768 pods), each
  required inside one rack; any order of placing them fits the 16 racks of 128 GPUs;
- `wave`: a preemption wave. 32 low-priority PodGroups of 8 whole-node (8-GPU) pods, each
  required inside one rack and disrupted whole (`disruptionMode: {all: {}}`), fill every node;
  once all are bound, 6 high-priority PodGroups (16, 8, 8, 16, 8, 8 whole-node pods, each
  required inside one rack) arrive together. They fit only by preemption, and the fewest victims
  are 8 low groups (64 pods): one per 8-pod gang, two per 16-pod gang. Its figures are those of
  the high groups, from their creation on, plus the low pods deleted while they were placed.

Per scheduler, from a watch of the phase's pods: for each group, the time from its last pod
created (the create call answered) to all its pods bound (the watch showing `nodeName`),
median and max; pods bound per second from the first object created to the last pod bound;
the API calls the scheduler made while the phase ran (kube-apiserver's audit log:
kbatchd's ServiceAccount user, and kube-scheduler, which this control plane runs with the
admin certificate, by its user agent), writes and all, per admitted group; and whether every
group landed inside one domain of the level it requires (the nodes' labels). A group one
scheduler admits and the other does not is reported with its PodGroup's conditions.

kbatchd's phases run first, kube-scheduler's after: on this machine, whose speed drifts, the
order is the same in every run. `python -m tests.bench.gang_vs_scheduler` runs it alone."""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec
from kubernetes_asyncio import client

from daemon.runtime import eventloop
from daemon.sim.topology import BLOCK_LABEL, GPU, RACK_LABEL
from tests.bench.realplane import (
    KBATCHD_USER,
    AuditEvent,
    Calls,
    WatchEvent,
    events_quiet,
    list_version,
    make_namespace,
    ok,
    remove_namespace,
    schedulable,
    watch_namespace,
)
from tests.bench.realplane import count_calls as count_calls_by
from tests.bench.table import Table
from tests.processes import daemon_config, kube_client, running_daemon
from tests.realcluster.controlplane import ControlPlane, ControlPlaneError

VERSION = "1.37.2"
TOPOLOGY = "blocks=2,racks=8,hosts=16,gpus=8"
GROUP, API = "scheduling.k8s.io", "v1beta1"
KBATCHD, DEFAULT = "kbatchd", "default-scheduler"
SCHEDULER_AGENT = "kube-scheduler/"
# 1,768 pods. The 2–16 draws of most seeds total more than the 1,823 that fit in any order
# (see `rack_sizes`): this one is the first of the few tried that fits.
SEED = 42
RACK_GANGS = 200
CREATORS = 8
# A phase ends when every pod is bound, or when no pod has been bound for STALL s once all
# exist (what is left is then reported as not admitted), or after LIMIT s.
STALL, LIMIT = 60.0, 900.0
# A namespace's Events are written once they have not changed for QUIET s.
QUIET = 3.0
# Condition types a PodGroup's admission is written as: kbatchd's, kube-scheduler 1.37's.
SCHEDULED = ("PodGroupScheduled", "PodGroupInitiallyScheduled")


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    level: str  # the label every group must stay inside
    sizes: tuple[int, ...]  # pods per group
    gpus: int = 1  # per pod
    priority_class: str = ""
    whole: bool = False  # disrupted whole (disruptionMode all), or pod by pod
    prefix: str = "g"

    def groups(self) -> list[tuple[str, list[str]]]:
        """Each group's name and its pods' names."""
        groups = []
        for g, size in enumerate(self.sizes):
            name = f"{self.prefix}{g:03d}"
            groups.append((name, [f"{name}-{p}" for p in range(size)]))
        return groups


def rack_sizes() -> tuple[int, ...]:
    draw = random.Random(SEED)
    sizes = tuple(draw.randint(2, 16) for _ in range(RACK_GANGS))
    # A gang of s pods finds no rack only if each of the 16 racks has fewer than s of its 128
    # GPUs free: at least 16 × (129 - s) taken by the others, so a total below 2,064 - 15 s,
    # 1,824 for s = 16, fits in any order.
    assert sum(sizes) < 16 * 129 - 15 * 16, sum(sizes)
    return sizes


SCENARIOS = (
    Scenario("block", "1 gang of 1,000 pods, required block", BLOCK_LABEL, (1000,)),
    Scenario(
        "racks", f"{RACK_GANGS} gangs of 2–16 pods, each required rack", RACK_LABEL, rack_sizes()
    ),
)
# Priority classes of the wave, made once for the run.
CLASSES = {"bench-low": 100, "bench-high": 1000}
FILL = Scenario(
    "fill", "32 low gangs of 8 whole nodes", RACK_LABEL, (8,) * 32, 8, "bench-low", True, "l"
)
WAVE = Scenario(
    "wave",
    "a wave of 6 high gangs (64 whole nodes) over 32 low ones filling every node",
    RACK_LABEL,
    (16, 8, 8, 16, 8, 8),
    8,
    "bench-high",
    prefix="h",
)
FEWEST_VICTIMS = 8  # low groups: 512 GPUs needed, 64 freed by each


def _objects(
    scenario: Scenario, scheduler: str, namespace: str
) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    gangs = []
    priority = {"priorityClassName": scenario.priority_class} if scenario.priority_class else {}
    for name, members in scenario.groups():
        spec: dict[str, Any] = {
            "schedulingPolicy": {"gang": {"minCount": len(members)}},
            "schedulingConstraints": {"topology": [{"key": scenario.level}]},
            **priority,
        }
        if scenario.whole:
            spec["disruptionMode"] = {"all": {}}
        group = {
            "apiVersion": f"{GROUP}/{API}",
            "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": spec,
        }
        gpus = {"requests": {GPU: str(scenario.gpus)}, "limits": {GPU: str(scenario.gpus)}}
        pods = [
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": member, "namespace": namespace},
                "spec": {
                    "schedulerName": scheduler,
                    "schedulingGroup": {"podGroupName": name},
                    "restartPolicy": "Never",
                    # Victims go at once: a preemption waits out their grace period.
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "main", "image": "x", "resources": gpus}],
                    **priority,
                },
            }
            for member in members
        ]
        gangs.append((group, pods))
    return gangs


# -- the watch ------------------------------------------------------------------------------


class _Meta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""


class _Spec(msgspec.Struct):
    nodeName: str = ""


class _Pod(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _Spec = msgspec.field(default_factory=_Spec)


@dataclass
class _Phase:
    scenario: Scenario
    scheduler: str
    namespace: str
    created: dict[str, float] = field(default_factory=dict)  # pod -> its create answered
    bound: dict[str, tuple[float, str]] = field(default_factory=dict)  # pod -> (seen, node)
    deleted: set[str] = field(default_factory=set)
    start: float = 0.0
    changed: anyio.Event = field(default_factory=anyio.Event)
    members: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.members = frozenset(p for _, pods in self.scenario.groups() for p in pods)

    def seen(self, kind: str, pod: _Pod) -> None:
        """Deletions of any pod of the namespace, bindings of the scenario's pods."""
        name = pod.metadata.name
        if kind == "DELETED":
            self.deleted.add(name)
        elif pod.spec.nodeName and name not in self.bound and name in self.members:
            self.bound[name] = (time.perf_counter(), pod.spec.nodeName)
            self.changed.set()
            self.changed = anyio.Event()


async def _create(
    api: client.ApiClient,
    phase: _Phase,
    gangs: Iterable[tuple[dict[str, Any] | None, list[Any]]],
) -> None:
    """Each gang's PodGroup (None: already made), then its pods, one after the other."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for group, pods in gangs:
        ns = phase.namespace
        if group is not None:
            await ok(
                await custom.create_namespaced_custom_object(
                    GROUP, API, ns, "podgroups", group, _preload_content=False
                ),
                f"PodGroup {group['metadata']['name']}",
            )
        for pod in pods:
            await ok(
                await core.create_namespaced_pod(ns, pod, _preload_content=False),
                f"Pod {pod['metadata']['name']}",
            )
            phase.created[pod["metadata"]["name"]] = time.perf_counter()


async def _podgroups(api: client.ApiClient, namespace: str) -> dict[str, dict[str, Any]]:
    listed = await client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, API, namespace, "podgroups"
    )
    return {g["metadata"]["name"]: g for g in listed["items"]}


def _condition(group: dict[str, Any]) -> dict[str, Any]:
    for condition in (group.get("status") or {}).get("conditions") or ():
        if condition.get("type") in SCHEDULED:
            return dict(condition)
    return {}


async def _play(
    api: client.ApiClient, scenario: Scenario, scheduler: str, namespace: str
) -> _Phase:
    """The scenario's gangs created in `namespace` (made already), and its pods watched until
    all are bound or the phase gives up."""
    phase = _Phase(scenario, scheduler, namespace)
    answer: Any = await client.CoreV1Api(api).list_namespaced_pod(
        phase.namespace, _preload_content=False
    )
    version = await list_version(answer)
    gangs = _objects(scenario, scheduler, phase.namespace)
    total = sum(scenario.sizes)
    async with anyio.create_task_group() as tasks:
        decoder = msgspec.json.Decoder(WatchEvent[_Pod])
        list_pods = client.CoreV1Api(api).list_namespaced_pod
        tasks.start_soon(watch_namespace, list_pods, phase.namespace, version, decoder, phase.seen)
        phase.start = time.perf_counter()
        # A few creators at once: one alone waits on every round trip. A gang's pods are
        # created by one creator, except the one big gang's, which all of them share.
        shares: list[list[tuple[dict[str, Any] | None, list[dict[str, Any]]]]]
        if len(gangs) == 1:
            [(group, pods)] = gangs
            await _create(api, phase, [(group, [])])
            shares = [[(None, pods[k::CREATORS])] for k in range(CREATORS)]
        else:
            shares = [list(gangs[k::CREATORS]) for k in range(CREATORS)]
        async with anyio.create_task_group() as creators:
            for share in shares:
                creators.start_soon(_create, api, phase, share)
        with anyio.move_on_after(LIMIT - (time.perf_counter() - phase.start)):
            while len(phase.bound) < total:
                with anyio.move_on_after(STALL):
                    await phase.changed.wait()
                    continue
                break  # nothing bound for STALL s
        tasks.cancel_scope.cancel()
    return phase


# -- the audit log --------------------------------------------------------------------------


def count_calls(log: Path, offset: int, begin: datetime, end: datetime) -> dict[str, Calls]:
    """The requests kbatchd (its ServiceAccount) and kube-scheduler (its user agent) made from
    `begin` to `end`, read from `offset` on."""

    def who(event: AuditEvent) -> str | None:
        if event.user.username == KBATCHD_USER:
            return KBATCHD
        return DEFAULT if event.userAgent.startswith(SCHEDULER_AGENT) else None

    calls = count_calls_by(log, offset, begin, end, who)
    return {KBATCHD: calls.get(KBATCHD, Calls()), DEFAULT: calls.get(DEFAULT, Calls())}


# -- the figures ----------------------------------------------------------------------------


@dataclass
class Result:
    scenario: Scenario
    scheduler: str
    latencies: dict[str, float]  # admitted group -> last pod created to all bound
    rate: float  # pods bound per second
    calls: Calls
    one_domain: int  # admitted groups inside one domain of their level
    not_admitted: dict[str, str]  # group -> its condition (or what is known)
    # The groups that were there before (a wave's low ones): those that lost pods while the
    # scenario was placed -> (pods deleted, pods it had).
    victims: dict[str, tuple[int, int]] = field(default_factory=dict)


def _result(
    phase: _Phase,
    groups: dict[str, dict[str, Any]],
    labels: dict[str, dict[str, str]],
    calls: Calls,
) -> Result:
    scenario = phase.scenario
    latencies, not_admitted, one_domain = {}, {}, 0
    for name, pods in scenario.groups():
        if all(p in phase.bound for p in pods):
            done = max(phase.bound[p][0] for p in pods)
            latencies[name] = done - max(phase.created[p] for p in pods)
            domains = {labels[phase.bound[p][1]].get(scenario.level) for p in pods}
            one_domain += len(domains) == 1
        else:
            condition = _condition(groups.get(name, {}))
            bound = sum(p in phase.bound for p in pods)
            not_admitted[name] = (
                f"{bound}/{len(pods)} bound; {condition.get('type', 'no condition')}="
                f"{condition.get('status', '')} {condition.get('reason', '')}: "
                f"{condition.get('message', '')}"
            )
    binds = [seen for seen, _ in phase.bound.values()]
    rate = len(binds) / (max(binds) - phase.start) if binds else 0.0
    return Result(scenario, phase.scheduler, latencies, rate, calls, one_domain, not_admitted)


async def _scheduled_written(api: client.ApiClient, phase: _Phase) -> dict[str, dict[str, Any]]:
    """The phase's PodGroups once every admitted one says so in its status (or after 15 s):
    the status write belongs to the phase's calls."""
    admitted = {
        name for name, pods in phase.scenario.groups() if all(p in phase.bound for p in pods)
    }
    groups: dict[str, dict[str, Any]] = {}
    with anyio.move_on_after(15):
        while True:
            groups = await _podgroups(api, phase.namespace)
            written = {n for n, g in groups.items() if _condition(g).get("status") == "True"}
            if admitted <= written:
                break
            await anyio.sleep(0.5)
    return groups


async def _priority_classes(api: client.ApiClient) -> None:
    scheduling = client.SchedulingV1Api(api)
    for name, value in CLASSES.items():
        body: Any = {"metadata": {"name": name}, "value": value}
        await scheduling.create_priority_class(body)


async def _phase(
    api: client.ApiClient,
    plane: ControlPlane,
    scenario: Scenario,
    scheduler: str,
    fill: Scenario | None = None,
) -> Result:
    """The scenario played by `scheduler` in a namespace of its own; with `fill`, once the
    fill's gangs are all bound there, and what the scenario took of them."""
    print(f"gang_vs_scheduler: {scenario.name} with {scheduler}", flush=True)
    namespace = f"{scenario.name}-{scheduler}"
    await make_namespace(api, namespace)
    if fill is not None:
        filled = await _play(api, fill, scheduler, namespace)
        took = max((t for t, _ in filled.bound.values()), default=filled.start) - filled.start
        print(
            f"  {fill.name}: {len(filled.bound)}/{sum(fill.sizes)} pods bound in {took:.1f} s",
            flush=True,
        )
        if len(filled.bound) < sum(fill.sizes):
            await remove_namespace(api, namespace)
            raise RuntimeError(
                f"{scheduler} bound {len(filled.bound)} of the {sum(fill.sizes)} pods of "
                f"{fill.title}: the {scenario.name} scenario needs them all"
            )
        await events_quiet(api, namespace, QUIET)
    offset = plane.audit_log.stat().st_size
    begin = datetime.now(UTC)
    phase = await _play(api, scenario, scheduler, namespace)
    groups = await _scheduled_written(api, phase)
    await events_quiet(api, namespace, QUIET)
    await anyio.sleep(1)  # the audit log is written as requests complete
    end = datetime.now(UTC)
    calls = count_calls(plane.audit_log, offset, begin, end)[scheduler]
    nodes = await client.CoreV1Api(api).list_node()
    labels = {n.metadata.name: dict(n.metadata.labels or {}) for n in nodes.items}
    result = _result(phase, groups, labels, calls)
    for name, pods in fill.groups() if fill is not None else ():
        if lost := sum(p in phase.deleted for p in pods):
            result.victims[name] = (lost, len(pods))
    print(
        f"  {len(result.latencies)}/{len(scenario.sizes)} groups admitted, "
        f"{len(phase.bound):,}/{sum(scenario.sizes):,} pods bound; calls: "
        + ", ".join(f"{k} {v}" for k, v in sorted(calls.by.items(), key=lambda kv: -kv[1])),
        flush=True,
    )
    for name, why in sorted(result.not_admitted.items())[:5]:
        print(f"  not admitted: {name}: {why}", flush=True)
    if fill is not None:
        print(f"  victims: {_victims(result)}", flush=True)
    await remove_namespace(api, phase.namespace)
    return result


def _seconds(values: list[float]) -> str:
    if not values:
        return "none admitted"
    if len(values) == 1:
        return f"{values[0]:.2f} s"
    return f"median {statistics.median(values):.2f} s, max {max(values):.2f} s"


def _victims(result: Result) -> str:
    whole = sum(lost == size for lost, size in result.victims.values())
    pods = sum(lost for lost, _ in result.victims.values())
    return (
        f"{len(result.victims)} groups ({whole} whole, {len(result.victims) - whole} in part), "
        f"{pods} pods"
    )


def report(table: Table, results: list[Result]) -> None:
    for scenario in (*SCENARIOS, WAVE):
        mine = {r.scheduler: r for r in results if r.scenario is scenario}
        if len(mine) < 2:
            continue
        where = f"gang vs kube-scheduler {VERSION}, {scenario.title}"

        def both(show: Any, mine: dict[str, Result] = mine) -> str:
            return f"kbatchd {show(mine[KBATCHD])}; kube-scheduler {show(mine[DEFAULT])}"

        table.add(
            f"{where}: last pod created → all its pods bound",
            both(lambda r: _seconds(sorted(r.latencies.values()))),
        )
        table.add(f"{where}: pods bound per second", both(lambda r: f"{r.rate:.0f}/s"))
        table.add(
            f"{where}: API calls per admitted group (writes / all)",
            both(
                lambda r: (
                    f"{r.calls.writes / max(len(r.latencies), 1):.1f} / "
                    f"{r.calls.all / max(len(r.latencies), 1):.1f}"
                )
            ),
        )
        table.add(
            f"{where}: admitted, and inside one {scenario.level.rsplit('-', 1)[-1]}",
            both(
                lambda r: (
                    f"{len(r.latencies)}/{len(r.scenario.sizes)}, {r.one_domain}/{len(r.latencies)}"
                )
            ),
        )
        if scenario is WAVE:
            table.add(
                f"{where}: low groups evicted (the fewest that make room: {FEWEST_VICTIMS} whole)",
                both(_victims),
            )
        only = []
        for one, other in ((KBATCHD, DEFAULT), (DEFAULT, KBATCHD)):
            for name in sorted(mine[one].latencies):
                if name in mine[other].not_admitted:
                    only.append(f"{name} only by {one} ({other}: {mine[other].not_admitted[name]})")
        table.add(f"{where}: admitted by one only", "; ".join(only) or "none")


async def run(table: Table, only: frozenset[str] = frozenset()) -> None:
    """Every scenario, or those named in `only`."""
    plain = [s for s in SCENARIOS if not only or s.name in only]
    wave = not only or WAVE.name in only
    print(f"gang_vs_scheduler: kbatchd and kube-scheduler {VERSION} on {TOPOLOGY}", flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        try:
            plane = await anyio.to_thread.run_sync(
                lambda: ControlPlane.start(VERSION, tmp / "plane", topology=TOPOLOGY, audit=True)
            )
        except ControlPlaneError as exc:
            table.add("gang vs kube-scheduler", f"not run: {exc}")
            return
        results: list[Result] = []
        try:
            config = daemon_config(tmp, plane.kbatchd_kubeconfig, cluster="real")
            async with kube_client(plane.admin_kubeconfig) as api:
                await schedulable(api)
                await _priority_classes(api)
                async with running_daemon(config):
                    for scenario in plain:
                        results.append(await _phase(api, plane, scenario, KBATCHD))
                    if wave:
                        results.append(await _phase(api, plane, WAVE, KBATCHD, FILL))
                for scenario in plain:
                    results.append(await _phase(api, plane, scenario, DEFAULT))
                if wave:
                    results.append(await _phase(api, plane, WAVE, DEFAULT, FILL))
        finally:
            if len(results) < 2 * (len(plain) + wave):
                print(plane.logs("kube-scheduler", 30), flush=True)
            await anyio.to_thread.run_sync(plane.stop)
    report(table, results)


if __name__ == "__main__":
    # `python -m tests.bench.gang_vs_scheduler [block] [racks] [wave]`: those scenarios only.
    table = Table()
    eventloop.run(run, table, frozenset(sys.argv[1:]))
    print(table.render())
