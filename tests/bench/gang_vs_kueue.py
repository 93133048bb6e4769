"""Gang admission with topology-aware placement: kbatchd's and Kueue's (sigs.k8s.io/kueue, the
pinned KUEUE_VERSION, built by `build.sh --kueue-manager`), one after the other on one real
control plane (`tests/realcluster`, Kubernetes 1.37.2 with its audit log; kwok nodes in the
topology of Kueue's TAS performance test and of the gang section: 1 block × 10 racks × 64
hosts, 96 CPUs each, labelled with block, rack and host).

The workloads are the gang section's (`tests.bench.gang`): 15,000 of 2, 4 or 8 pods (1, 2 or 4
CPUs each, running 0.2, 0.5 or 1 s), half requiring one rack and half preferring one, times
`--scale` (the 640 nodes are not scaled). Unlike Kueue's performance test, there are no cohorts
and one ClusterQueue, and the workloads are not paced: each side finds all of them waiting when
it is released, so that what is measured is how fast it admits a standing backlog, not how
fast the bench creates. Each is played once by each side, in a namespace of its own removed
afterwards:

- kbatchd (the daemon running with the shipped settings, `realplane.production_config`; gang
  admission is on in them): a scheduling.k8s.io/v1beta1 PodGroup of gang minCount = its pods
  (the rack required as its `schedulingConstraints.topology`) and its pods (`schedulerName:
  kbatchd`; a preferred rack as Kueue's `podset-preferred-topology` annotation, which kbatchd
  reads). kbatchd admits, places and binds each gang itself. The daemon is not running while
  they are created; it is released by starting it (so its start and first list count).
- Kueue (its manager running, `ControlPlane.start_kueue_manager`; the daemon stopped): a
  batch/v1 Job of parallelism = completions = its pods, labelled with the LocalQueue's name,
  its pod template annotated `kueue.x-k8s.io/podset-required-topology` or
  `podset-preferred-topology` (the rack label). A Topology (block, rack, host: the nodes'
  label keys), a ResourceFlavor with that topology (its node label: `type: kwok`, which every
  node carries), a ClusterQueue whose CPU quota is the whole cluster's, and a LocalQueue.
  Kueue's webhook suspends each Job and Kueue makes its Workload; the ClusterQueue's
  `stopPolicy` is Hold while they are created, and Kueue is released, once every Workload
  exists, by setting it to None. Kueue then admits each Workload with a topology assignment;
  kube-controller-manager's Job controller (its defaults: 20 QPS / 30 burst) then creates the
  pods, Kueue takes their topology scheduling gate off with its node selector, and
  kube-scheduler binds them.

The workloads are created by 8 creators with admin credentials (not counted). The figures of a
phase, from a watch of its pods (and of Kueue's Workloads):

- wall time from the release to the last pod Succeeded, to the last pod bound, and to the
  phase settled (kbatchd: the last pod Succeeded; Kueue: every Workload `Finished`, which waits
  for kube-controller-manager's Job controller to mark each Job Complete);
- workloads admitted per second, release to the last admitted: kbatchd's gang admitted
  when its last pod is bound (kbatchd admits by binding); Kueue's when its Workload turns
  `Admitted` (before any of its pods exists or is bound);
- API calls from kube-apiserver's audit log, from the first create until every pod has
  Succeeded (and, for Kueue, every Workload is `Finished`) and the namespace's Events have
  stood still for 3 s: kbatchd's ServiceAccount; Kueue's manager by its user agent (`kueue/…`)
  plus kube-scheduler's (`kube-scheduler/…`, its binds, pod status patches and Events), which
  does the binding kbatchd does itself; kube-controller-manager's Job controller listed
  beside (it creates Kueue's pods, as the bench creates kbatchd's);
- CPU seconds over the same span (/proc/PID/stat, utime + stime): the daemon's (from its
  start); Kueue's manager's and kube-scheduler's; kube-controller-manager's beside;
- placement: every admitted workload that requires a rack has all its pods on nodes of one
  rack (the nodes' labels), the same rule for both; how many preferring one got one is shown.

The issue's goal, printed beside: kbatchd at ≥ 3× Kueue's admission throughput, with fewer API
writes per workload.

Kueue runs with its install's configuration (`controller_manager_config.yaml`,
`--zap-log-level=2`), its webhooks served and registered by URL, the batch/v1 Job integration
only, and client limits of 1,000 QPS / 2,000 burst instead of the shipped 50 / 100 (the
limits Kueue's TAS performance test gives its load generator on a cluster, `--qps=1000
--burst=2000`; the minimal Kueue that test runs keeps 50 / 100), so that its client's rate
limit does not bound what is measured. Kueue's manager reads a metrics certificate from the
fixed path `/etc/kueue/metrics/certs` whatever it serves; the plane's certificate is put there
for the run and removed after (`ControlPlane.start_kueue_manager`), and the Kueue phase is
reported as not run where that path cannot be written.

kbatchd's phase runs first, Kueue's after, in the same order in every run.
`python -m tests.bench.gang_vs_kueue [--scale F]` runs it alone: the 15,000 workloads × F
(default 0.02, as in `make bench`: 300 workloads, about 10 minutes on 2 cores; `--scale 0.1`,
1,500 workloads, about 31 minutes, most of them kube-controller-manager's Job controller
creating Kueue's pods and completing its Jobs at 20 QPS)."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec
from anyio import TASK_STATUS_IGNORED
from anyio.abc import TaskStatus
from kubernetes_asyncio import client

from daemon.runtime import eventloop
from daemon.sim.topology import BLOCK_LABEL, HOST_LABEL, RACK_LABEL
from tests.bench.gang import SHAPES, TOPOLOGY, WORKLOADS, _objects
from tests.bench.proc import cpu_seconds
from tests.bench.realplane import (
    KBATCHD_USER,
    AuditEvent,
    Calls,
    Condition,
    Owner,
    WatchEvent,
    count_calls,
    events_quiet,
    list_version,
    make_namespace,
    merged,
    ok,
    production_config,
    remove_namespace,
    schedulable,
    watch_namespace,
)
from tests.bench.table import Table
from tests.processes import kube_client, running_daemon
from tests.realcluster.controlplane import VERSIONS, ControlPlane, ControlPlaneError

VERSION: Final = "1.37.2"
KUEUE_VERSION: Final = VERSIONS["KUEUE_VERSION"]
KBATCHD, KUEUE = "kbatchd", "kueue"
SCHEDULER, CONTROLLER_MANAGER = "kube-scheduler", "kube-controller-manager"
JOB_CONTROLLER = "job-controller"
KUEUE_AGENT, SCHEDULER_AGENT = "kueue/", "kube-scheduler/"
PODGROUPS: Final = ("scheduling.k8s.io", "v1beta1", "podgroups")
KUEUE_API: Final = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
REQUIRED = "kueue.x-k8s.io/podset-required-topology"
PREFERRED = "kueue.x-k8s.io/podset-preferred-topology"
JOB_NAME = "batch.kubernetes.io/job-name"
TOPOLOGY_NAME, FLAVOR, CLUSTER_QUEUE, LOCAL_QUEUE = "default-topology", "tas-flavor", "cq", "lq"
# Every node carries it (`daemon.sim.topology.node`); a TAS flavor needs one node label.
FLAVOR_LABEL: Final = {"type": "kwok"}
CLUSTER_CPUS: Final = 640 * 96
# Kueue's client limits: its TAS performance test's on a cluster (see the docstring).
KUEUE_QPS, KUEUE_BURST = 1_000.0, 2_000
# `make bench`'s size, and the command's unless told: 300 workloads (1,400 pods).
DEFAULT_SCALE = 0.02
CREATORS = 8
# A phase ends when every pod has Succeeded, or when no pod has changed for STALL s, or after
# LIMIT s (what is missing is then reported).
STALL, LIMIT = 120.0, 1_800.0
QUIET = 3.0
GOAL_SPEED = 3.0


# -- the objects ----------------------------------------------------------------------------


def _gang(i: int) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The gang section's workload `i` as kbatchd takes it: a v1beta1 PodGroup (the version
    Kubernetes 1.37 serves; its spec is v1alpha2's) and its member pods."""
    group, members = _objects(i)
    group["apiVersion"] = "/".join(PODGROUPS[:2])
    return group, members


def _job(i: int) -> dict[str, Any]:
    """The same workload as Kueue takes it: a batch/v1 Job in the LocalQueue, the rack required
    or preferred by its pod set's annotation."""
    pods, run_seconds, cpu = SHAPES[i % 3]
    topology = REQUIRED if i % 2 == 0 else PREFERRED
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"w{i:05d}", "labels": {QUEUE_LABEL: LOCAL_QUEUE}},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "backoffLimit": 0,
            "template": {
                "metadata": {
                    "annotations": {
                        "sim.kbatchd.dev/run-seconds": run_seconds,
                        topology: RACK_LABEL,
                    }
                },
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {"name": "main", "image": "x", "resources": {"requests": {"cpu": cpu}}}
                    ],
                },
            },
        },
    }


def _kueue_setup() -> list[dict[str, Any]]:
    """The cluster-wide Kueue objects: Topology, ResourceFlavor and ClusterQueue."""
    api = "/".join(KUEUE_API)
    levels = [{"nodeLabel": label} for label in (BLOCK_LABEL, RACK_LABEL, HOST_LABEL)]
    quota = {"name": "cpu", "nominalQuota": str(CLUSTER_CPUS)}
    return [
        {
            "apiVersion": api,
            "kind": "Topology",
            "metadata": {"name": TOPOLOGY_NAME},
            "spec": {"levels": levels},
        },
        {
            "apiVersion": api,
            "kind": "ResourceFlavor",
            "metadata": {"name": FLAVOR},
            "spec": {"nodeLabels": FLAVOR_LABEL, "topologyName": TOPOLOGY_NAME},
        },
        {
            "apiVersion": api,
            "kind": "ClusterQueue",
            "metadata": {"name": CLUSTER_QUEUE},
            "spec": {
                "namespaceSelector": {},
                "resourceGroups": [
                    {
                        "coveredResources": ["cpu"],
                        "flavors": [{"name": FLAVOR, "resources": [quota]}],
                    }
                ],
            },
        },
    ]


def _local_queue(namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "/".join(KUEUE_API),
        "kind": "LocalQueue",
        "metadata": {"name": LOCAL_QUEUE, "namespace": namespace},
        "spec": {"clusterQueue": CLUSTER_QUEUE},
    }


# -- the watches ----------------------------------------------------------------------------


class _Meta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""
    labels: dict[str, str] | None = None
    ownerReferences: list[Owner] | None = None


class _Group(msgspec.Struct):
    podGroupName: str = ""


class _PodSpec(msgspec.Struct):
    nodeName: str = ""
    schedulingGroup: _Group | None = None


class _PodStatus(msgspec.Struct):
    phase: str = ""


class _Pod(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)
    status: _PodStatus = msgspec.field(default_factory=_PodStatus)


class _WorkloadStatus(msgspec.Struct):
    conditions: list[Condition] | None = None


class _Workload(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _WorkloadStatus = msgspec.field(default_factory=_WorkloadStatus)


def _workload_of(pod: _Pod) -> str:
    """The workload a pod belongs to: its Job (Kueue's), or its PodGroup (kbatchd's)."""
    job = (pod.metadata.labels or {}).get(JOB_NAME)
    if job:
        return job
    return pod.spec.schedulingGroup.podGroupName if pod.spec.schedulingGroup else ""


def _true(conditions: list[Condition] | None, kind: str) -> bool:
    return any(c.type == kind and c.status == "True" for c in conditions or ())


@dataclass
class _Phase:
    controller: str
    namespace: str
    sizes: dict[str, int]  # workload -> its pods
    start: float = 0.0
    node: dict[str, str] = field(default_factory=dict)  # bound pod -> its node
    members: dict[str, set[str]] = field(default_factory=dict)  # workload -> its pods seen
    succeeded: set[str] = field(default_factory=set)
    admitted: dict[str, float] = field(default_factory=dict)  # workload -> when
    finished: set[str] = field(default_factory=set)  # Kueue's Workloads Finished
    queued: set[str] = field(default_factory=set)  # Kueue's Workloads made (by Job)
    last_bind: float = 0.0
    done: float = 0.0  # the last pod Succeeded
    last_change: float = field(default_factory=time.perf_counter)
    changed: anyio.Event = field(default_factory=anyio.Event)

    @property
    def pods(self) -> int:
        return sum(self.sizes.values())

    def _touch(self) -> None:
        self.last_change = time.perf_counter()
        self.changed.set()
        self.changed = anyio.Event()

    def pod(self, kind: str, pod: _Pod) -> None:
        name, workload = pod.metadata.name, _workload_of(pod)
        if kind == "DELETED" or workload not in self.sizes:
            return
        now = time.perf_counter()
        self.members.setdefault(workload, set()).add(name)
        if pod.spec.nodeName and name not in self.node:
            self.node[name] = pod.spec.nodeName
            self.last_bind = now
            bound = sum(p in self.node for p in self.members[workload])
            if self.controller == KBATCHD and bound == self.sizes[workload]:
                self.admitted.setdefault(workload, now)
        if pod.status.phase == "Succeeded" and name not in self.succeeded:
            self.succeeded.add(name)
            if len(self.succeeded) == self.pods:
                self.done = now
        self._touch()

    def workload(self, kind: str, workload: _Workload) -> None:
        owners = workload.metadata.ownerReferences or []
        if kind == "DELETED" or not owners:
            return
        job, conditions = owners[0].name, workload.status.conditions
        self.queued.add(job)
        if _true(conditions, "Admitted"):
            self.admitted.setdefault(job, time.perf_counter())
        if _true(conditions, "Finished"):
            self.finished.add(job)
        self._touch()

    def settled(self) -> bool:
        """Every pod Succeeded (and, for Kueue, every Workload Finished)."""
        if len(self.succeeded) < self.pods:
            return False
        return self.controller == KBATCHD or len(self.finished) == len(self.sizes)


async def _until_queued(phase: _Phase) -> None:
    """Until Kueue has made every Job's Workload (its queue held, none is admitted)."""
    with anyio.fail_after(LIMIT):
        while len(phase.queued) < len(phase.sizes):
            await phase.changed.wait()


async def _until_settled(phase: _Phase) -> bool:
    """Until the phase has settled (True), nothing has changed for STALL s, or LIMIT s have
    passed since its start (False)."""
    with anyio.move_on_after(LIMIT - (time.perf_counter() - phase.start)):
        while not phase.settled():
            with anyio.move_on_after(STALL):
                await phase.changed.wait()
                continue
            return False
        return True
    return False


# -- creating -------------------------------------------------------------------------------


async def _create_gangs(api: client.ApiClient, namespace: str, workloads: Iterable[int]) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for i in workloads:
        group, members = _gang(i)
        answer = await custom.create_namespaced_custom_object(
            *PODGROUPS[:2], namespace, PODGROUPS[2], group, _preload_content=False
        )
        await ok(answer, f"PodGroup {group['metadata']['name']}")
        for member in members:
            pod: Any = member
            answer = await core.create_namespaced_pod(namespace, pod, _preload_content=False)
            await ok(answer, f"Pod {member['metadata']['name']}")


async def _create_jobs(api: client.ApiClient, namespace: str, workloads: Iterable[int]) -> None:
    batch = client.BatchV1Api(api)
    for i in workloads:
        job: Any = _job(i)
        answer = await batch.create_namespaced_job(namespace, job, _preload_content=False)
        await ok(answer, f"Job {job['metadata']['name']}")


# -- the audit log --------------------------------------------------------------------------


def _who(event: AuditEvent) -> str | None:
    """kbatchd, Kueue's manager, kube-scheduler, or kube-controller-manager's controller by
    name (it runs with the admin certificate; its user agent names the controller)."""
    if event.user.username == KBATCHD_USER:
        return KBATCHD
    agent = event.userAgent
    if agent.startswith(KUEUE_AGENT):
        return KUEUE
    if agent.startswith(SCHEDULER_AGENT):
        return SCHEDULER
    if agent.startswith(f"{CONTROLLER_MANAGER}/"):
        return agent.rsplit("/", 1)[-1]
    return None


# -- a phase --------------------------------------------------------------------------------


class Result(msgspec.Struct, frozen=True):
    controller: str
    workloads: int
    created: float  # first create -> last create answered (before the release)
    done: float  # release -> last pod Succeeded; 0: not reached
    settled: float  # release -> `_Phase.settled`; 0: not reached
    bound: float  # release -> last pod bound
    admitted: int
    admit_span: float  # release -> last admitted
    calls: dict[str, Calls]  # by `_who`
    cpu: dict[str, float]  # by component
    one_rack: tuple[int, int]  # required workloads admitted inside one rack, admitted
    preferred_one_rack: tuple[int, int]

    @property
    def admit_rate(self) -> float:
        return self.admitted / self.admit_span if self.admit_span else 0.0

    @property
    def admitting(self) -> Calls:
        """The calls of the side that admits and binds: kbatchd; Kueue and kube-scheduler."""
        names = (KBATCHD,) if self.controller == KBATCHD else (KUEUE, SCHEDULER)
        return merged(*(self.calls.get(name, Calls()) for name in names))


def _in_one_rack(phase: _Phase, racks: dict[str, str], required: bool) -> tuple[int, int]:
    """(admitted workloads whose pods all sit in one rack, admitted workloads), among those
    that require a rack (or prefer one)."""
    inside = admitted = 0
    for workload, size in phase.sizes.items():
        if (int(workload[1:]) % 2 == 0) != required:
            continue
        pods = phase.members.get(workload, set())
        if len(pods) < size or not all(p in phase.node for p in pods):
            continue
        admitted += 1
        inside += len({racks.get(phase.node[p]) for p in pods}) == 1
    return inside, admitted


async def _phase(
    api: client.ApiClient,
    plane: ControlPlane,
    controller: str,
    workloads: int,
    pids: dict[str, int],
    release: Callable[[], Awaitable[dict[str, int]]],
) -> Result:
    """The workloads played by `controller` in a namespace of its own, created while it is
    held and then released (`release`, which returns the processes it started, by name);
    `pids`: the processes whose CPU is measured, by name."""
    print(f"gang_vs_kueue: {workloads:,} workloads with {controller}", flush=True)
    namespace = f"gang-{controller}"
    await make_namespace(api, namespace)
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    if controller == KUEUE:
        await ok(
            await custom.create_namespaced_custom_object(
                *KUEUE_API,
                namespace,
                "localqueues",
                _local_queue(namespace),
                _preload_content=False,
            ),
            "LocalQueue",
        )
    sizes = {f"w{i:05d}": SHAPES[i % 3][0] for i in range(workloads)}
    phase = _Phase(controller, namespace, sizes)
    pods_at = await list_version(await core.list_namespaced_pod(namespace, _preload_content=False))

    async def list_workloads(namespace: str, **options: Any) -> Any:
        return await custom.list_namespaced_custom_object(
            *KUEUE_API, namespace, "workloads", **options
        )

    offset = plane.audit_log.stat().st_size
    begin = datetime.now(UTC)
    cpu_at = {name: cpu_seconds(pid) for name, pid in pids.items()}
    async with anyio.create_task_group() as tasks:
        pod_events = msgspec.json.Decoder(WatchEvent[_Pod])
        tasks.start_soon(
            watch_namespace, core.list_namespaced_pod, namespace, pods_at, pod_events, phase.pod
        )
        if controller == KUEUE:
            answer = await list_workloads(namespace, _preload_content=False)
            workload_events = msgspec.json.Decoder(WatchEvent[_Workload])
            tasks.start_soon(
                watch_namespace,
                list_workloads,
                namespace,
                await list_version(answer),
                workload_events,
                phase.workload,
            )
        create = _create_gangs if controller == KBATCHD else _create_jobs
        began = time.perf_counter()
        async with anyio.create_task_group() as creators:
            for k in range(CREATORS):
                creators.start_soon(create, api, namespace, range(k, workloads, CREATORS))
        created = time.perf_counter() - began
        if controller == KUEUE:
            await _until_queued(phase)
        phase.start = time.perf_counter()
        started = await release()
        pids = pids | started
        cpu_at |= dict.fromkeys(started, 0.0)
        settled = await _until_settled(phase)
        settle = time.perf_counter() - phase.start if settled else 0.0
        tasks.cancel_scope.cancel()
    await events_quiet(api, namespace, QUIET)
    await anyio.sleep(1)  # the audit log is written as requests complete
    end = datetime.now(UTC)
    cpu = {name: cpu_seconds(pid) - cpu_at[name] for name, pid in pids.items()}
    calls = count_calls(plane.audit_log, offset, begin, end, _who)
    nodes = await core.list_node()
    racks = {n.metadata.name: (n.metadata.labels or {}).get(RACK_LABEL, "") for n in nodes.items}
    admitted = phase.admitted.values()
    result = Result(
        controller,
        workloads,
        created,
        phase.done - phase.start if phase.done else 0.0,
        settle,
        phase.last_bind - phase.start if phase.last_bind else 0.0,
        len(phase.admitted),
        max(admitted) - phase.start if admitted else 0.0,
        calls,
        cpu,
        _in_one_rack(phase, racks, required=True),
        _in_one_rack(phase, racks, required=False),
    )
    print(
        f"  created in {created:.1f} s; {'settled' if settled else 'NOT settled'}: "
        f"{len(phase.succeeded):,}/{phase.pods:,} pods Succeeded, {len(phase.node):,} bound, "
        f"{result.admitted:,}/{workloads:,} admitted"
        + (f", {len(phase.finished):,} Workloads Finished" if controller == KUEUE else "")
        + f"; CPU {', '.join(f'{k} {v:.1f} s' for k, v in cpu.items())}",
        flush=True,
    )
    for name, mine in sorted(calls.items()):
        print(f"  calls of {name}: {mine.all:,} ({mine.writes:,} writes): {_breakdown(mine)}")
    await remove_namespace(api, namespace)
    return result


# -- the figures ----------------------------------------------------------------------------


def _breakdown(calls: Calls) -> str:
    shown = ", ".join(f"{k} {v:,}" for k, v in sorted(calls.by.items(), key=lambda kv: -kv[1]))
    refused = ", ".join(f"{k} {v:,}" for k, v in sorted(calls.refused.items()))
    return (shown or "none") + (f"; refused: {refused}" if refused else "")


def _per(calls: Calls, workloads: int) -> str:
    """Writes per workload, then the writes by verb and resource per workload."""
    shown = ", ".join(
        f"{k} {v / workloads:.2f}"
        for k, v in sorted(calls.by.items(), key=lambda kv: -kv[1])
        if k.split(" ", 1)[0] in ("create", "update", "patch", "delete", "deletecollection")
    )
    return f"{calls.writes / workloads:.2f} ({shown or 'none'})"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value else "not reached"


def report(table: Table, results: list[Result]) -> None:
    mine = {r.controller: r for r in results}
    if len(mine) < 2:
        return
    ours, theirs = mine[KBATCHD], mine[KUEUE]
    total = sum(SHAPES[i % 3][0] for i in range(ours.workloads))
    where = (
        f"gang admission vs Kueue {KUEUE_VERSION} TAS on kube-apiserver {VERSION}, "
        f"{ours.workloads:,} workloads ({total:,} pods), 640 nodes"
    )
    table.add(
        f"{where}: released → last pod Succeeded (→ last pod bound; before the release, the "
        f"bench created kbatchd's PodGroups and pods, Kueue's Jobs, in)",
        f"kbatchd {_seconds(ours.done)} ({_seconds(ours.bound)}; {ours.created:.1f} s); Kueue "
        f"{_seconds(theirs.done)} ({_seconds(theirs.bound)}; {theirs.created:.1f} s)",
    )
    table.add(
        f"{where}: released → settled (kbatchd: last pod Succeeded; Kueue: every Workload "
        f"Finished, once kube-controller-manager's Job controller has marked its Job Complete)",
        f"kbatchd {_seconds(ours.settled)}; Kueue {_seconds(theirs.settled)}",
    )
    speed = ours.admit_rate / theirs.admit_rate if theirs.admit_rate else 0.0
    table.add(
        f"{where}: workloads admitted per second from a standing backlog, released → last "
        f"admitted (kbatchd: started, gang bound; Kueue: stopPolicy Hold → None, Workload "
        f"Admitted)",
        f"kbatchd {ours.admit_rate:.1f}/s ({ours.admitted:,} in {ours.admit_span:.1f} s); Kueue "
        f"{theirs.admit_rate:.1f}/s ({theirs.admitted:,} in {theirs.admit_span:.1f} s); "
        f"{speed:.2f}×",
        f"≥ {GOAL_SPEED:.0f}× Kueue's",
        speed >= GOAL_SPEED and ours.admitted == ours.workloads,
    )
    table.add(
        f"{where}: end to end, workloads per second (released → last pod Succeeded)",
        f"kbatchd {ours.workloads / ours.done if ours.done else 0:.1f}/s; Kueue "
        f"{theirs.workloads / theirs.done if theirs.done else 0:.1f}/s",
    )
    ours_calls, theirs_calls = ours.admitting, theirs.admitting
    job_controller = theirs.calls.get(JOB_CONTROLLER, Calls())
    table.add(
        f"{where}: API writes per workload of the admitting side (audit log)",
        f"kbatchd {_per(ours_calls, ours.workloads)}; Kueue manager + kube-scheduler "
        f"{_per(theirs_calls, theirs.workloads)} (Kueue alone "
        f"{theirs.calls.get(KUEUE, Calls()).writes / theirs.workloads:.2f}); beside, "
        f"kube-controller-manager's Job controller for Kueue's Jobs "
        f"{_per(job_controller, theirs.workloads)}",
        "fewer than Kueue's",
        ours_calls.writes < theirs_calls.writes,
    )
    table.add(
        f"{where}: CPU seconds (first create, or the daemon's start → settled)",
        f"kbatchd daemon {ours.cpu.get(KBATCHD, 0):.1f} s; Kueue manager "
        f"{theirs.cpu.get(KUEUE, 0):.1f} s + kube-scheduler {theirs.cpu.get(SCHEDULER, 0):.1f} s; "
        f"beside, kube-controller-manager {ours.cpu.get(CONTROLLER_MANAGER, 0):.1f} s vs "
        f"{theirs.cpu.get(CONTROLLER_MANAGER, 0):.1f} s",
    )
    table.add(
        f"{where}: admitted workloads requiring a rack with every pod in one rack (preferring "
        f"one: in one rack)",
        f"kbatchd {ours.one_rack[0]:,}/{ours.one_rack[1]:,} "
        f"({ours.preferred_one_rack[0]:,}/{ours.preferred_one_rack[1]:,}); Kueue "
        f"{theirs.one_rack[0]:,}/{theirs.one_rack[1]:,} "
        f"({theirs.preferred_one_rack[0]:,}/{theirs.preferred_one_rack[1]:,})",
        "all",
        all(r.one_rack[0] == r.one_rack[1] == (r.workloads + 1) // 2 for r in (ours, theirs)),
    )


async def _until_kueue_active(api: client.ApiClient, active: bool) -> None:
    """Until the ClusterQueue is active (its flavor and topology found, not stopped), or not."""
    custom = client.CustomObjectsApi(api)
    with anyio.fail_after(120):
        while True:
            queue: Any = await custom.get_cluster_custom_object(
                *KUEUE_API, "clusterqueues", CLUSTER_QUEUE
            )
            conditions = (queue.get("status") or {}).get("conditions") or ()
            if _true([Condition(c["type"], c["status"]) for c in conditions], "Active") == active:
                return
            await anyio.sleep(0.5)


async def _stop_policy(api: client.ApiClient, policy: str) -> None:
    """Set the ClusterQueue's `stopPolicy`: Hold admits nothing new, None admits again."""
    patch = [{"op": "add", "path": "/spec/stopPolicy", "value": policy}]
    await client.CustomObjectsApi(api).patch_cluster_custom_object(
        *KUEUE_API, "clusterqueues", CLUSTER_QUEUE, patch
    )


async def _daemon_until(
    config: Path, stop: anyio.Event, *, task_status: TaskStatus[int] = TASK_STATUS_IGNORED
) -> None:
    """Run the daemon, started (its pid) once synced, until `stop`."""
    async with running_daemon(config) as daemon:
        task_status.started(daemon.process.pid)
        await stop.wait()


async def run(table: Table, scale: float = DEFAULT_SCALE) -> None:
    workloads = max(2, round(WORKLOADS * scale))
    print(
        f"gang_vs_kueue: kbatchd and Kueue {KUEUE_VERSION} on kube-apiserver {VERSION}, "
        f"{TOPOLOGY}, {workloads:,} workloads",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        try:
            plane = await anyio.to_thread.run_sync(
                lambda: ControlPlane.start(VERSION, tmp / "plane", topology=TOPOLOGY, audit=True)
            )
        except ControlPlaneError as exc:
            table.add("gang admission vs Kueue", f"not run: {exc}")
            return
        results: list[Result] = []
        try:
            config = production_config(tmp, plane.kbatchd_kubeconfig)
            pids = {
                SCHEDULER: plane.pid(SCHEDULER),
                CONTROLLER_MANAGER: plane.pid(CONTROLLER_MANAGER),
            }
            async with kube_client(plane.admin_kubeconfig) as api:
                await schedulable(api)
                stop = anyio.Event()
                # The daemon runs in a task of its own: it starts inside the phase (the
                # release) and stops after it.
                async with anyio.create_task_group() as daemons:

                    async def start_daemon() -> dict[str, int]:
                        return {KBATCHD: await daemons.start(_daemon_until, config, stop)}

                    results.append(await _phase(api, plane, KBATCHD, workloads, pids, start_daemon))
                    stop.set()
                try:
                    manager = await anyio.to_thread.run_sync(
                        lambda: plane.start_kueue_manager(KUEUE_QPS, KUEUE_BURST)
                    )
                except ControlPlaneError as exc:
                    table.add("gang admission vs Kueue", f"Kueue not run: {exc}")
                    return
                try:
                    for obj in _kueue_setup():
                        await anyio.to_thread.run_sync(plane.apply, obj)
                    await _until_kueue_active(api, True)
                    await _stop_policy(api, "Hold")
                    await _until_kueue_active(api, False)

                    async def admit() -> dict[str, int]:
                        await _stop_policy(api, "None")
                        return {}

                    theirs = {KUEUE: manager, **pids}
                    results.append(await _phase(api, plane, KUEUE, workloads, theirs, admit))
                finally:
                    await anyio.to_thread.run_sync(plane.stop_kueue_manager)
        finally:
            if len(results) < 2:
                for name in (SCHEDULER, CONTROLLER_MANAGER, "kueue-manager"):
                    if (plane.root / f"{name}.log").exists():
                        print(plane.logs(name, 30), flush=True)
            await anyio.to_thread.run_sync(plane.stop)
    report(table, results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tests.bench.gang_vs_kueue")
    parser.add_argument(
        "--scale", type=float, default=DEFAULT_SCALE, help=f"{WORKLOADS:,} workloads × this"
    )
    args = parser.parse_args()
    table = Table()
    eventloop.run(run, table, args.scale)
    print(table.render())
