"""The same Jobs run by kbatchd's Job controller and by kube-controller-manager's, one after the
other on one real control plane (`tests/realcluster`, Kubernetes 1.37.2; kwok nodes, 4 racks ×
16 hosts, each admitting 500 pods, 1,000 CPUs). kube-scheduler binds every pod in both phases;
kwok runs each for `sim.kbatchd.dev/run-seconds` (2 s) and ends it with
`sim.kbatchd.dev/exit-code` (0 unless the bench set it).

Three scenarios, each played once with `spec.managedBy: kbatchd.dev/job-controller` (the daemon
running, started as `gang_real` starts it, with its ServiceAccount token and the settings of
`config/kbatchd.toml`: 10 s pod failure back-off, as upstream's, 1 s tick; and
`workload_with_job` on, as the control plane runs upstream's WorkloadWithJob gate, so that both
controllers make a Workload and a PodGroup for each Job that starts unsuspended) and once without
`managedBy` (kube-controller-manager's Job controller runs them; the daemon stopped), each phase
in a namespace of its own, removed before the next starts:

- `indexed`: one Indexed Job of 10,000 pods (completions = parallelism = 10,000);
- `failing`: 500 Indexed Jobs of 20 pods (completions = parallelism = 20,
  `podReplacementPolicy: Failed`, backoffLimit 10), indexes 0 and 10 of every Job (10 % of the
  pods) failing once. One pod template serves every attempt of an index, so the annotations
  cannot say "fail the first time": this bench watches the pods, and the first pod of each of
  those indexes it sees is patched (admin, not counted) with `sim.kbatchd.dev/exit-code: "1"`
  before it can finish; kwok reads the annotation when the run ends. The pods seen Failed are
  reported, so a patch that came too late would show;
- `suspend`: 200 NonIndexed Jobs of 10 pods created suspended; once each has its `Suspended`
  condition (its controller has seen it), the template's CPU request and limit are raised (10m
  to 20m) and a nodeSelector (one rack) is added, then all are resumed. The clock runs from the
  first resume write; the calls and CPU from the first template write. The pods that carry the
  new template are counted.

Per scenario and controller: the wall time from the first create (resume) write to every Job
Complete (the Jobs' watch showing the condition); the API calls the controller made from then
until the namespace's Events stood still for 3 s, from kube-apiserver's audit log, by verb and
resource: kbatchd's ServiceAccount user, and kube-controller-manager's Job controller by its
user agent (the control plane runs it with the admin certificate and
`--use-service-account-credentials=false`, so every controller of it is the same user; client-go
names the controller at the end of the agent: `kube-controller-manager/v… /job-controller`).
Upstream's Job controller reads pods and Jobs through kube-controller-manager's shared informers
(agent `…/shared-informers`, not counted: other controllers share them and their watches were
opened before the phase); kbatchd's watches are its own and counted when (re)opened within the
phase. Calls the API server refused (HTTP 4xx/5xx) are listed beside. CPU seconds of each
process over the same span, from /proc/PID/stat (utime + stime): the daemon's, and
kube-controller-manager's, which runs every other controller too (node lifecycle, garbage
collector, …), so its figure is an upper bound of its Job controller's; its CPU during
kbatchd's phase of the same scenario (its Job controller idle) is reported beside.

kbatchd's phases run first, upstream's after: on this machine, whose speed drifts, the order is
the same in every run. `python -m tests.bench.job_vs_upstream [--scale F] [SCENARIO ...]` runs
it alone, the sizes (Jobs; the one Job's pods) multiplied by F."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec
from kubernetes_asyncio import client

from daemon.runtime import eventloop
from daemon.sim.topology import RACK_LABEL
from tests.bench.proc import cpu_seconds
from tests.bench.realplane import (
    KBATCHD_USER,
    AuditEvent,
    Calls,
    Condition,
    Owner,
    WatchEvent,
    audit_logged_past,
    count_calls,
    events_quiet,
    list_version,
    make_namespace,
    ok,
    production_config,
    remove_namespace,
    schedulable,
    watch_namespace,
)
from tests.bench.table import Table
from tests.processes import kube_client, running_daemon
from tests.realcluster.controlplane import ControlPlane, ControlPlaneError

VERSION = "1.37.2"
TOPOLOGY = "blocks=1,racks=4,hosts=16,gpus=8,cpu=1000,memory=4Ti,pods=500"
KBATCHD, UPSTREAM = "kbatchd", "upstream"
MANAGER = "kbatchd.dev/job-controller"
CONTROLLER_MANAGER = "kube-controller-manager"
JOB_AGENT = "/job-controller"  # the end of the Job controller's user agent
RUN, EXIT = "sim.kbatchd.dev/run-seconds", "sim.kbatchd.dev/exit-code"
INDEX = "batch.kubernetes.io/job-completion-index"
RUN_SECONDS = "2"
CPU_BEFORE, CPU_AFTER = "10m", "20m"
RACK = "b0-r1"  # the suspend wave's nodeSelector: 16 nodes, 8,000 pods
CREATORS = 8
# A phase ends when every Job has finished, or when nothing in it (pod or Job) has changed for
# STALL s, or after LIMIT s.
STALL, LIMIT = 180.0, 1_800.0
QUIET = 3.0


@dataclass(frozen=True)
class Scenario:
    name: str
    jobs: int
    pods: int  # completions = parallelism, per Job
    indexed: bool
    failing: frozenset[int] = frozenset()  # indexes whose first pod fails
    suspended: bool = False  # created suspended, mutated, resumed

    @property
    def title(self) -> str:
        what = f"{self.jobs:,} {'Indexed' if self.indexed else 'NonIndexed'} Jobs"
        what = what.replace(" Jobs", " Job") if self.jobs == 1 else what
        what += f" of {self.pods:,} pods"
        if self.failing:
            share = len(self.failing) / self.pods
            what += f", {share:.0%} of pods failing once (podReplacementPolicy Failed)"
        if self.suspended:
            what += ", created suspended, template mutated, resumed"
        return what

    def names(self) -> list[str]:
        return [f"j{j:04d}" for j in range(self.jobs)]


SCENARIOS = (
    Scenario("indexed", 1, 10_000, True),
    Scenario("failing", 500, 20, True, frozenset({0, 10})),
    Scenario("suspend", 200, 10, False, suspended=True),
)


def scaled(scenario: Scenario, scale: float) -> Scenario:
    """The scenario with its Jobs (its one Job's pods) multiplied by `scale`."""
    if scenario.jobs == 1:
        return replace(scenario, pods=max(1, round(scenario.pods * scale)))
    return replace(scenario, jobs=max(1, round(scenario.jobs * scale)))


def _job(scenario: Scenario, name: str, namespace: str, controller: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "completions": scenario.pods,
        "parallelism": scenario.pods,
        "completionMode": "Indexed" if scenario.indexed else "NonIndexed",
        "backoffLimit": 10,
        "template": {
            "metadata": {"annotations": {RUN: RUN_SECONDS}},
            "spec": {
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": "x",
                        "resources": {
                            "requests": {"cpu": CPU_BEFORE, "memory": "16Mi"},
                            "limits": {"cpu": CPU_BEFORE, "memory": "16Mi"},
                        },
                    }
                ],
            },
        },
    }
    if scenario.failing:
        spec["podReplacementPolicy"] = "Failed"
    if scenario.suspended:
        spec["suspend"] = True
    if controller == KBATCHD:
        spec["managedBy"] = MANAGER
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


# The suspend wave's template change: both containers' resources and a scheduling directive.
MUTATION: dict[str, Any] = {
    "spec": {
        "template": {
            "spec": {
                "nodeSelector": {RACK_LABEL: RACK},
                "containers": [
                    {
                        "name": "main",
                        "resources": {
                            "requests": {"cpu": CPU_AFTER, "memory": "16Mi"},
                            "limits": {"cpu": CPU_AFTER, "memory": "16Mi"},
                        },
                    }
                ],
            }
        }
    }
}


# -- the watches ----------------------------------------------------------------------------


class _Meta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""
    annotations: dict[str, str] | None = None
    ownerReferences: list[Owner] | None = None


class _Quantities(msgspec.Struct):
    requests: dict[str, str] | None = None


class _Container(msgspec.Struct):
    resources: _Quantities = msgspec.field(default_factory=_Quantities)


class _PodSpec(msgspec.Struct):
    nodeSelector: dict[str, str] | None = None
    containers: list[_Container] | None = None  # null in a bookmark


class _PodStatus(msgspec.Struct):
    phase: str = ""


class _Pod(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    spec: _PodSpec = msgspec.field(default_factory=_PodSpec)
    status: _PodStatus = msgspec.field(default_factory=_PodStatus)


class _JobStatus(msgspec.Struct):
    conditions: list[Condition] | None = None


class _Job(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _JobStatus = msgspec.field(default_factory=_JobStatus)


@dataclass
class _Phase:
    scenario: Scenario
    controller: str
    namespace: str
    pods: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)
    mutated: set[str] = field(default_factory=set)  # pods with the suspend wave's template
    first_attempt: set[tuple[str, int]] = field(default_factory=set)  # (Job, index) patched
    to_fail: list[str] = field(default_factory=list)  # pods to patch, in the order seen
    conditions: dict[str, set[str]] = field(default_factory=dict)  # Job -> its True conditions
    finished: dict[str, tuple[float, str]] = field(default_factory=dict)  # Job -> (seen, how)
    changed: anyio.Event = field(default_factory=anyio.Event)
    wake: anyio.Event = field(default_factory=anyio.Event)  # pods to patch

    def pod(self, kind: str, pod: _Pod) -> None:
        name = pod.metadata.name
        if kind == "DELETED":
            return
        self.pods.add(name)
        if pod.status.phase == "Failed":
            self.failed.add(name)
        spec = pod.spec
        if (spec.nodeSelector or {}).get(RACK_LABEL) == RACK and all(
            (c.resources.requests or {}).get("cpu") == CPU_AFTER for c in spec.containers or ()
        ):
            self.mutated.add(name)
        owners = pod.metadata.ownerReferences or []
        index = (pod.metadata.annotations or {}).get(INDEX, "")
        if self.scenario.failing and owners and index.isdigit():
            key = (owners[0].name, int(index))
            if key[1] in self.scenario.failing and key not in self.first_attempt:
                self.first_attempt.add(key)
                self.to_fail.append(name)
                self.wake.set()
        self.changed.set()
        self.changed = anyio.Event()

    def job(self, kind: str, job: _Job) -> None:
        name = job.metadata.name
        true = {c.type for c in job.status.conditions or () if c.status == "True"}
        self.conditions[name] = true
        for how in ("Complete", "Failed"):
            if how in true and name not in self.finished:
                self.finished[name] = (time.perf_counter(), how)
        self.changed.set()
        self.changed = anyio.Event()


async def _fail_first_attempts(api: client.ApiClient, phase: _Phase) -> None:
    """The pods `_Phase.pod` picked made to exit 1, as soon as they are seen (kwok reads the
    annotation when their run ends, 2 s after they start)."""
    core = client.CoreV1Api(api)
    body: Any = {"metadata": {"annotations": {EXIT: "1"}}}
    while True:
        await phase.wake.wait()
        phase.wake = anyio.Event()
        pending, phase.to_fail = phase.to_fail, []
        for name in pending:
            answer: Any = await core.patch_namespaced_pod(
                name, phase.namespace, body, _preload_content=False
            )
            async with answer:
                await answer.read()  # a 404 (already gone) only means it was not failed


# -- writing the Jobs -----------------------------------------------------------------------


async def _each(names: list[str], write: Callable[[str], Any]) -> None:
    """`write(name)` for every name, CREATORS at a time: one writer alone waits on every
    round trip."""

    async def share(part: Iterable[str]) -> None:
        for name in part:
            await write(name)

    async with anyio.create_task_group() as writers:
        for k in range(CREATORS):
            writers.start_soon(share, names[k::CREATORS])


async def _create(api: client.ApiClient, phase: _Phase) -> None:
    batch = client.BatchV1Api(api)

    async def create(name: str) -> None:
        body: Any = _job(phase.scenario, name, phase.namespace, phase.controller)
        answer = await batch.create_namespaced_job(phase.namespace, body, _preload_content=False)
        await ok(answer, f"Job {name}")

    await _each(phase.scenario.names(), create)


async def _patch_all(api: client.ApiClient, phase: _Phase, body: Any, what: str) -> None:
    batch = client.BatchV1Api(api)

    async def patch(name: str) -> None:
        answer = await batch.patch_namespaced_job(
            name, phase.namespace, body, _preload_content=False
        )
        await ok(answer, f"{what} Job {name}")

    await _each(phase.scenario.names(), patch)


async def _until(phase: _Phase, done: Callable[[], bool], limit: float) -> bool:
    """Until `done()` (True), nothing has changed for STALL s or `limit` s passed (False)."""
    with anyio.move_on_after(limit):
        while not done():
            with anyio.move_on_after(STALL):
                await phase.changed.wait()
                continue
            return False
        return True
    return False


# -- CPU and the audit log ------------------------------------------------------------------


def _who(event: AuditEvent) -> str | None:
    if event.user.username == KBATCHD_USER:
        return KBATCHD
    agent = event.userAgent
    if agent.startswith(f"{CONTROLLER_MANAGER}/") and agent.endswith(JOB_AGENT):
        return UPSTREAM
    return None


def _agents(log: Path, offset: int) -> dict[str, int]:
    """kube-controller-manager's requests by the controller its user agent names (the last
    part), from `offset` on: which of them acted while the phase ran."""
    decoder = msgspec.json.Decoder(AuditEvent)
    seen: dict[str, int] = {}
    with log.open("rb") as lines:
        lines.seek(offset)
        for line in lines:
            agent = decoder.decode(line).userAgent
            if agent.startswith(f"{CONTROLLER_MANAGER}/"):
                name = agent.rsplit("/", 1)[-1]
                seen[name] = seen.get(name, 0) + 1
    return seen


# -- a phase --------------------------------------------------------------------------------


@dataclass
class Result:
    scenario: Scenario
    controller: str
    wall: float
    complete: int
    failed_jobs: int
    calls: Calls
    cpu: float  # the controller's process: the daemon's, or kube-controller-manager's
    kcm_cpu: float  # kube-controller-manager's, in either phase
    pods: int
    pods_failed: int
    mutated: int
    agents: dict[str, int] = field(default_factory=dict)


async def _phase(
    api: client.ApiClient, plane: ControlPlane, scenario: Scenario, controller: str, daemon: int
) -> Result:
    """The scenario run by `controller` in a namespace of its own (`daemon`: the daemon's pid,
    0 when it is stopped)."""
    print(f"job_vs_upstream: {scenario.name} with {controller}", flush=True)
    namespace = f"{scenario.name}-{controller}"
    await make_namespace(api, namespace)
    phase = _Phase(scenario, controller, namespace)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    pods_at = await list_version(await core.list_namespaced_pod(namespace, _preload_content=False))
    jobs_at = await list_version(await batch.list_namespaced_job(namespace, _preload_content=False))
    kcm = plane.pid(CONTROLLER_MANAGER)
    names = set(scenario.names())
    async with anyio.create_task_group() as tasks:
        pods = msgspec.json.Decoder(WatchEvent[_Pod])
        jobs = msgspec.json.Decoder(WatchEvent[_Job])
        list_pods = client.CoreV1Api(api).list_namespaced_pod
        list_jobs = client.BatchV1Api(api).list_namespaced_job
        tasks.start_soon(watch_namespace, list_pods, phase.namespace, pods_at, pods, phase.pod)
        tasks.start_soon(watch_namespace, list_jobs, phase.namespace, jobs_at, jobs, phase.job)
        tasks.start_soon(_fail_first_attempts, api, phase)
        if scenario.suspended:
            await _create(api, phase)
            seen = await _until(
                phase,
                lambda: all("Suspended" in phase.conditions.get(n, ()) for n in names),
                300,
            )
            if not seen:
                raise RuntimeError(f"{controller} did not mark every Job of {namespace} Suspended")
            await events_quiet(api, namespace, QUIET)
        offset = plane.audit_log.stat().st_size
        begin = datetime.now(UTC)
        cpu_at = cpu_seconds(daemon) if daemon else 0.0
        kcm_at = cpu_seconds(kcm)
        if scenario.suspended:
            await _patch_all(api, phase, MUTATION, "mutating")
            start = time.perf_counter()
            await _patch_all(api, phase, {"spec": {"suspend": False}}, "resuming")
        else:
            start = time.perf_counter()
            await _create(api, phase)
        await _until(phase, lambda: names <= phase.finished.keys(), LIMIT)
        last = max((t for t, _ in phase.finished.values()), default=time.perf_counter())
        wall = last - start
        await events_quiet(api, namespace, QUIET)
        end = datetime.now(UTC)
        cpu = (cpu_seconds(daemon) - cpu_at) if daemon else 0.0
        kcm_cpu = cpu_seconds(kcm) - kcm_at
        tasks.cancel_scope.cancel()
    await audit_logged_past(plane.audit_log, end)
    calls = count_calls(plane.audit_log, offset, begin, end, _who).get(controller, Calls())
    if controller == UPSTREAM:
        cpu = kcm_cpu
    complete = sum(how == "Complete" for _, how in phase.finished.values())
    result = Result(
        scenario,
        controller,
        wall,
        complete,
        len(phase.finished) - complete,
        calls,
        cpu,
        kcm_cpu,
        len(phase.pods),
        len(phase.failed),
        len(phase.mutated),
        _agents(plane.audit_log, offset),
    )
    print(
        f"  {complete}/{scenario.jobs} Complete in {wall:.1f} s; {len(phase.pods):,} pods, "
        f"{len(phase.failed):,} failed, {len(phase.mutated):,} with the mutated template; "
        f"CPU {cpu:.1f} s (kube-controller-manager {kcm_cpu:.1f} s); calls {calls.all:,}: "
        + ", ".join(f"{k} {v}" for k, v in sorted(calls.by.items(), key=lambda kv: -kv[1])),
        flush=True,
    )
    print(f"  refused: {calls.refused or 'none'}", flush=True)
    print(f"  kube-controller-manager requests by controller: {result.agents}", flush=True)
    await remove_namespace(api, namespace)
    return result


# -- the figures ----------------------------------------------------------------------------


def _breakdown(calls: Calls) -> str:
    shown = ", ".join(f"{k} {v:,}" for k, v in sorted(calls.by.items(), key=lambda kv: -kv[1]))
    refused = ", ".join(f"{k} {v:,}" for k, v in sorted(calls.refused.items()))
    return shown + (f"; refused: {refused}" if refused else "")


def report(table: Table, results: list[Result]) -> None:
    scenarios = {r.scenario.name: r.scenario for r in results}
    for scenario in scenarios.values():
        mine = {r.controller: r for r in results if r.scenario is scenario}
        if len(mine) < 2:
            continue
        ours, theirs = mine[KBATCHD], mine[UPSTREAM]
        where = f"Job controller vs kube-controller-manager {VERSION}, {scenario.title}"
        clock = "resume" if scenario.suspended else "first create"
        both_done = ours.complete == theirs.complete == scenario.jobs
        speed = theirs.wall / ours.wall if ours.wall > 0 else 0.0
        table.add(
            f"{where}: {clock} → every Job Complete",
            f"kbatchd {ours.wall:.1f} s; upstream {theirs.wall:.1f} s; kbatchd's speed "
            f"{speed:.2f}× upstream's (Complete: {ours.complete}/{scenario.jobs}, "
            f"{theirs.complete}/{scenario.jobs})",
            "≥ 1× upstream's speed",
            both_done and speed >= 1.0,
        )
        ratio = ours.calls.all / theirs.calls.all if theirs.calls.all else float("inf")
        table.add(
            f"{where}: API calls of the Job controller (audit log), writes / all",
            f"kbatchd {ours.calls.writes:,} / {ours.calls.all:,} ({_breakdown(ours.calls)}); "
            f"upstream {theirs.calls.writes:,} / {theirs.calls.all:,} "
            f"({_breakdown(theirs.calls)}); ratio {ratio:.2f}",
            "≤ upstream's calls",
            ours.calls.all <= theirs.calls.all,
        )
        table.add(
            f"{where}: CPU seconds",
            f"kbatchd daemon {ours.cpu:.1f} s; kube-controller-manager {theirs.cpu:.1f} s "
            f"(all its controllers: an upper bound; {ours.kcm_cpu:.1f} s during kbatchd's "
            f"phase); ratio {ours.cpu / theirs.cpu if theirs.cpu else float('inf'):.2f}",
        )
        extra = f"pods {ours.pods:,} vs {theirs.pods:,}; failed {ours.pods_failed:,} vs "
        extra += f"{theirs.pods_failed:,}"
        if scenario.suspended:
            extra += f"; with the mutated template {ours.mutated:,} vs {theirs.mutated:,}"
        table.add(f"{where}: pods created (kbatchd vs upstream)", extra)


async def run(table: Table, scale: float = 1.0, only: frozenset[str] = frozenset()) -> None:
    """Every scenario (or those named in `only`), sizes multiplied by `scale`."""
    chosen = [scaled(s, scale) for s in SCENARIOS if not only or s.name in only]
    print(
        f"job_vs_upstream: kbatchd and kube-controller-manager {VERSION} on {TOPOLOGY}, "
        f"scale {scale:g}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        try:
            plane = await anyio.to_thread.run_sync(
                lambda: ControlPlane.start(VERSION, tmp / "plane", topology=TOPOLOGY, audit=True)
            )
        except ControlPlaneError as exc:
            table.add("Job controller vs kube-controller-manager", f"not run: {exc}")
            return
        results: list[Result] = []
        try:
            config = production_config(tmp, plane.kbatchd_kubeconfig)
            async with kube_client(plane.admin_kubeconfig) as api:
                await schedulable(api)
                async with running_daemon(config) as daemon:
                    for scenario in chosen:
                        results.append(
                            await _phase(api, plane, scenario, KBATCHD, daemon.process.pid)
                        )
                    # What the daemon logged, by event, and its warnings in full: its watches'
                    # reconnects and failed calls explain calls the audit log shows.
                    census: dict[str, int] = {}
                    for line in daemon.logs():
                        name = str(line.get("event", "?"))
                        census[name] = census.get(name, 0) + 1
                    print(f"job_vs_upstream: the daemon's log by event: {census}", flush=True)
                    notable = [
                        x
                        for x in daemon.logs()
                        if x.get("level") in ("warning", "error")
                        or "watch" in str(x.get("event", ""))
                    ]
                    for line in notable[:20]:
                        print(f"  {line}", flush=True)
                for scenario in chosen:
                    results.append(await _phase(api, plane, scenario, UPSTREAM, 0))
        finally:
            if len(results) < 2 * len(chosen):
                print(plane.logs(CONTROLLER_MANAGER, 30), flush=True)
            await anyio.to_thread.run_sync(plane.stop)
    report(table, results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tests.bench.job_vs_upstream")
    parser.add_argument("--scale", type=float, default=1.0, help="sizes multiplied by this")
    parser.add_argument("scenarios", nargs="*", help="those only (indexed, failing, suspend)")
    args = parser.parse_args()
    if unknown := set(args.scenarios) - {s.name for s in SCENARIOS}:
        parser.error(f"no scenario {', '.join(sorted(unknown))}")
    table = Table()
    eventloop.run(run, table, args.scale, frozenset(args.scenarios))
    print(table.render())
