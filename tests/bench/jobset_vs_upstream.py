"""One pod failure in a 1,250-Job JobSet, handled by kbatchd's JobSet controller and by
upstream's (sigs.k8s.io/jobset, the pinned JOBSET_VERSION, built by `build.sh
--jobset-manager`), one after the other on one real control plane (`tests/realcluster`,
Kubernetes 1.37.2; kwok nodes, 2 racks × 8 hosts, each admitting 500 pods, 1,000 CPUs).

The JobSet: two replicatedJobs of 625 Jobs each (upstream allows the RestartJob action only up
to 1,024 replicas a replicatedJob), each Job of one pod (completions = parallelism; `--pods N`
for more), `backoffLimit: 0` and `restartPolicy: Never`, so one failed pod fails its Job, and
`failurePolicy.maxRestarts: 3`. kube-scheduler binds every pod; kwok starts it and, as the
pods carry no `sim.kbatchd.dev/run-seconds`, keeps it Running and Ready until it is deleted
(grace 0). One restart strategy a phase:

- `Recreate`: `restartStrategy: Recreate`, no rules (the default action, RestartJobSet): every
  Job of the JobSet deleted and created again;
- `BlockingRecreate`: the same, but no Job of the new attempt is created while any Job of the
  old one exists;
- `RestartJob`: `restartStrategy: Recreate` and one rule whose action is `RestartJob` (upstream's
  alpha gate RestartJob, turned on for this): the failed Job alone deleted and created again.

`InPlaceRestart` is not played here: it needs upstream's in-place-restart agent inside every
pod (it writes the pod's attempt and restarts its containers), which kwok's pods, phases
without containers, cannot run, for either controller; `tests.bench.jobset` measures kbatchd's
in memory.

Each strategy is played once with `spec.managedBy: kbatchd.dev/jobset-controller` (the daemon
running, as `job_vs_upstream` runs it: its ServiceAccount token, `config/kbatchd.toml`'s
settings, and `workload_with_job` on, as the plane runs upstream's WorkloadWithJob gate; its
JobSet controller gives the child Jobs `spec.managedBy: kbatchd.dev/job-controller`, so its own
Job controller runs them and kube-controller-manager's leaves them alone) and once without
`managedBy` (upstream's manager running, the daemon stopped; the Jobs it creates carry no
`managedBy`, so kube-controller-manager's Job controller runs them, at its defaults of 20 QPS /
30 burst). Upstream's manager runs with the admin kubeconfig and its shipped client limits
(500 QPS / 500 burst); its webhooks are served and registered
(`ControlPlane.start_jobset_manager`), so its JobSets are defaulted and validated and its pods
pass its pod webhooks, as in an install of it; kbatchd does its defaulting itself and has no
webhook. Each phase has a namespace of its own, removed before the next starts.

A phase: the JobSet is created; once every pod is Running and Ready and the namespace has
stood still (no pod, Job or JobSet change for 3 s, its Events for 3 s), the first pod of Job
`js-w-<replicas/2>` is patched (admin, not counted) with `sim.kbatchd.dev/exit-code: "1"` and
`run-seconds: "0"`: kwok ends it at once as Failed. Recovery is the moment every pod of every
Job created after that patch (a Job UID not seen before it) is Running and Ready, those pods
numbering what the strategy recreates (every Job's pods; with RestartJob, one Job's), as the
bench's watch of the namespace sees them. The figures of a phase, from the patch on:

- time to recovery (wall time from the patch write);
- pods and Jobs created (names and UIDs first seen after the patch) and pods deleted;
- API calls from kube-apiserver's audit log, by verb and resource, from the patch until the
  namespace stood still again after recovery (3 s without a watch event, then its Events 3 s
  still): kbatchd's ServiceAccount user; upstream's manager by its user agent (`jobset/…`),
  and kube-controller-manager's Job controller by its (`…/job-controller`: kube-controller-
  manager runs with the admin certificate and `--use-service-account-credentials=false`);
  upstream's figure is the sum of the two. kube-controller-manager's garbage collector deletes
  the pods of the deleted Jobs in both phases (both controllers delete Jobs in the foreground),
  so its calls are listed beside, not counted to either;
- CPU seconds over the same span from /proc/PID/stat (utime + stime): the daemon's; upstream's
  manager's plus kube-controller-manager's (every one of its controllers: an upper bound of its
  Job controller's); kube-controller-manager's during kbatchd's phase is given beside.

The startup (JobSet created → every pod Ready) is reported too, not judged.

kbatchd's phases run first, upstream's after, in the same order in every run.
`python -m tests.bench.jobset_vs_upstream [--scale F] [--pods N] [STRATEGY ...]` runs it alone,
the 1,250 Jobs multiplied by F (default 0.4, as in `make bench`: 500 Jobs, about 20 minutes on 2
cores; `--scale 1` is the issue's full size, about 50)."""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec
from kubernetes_asyncio import client

from daemon.runtime import eventloop
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
    merged,
    production_config,
    remove_namespace,
    schedulable,
    watch_namespace,
)
from tests.bench.table import Table
from tests.processes import kube_client, running_daemon
from tests.realcluster.controlplane import VERSIONS, ControlPlane, ControlPlaneError

VERSION = "1.37.2"
JOBSET_VERSION = VERSIONS["JOBSET_VERSION"]
TOPOLOGY = "blocks=1,racks=2,hosts=8,gpus=8,cpu=1000,memory=4Ti,pods=500"
KBATCHD, UPSTREAM = "kbatchd", "upstream"
MANAGER = "kbatchd.dev/jobset-controller"
JOBSET_AGENT = "jobset/"  # the start of upstream's manager's user agent
CONTROLLER_MANAGER = "kube-controller-manager"
JOB_CONTROLLER, COLLECTOR = "job-controller", "generic-garbage-collector"
GROUP, API_VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
RUN, EXIT = "sim.kbatchd.dev/run-seconds", "sim.kbatchd.dev/exit-code"
NAME = "js"
JOBS = 1_250
# `make bench`'s size, and the command's unless told: 500 Jobs take about 20 minutes here, most
# of them upstream's startups and both sides' restarts behind kube-controller-manager's 20 QPS
# (its garbage collector deletes every old pod); the full 1,250 about 50.
DEFAULT_SCALE = 0.4
# A phase's step ends when it is reached, or when nothing in the namespace has changed for
# STALL s, or after LIMIT s.
STALL, LIMIT = 180.0, 1_800.0
QUIET = 3.0


@dataclass(frozen=True)
class Strategy:
    name: str
    failure_policy: dict[str, Any]
    one_job: bool = False  # only the failed Job is recreated


STRATEGIES = (
    Strategy("Recreate", {"maxRestarts": 3, "restartStrategy": "Recreate"}),
    Strategy("BlockingRecreate", {"maxRestarts": 3, "restartStrategy": "BlockingRecreate"}),
    Strategy(
        "RestartJob",
        {
            "maxRestarts": 3,
            "restartStrategy": "Recreate",
            "rules": [{"name": "restartFailedJob", "action": "RestartJob"}],
        },
        one_job=True,
    ),
)


@dataclass(frozen=True)
class Size:
    jobs: int
    pods: int  # per Job

    @property
    def replicas(self) -> tuple[int, int]:
        """The two replicatedJobs' replicas."""
        return (self.jobs + 1) // 2, self.jobs // 2

    @property
    def title(self) -> str:
        return f"{self.jobs:,} Jobs × {self.pods} pod{'s' if self.pods > 1 else ''}"


def _jobset(strategy: Strategy, size: Size, namespace: str, controller: str) -> dict[str, Any]:
    job: dict[str, Any] = {
        "spec": {
            "parallelism": size.pods,
            "completions": size.pods,
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "main",
                            "image": "x",
                            "resources": {
                                "requests": {"cpu": "10m", "memory": "16Mi"},
                                "limits": {"cpu": "10m", "memory": "16Mi"},
                            },
                        }
                    ],
                }
            },
        }
    }
    spec: dict[str, Any] = {
        "replicatedJobs": [
            {"name": rj, "replicas": replicas, "template": job}
            for rj, replicas in zip(("w", "x"), size.replicas, strict=True)
            if replicas
        ],
        "failurePolicy": strategy.failure_policy,
    }
    if controller == KBATCHD:
        spec["managedBy"] = MANAGER
    return {
        "apiVersion": f"{GROUP}/{API_VERSION}",
        "kind": "JobSet",
        "metadata": {"name": NAME, "namespace": namespace},
        "spec": spec,
    }


# -- the watches ----------------------------------------------------------------------------


class _Meta(msgspec.Struct):
    name: str = ""
    uid: str = ""
    resourceVersion: str = ""
    deletionTimestamp: str | None = None
    ownerReferences: list[Owner] | None = None


class _PodStatus(msgspec.Struct):
    phase: str = ""
    conditions: list[Condition] | None = None


class _Pod(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _PodStatus = msgspec.field(default_factory=_PodStatus)


class _Job(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


class _JobSetStatus(msgspec.Struct):
    restarts: int = 0
    conditions: list[Condition] | None = None


class _JobSet(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)
    status: _JobSetStatus = msgspec.field(default_factory=_JobSetStatus)


@dataclass
class _Phase:
    strategy: Strategy
    size: Size
    controller: str
    namespace: str
    ready: dict[str, str] = field(default_factory=dict)  # Ready, undeleted pod -> its Job UID
    pods: set[str] = field(default_factory=set)  # every pod seen
    jobs: dict[str, str] = field(default_factory=dict)  # Job UID -> name
    failed: set[str] = field(default_factory=set)  # pods seen Failed after the failure
    deleted: int = 0  # pods seen deleted after the failure
    before: set[str] = field(default_factory=set)  # pods seen before the failure
    old_jobs: set[str] = field(default_factory=set)  # Job UIDs seen before the failure
    failure: float = 0.0  # perf_counter of the failure patch; 0 before it
    recovered: float = 0.0
    started: float = 0.0  # every pod of the first attempt Ready
    jobset: _JobSetStatus = field(default_factory=_JobSetStatus)
    last_change: float = field(default_factory=time.perf_counter)
    changed: anyio.Event = field(default_factory=anyio.Event)

    @property
    def expected(self) -> int:
        """Pods of the Jobs the strategy recreates."""
        return self.size.pods * (1 if self.strategy.one_job else self.size.jobs)

    def _touch(self) -> None:
        self.last_change = time.perf_counter()
        self.changed.set()
        self.changed = anyio.Event()

    def pod(self, kind: str, pod: _Pod) -> None:
        meta = pod.metadata
        after = bool(self.failure)
        if meta.name not in self.pods:
            self.pods.add(meta.name)
        owners = meta.ownerReferences or []
        conditions = pod.status.conditions or ()
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        if kind == "DELETED":
            self.deleted += after
        if (
            kind != "DELETED"
            and meta.deletionTimestamp is None
            and pod.status.phase == "Running"
            and ready
            and owners
        ):
            self.ready[meta.name] = owners[0].uid
        else:
            self.ready.pop(meta.name, None)
        if after and kind != "DELETED" and pod.status.phase == "Failed":
            self.failed.add(meta.name)
        now = time.perf_counter()
        if not self.started and len(self.ready) == self.size.jobs * self.size.pods:
            self.started = now
        if after and not self.recovered:
            new = sum(1 for uid in self.ready.values() if uid not in self.old_jobs)
            if new == self.expected:
                self.recovered = now
        self._touch()

    def job(self, kind: str, job: _Job) -> None:
        if kind != "DELETED":
            self.jobs[job.metadata.uid] = job.metadata.name
        self._touch()

    def jobset_seen(self, kind: str, jobset: _JobSet) -> None:
        self.jobset = jobset.status
        self._touch()

    def fail_now(self) -> None:
        self.before = set(self.pods)
        self.old_jobs = set(self.jobs)
        self.failed, self.deleted = set(), 0
        self.failure = time.perf_counter()


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


async def _still(phase: _Phase, quiet: float) -> None:
    """Until no watched object of the namespace has changed for `quiet` s (at most 120 s)."""
    with anyio.move_on_after(120):
        while True:
            left = phase.last_change + quiet - time.perf_counter()
            if left <= 0:
                return
            with anyio.move_on_after(left):
                await phase.changed.wait()


# -- the audit log --------------------------------------------------------------------------


def _who(event: AuditEvent) -> str | None:
    """kbatchd, upstream's manager, or kube-controller-manager's controller by name."""
    if event.user.username == KBATCHD_USER:
        return KBATCHD
    agent = event.userAgent
    if agent.startswith(JOBSET_AGENT):
        return "jobset-manager"
    if agent.startswith(f"{CONTROLLER_MANAGER}/"):
        return agent.rsplit("/", 1)[-1]
    return None


# -- a phase --------------------------------------------------------------------------------


@dataclass
class Result:
    strategy: Strategy
    size: Size
    controller: str
    startup: float
    recovery: float  # 0: not recovered
    pods_created: int
    pods_deleted: int
    pods_failed: int
    jobs_created: int
    restarts: int
    jobset_conditions: list[str]
    calls: Calls  # the controller's: kbatchd's, or upstream's manager's and Job controller's
    manager_calls: Calls  # upstream's manager's alone (empty for kbatchd)
    collector: Calls  # kube-controller-manager's garbage collector's
    cpu: float  # the daemon's, or upstream's manager's
    kcm_cpu: float
    others: dict[str, int] = field(default_factory=dict)  # other agents' requests


async def _patch_failure(api: client.ApiClient, phase: _Phase) -> str:
    """The first pod of the middle Job of replicatedJob `w` made to fail now; its name."""
    job = f"{NAME}-w-{phase.size.replicas[0] // 2}"
    uid = next(uid for uid, name in phase.jobs.items() if name == job)
    victim = min(name for name, owner in phase.ready.items() if owner == uid)
    body: Any = {"metadata": {"annotations": {EXIT: "1", RUN: "0"}}}
    phase.fail_now()
    await client.CoreV1Api(api).patch_namespaced_pod(victim, phase.namespace, body)
    return victim


async def _jobsets(api: client.ApiClient, namespace: str, **options: Any) -> Any:
    custom = client.CustomObjectsApi(api)
    return await custom.list_namespaced_custom_object(
        GROUP, API_VERSION, namespace, PLURAL, **options
    )


async def _phase(
    api: client.ApiClient,
    plane: ControlPlane,
    strategy: Strategy,
    size: Size,
    controller: str,
    pid: int,
) -> Result:
    """`strategy` run by `controller` in a namespace of its own (`pid`: the daemon's or
    upstream's manager's)."""
    print(f"jobset_vs_upstream: {strategy.name} with {controller}", flush=True)
    namespace = f"{strategy.name.lower()}-{controller}"
    await make_namespace(api, namespace)
    phase = _Phase(strategy, size, controller, namespace)
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    custom = client.CustomObjectsApi(api)
    pods_at = await list_version(await core.list_namespaced_pod(namespace, _preload_content=False))
    jobs_at = await list_version(await batch.list_namespaced_job(namespace, _preload_content=False))
    sets_at = await list_version(await _jobsets(api, namespace, _preload_content=False))
    kcm = plane.pid(CONTROLLER_MANAGER)

    async def list_jobsets(namespace: str, **options: Any) -> Any:
        return await _jobsets(api, namespace, **options)

    async with anyio.create_task_group() as tasks:
        pods = msgspec.json.Decoder(WatchEvent[_Pod])
        jobs = msgspec.json.Decoder(WatchEvent[_Job])
        sets = msgspec.json.Decoder(WatchEvent[_JobSet])
        tasks.start_soon(
            watch_namespace, core.list_namespaced_pod, namespace, pods_at, pods, phase.pod
        )
        tasks.start_soon(
            watch_namespace, batch.list_namespaced_job, namespace, jobs_at, jobs, phase.job
        )
        tasks.start_soon(watch_namespace, list_jobsets, namespace, sets_at, sets, phase.jobset_seen)
        created = time.perf_counter()
        body: Any = _jobset(strategy, size, namespace, controller)
        await custom.create_namespaced_custom_object(GROUP, API_VERSION, namespace, PLURAL, body)
        if not await _until(phase, lambda: bool(phase.started), LIMIT):
            raise RuntimeError(
                f"{controller}: {len(phase.ready)} of {size.jobs * size.pods} pods Ready in "
                f"{namespace}"
            )
        startup = phase.started - created
        await _still(phase, QUIET)
        await events_quiet(api, namespace, QUIET)
        offset = plane.audit_log.stat().st_size
        begin = datetime.now(UTC)
        cpu_at, kcm_at = cpu_seconds(pid), cpu_seconds(kcm)
        victim = await _patch_failure(api, phase)
        recovered = await _until(phase, lambda: bool(phase.recovered), LIMIT)
        recovery = phase.recovered - phase.failure if recovered else 0.0
        await _still(phase, QUIET)
        await events_quiet(api, namespace, QUIET)
        end = datetime.now(UTC)
        cpu, kcm_cpu = cpu_seconds(pid) - cpu_at, cpu_seconds(kcm) - kcm_at
        tasks.cancel_scope.cancel()
    await audit_logged_past(plane.audit_log, end)
    counted = count_calls(plane.audit_log, offset, begin, end, _who)
    if controller == KBATCHD:
        calls, manager = counted.pop(KBATCHD, Calls()), Calls()
    else:
        manager = counted.pop("jobset-manager", Calls())
        calls = merged(manager, counted.pop(JOB_CONTROLLER, Calls()))
    collector = counted.pop(COLLECTOR, Calls())
    status = phase.jobset
    result = Result(
        strategy,
        size,
        controller,
        startup,
        recovery,
        len(phase.pods - phase.before),
        phase.deleted,
        len(phase.failed),
        len(set(phase.jobs) - phase.old_jobs),
        status.restarts,
        sorted(c.type for c in status.conditions or () if c.status == "True"),
        calls,
        manager,
        collector,
        cpu,
        kcm_cpu,
        {name: c.all for name, c in counted.items()},
    )
    print(
        f"  pod {victim} failed; startup {startup:.1f} s; recovery "
        f"{f'{recovery:.1f} s' if recovered else 'not reached'}; pods created "
        f"{result.pods_created:,}, deleted {result.pods_deleted:,}, seen Failed "
        f"{result.pods_failed:,}; Jobs created {result.jobs_created:,}; JobSet restarts "
        f"{status.restarts}, conditions {result.jobset_conditions}; CPU {cpu:.1f} s "
        f"(kube-controller-manager {kcm_cpu:.1f} s)",
        flush=True,
    )
    print(f"  calls {calls.all:,}: {_breakdown(calls)}", flush=True)
    print(f"  garbage collector {collector.all:,}: {_breakdown(collector)}", flush=True)
    print(f"  other requests by agent: {result.others}", flush=True)
    await remove_namespace(api, namespace)
    return result


# -- the figures ----------------------------------------------------------------------------


def _breakdown(calls: Calls) -> str:
    shown = ", ".join(f"{k} {v:,}" for k, v in sorted(calls.by.items(), key=lambda kv: -kv[1]))
    refused = ", ".join(f"{k} {v:,}" for k, v in sorted(calls.refused.items()))
    return (shown or "none") + (f"; refused: {refused}" if refused else "")


def report(table: Table, results: list[Result]) -> None:
    for strategy in {r.strategy.name: r.strategy for r in results}.values():
        mine = {r.controller: r for r in results if r.strategy is strategy}
        if len(mine) < 2:
            continue
        ours, theirs = mine[KBATCHD], mine[UPSTREAM]
        where = (
            f"JobSet controller vs upstream JobSet {JOBSET_VERSION}, one pod failure in "
            f"{ours.size.title}, {strategy.name}"
        )
        both = ours.recovery > 0 and theirs.recovery > 0
        speed = theirs.recovery / ours.recovery if both else 0.0
        table.add(
            f"{where}: failure → every recreated Job's pods Running and Ready",
            f"kbatchd {ours.recovery:.1f} s; upstream {theirs.recovery:.1f} s; kbatchd's speed "
            f"{speed:.2f}× upstream's (0.0 s: not recovered)",
            "≥ 1× upstream's speed",
            both and speed >= 1.0,
        )
        table.add(
            f"{where}: pods created / deleted, Jobs created (kbatchd vs upstream)",
            f"{ours.pods_created:,} / {ours.pods_deleted:,}, {ours.jobs_created:,} vs "
            f"{theirs.pods_created:,} / {theirs.pods_deleted:,}, {theirs.jobs_created:,}",
        )
        ratio = ours.calls.all / theirs.calls.all if theirs.calls.all else float("inf")
        table.add(
            f"{where}: API calls (audit log), writes / all",
            f"kbatchd {ours.calls.writes:,} / {ours.calls.all:,} ({_breakdown(ours.calls)}); "
            f"upstream manager + kube-controller-manager's Job controller "
            f"{theirs.calls.writes:,} / {theirs.calls.all:,} ({_breakdown(theirs.calls)}; "
            f"the manager alone {theirs.manager_calls.all:,}); ratio {ratio:.2f}; the garbage "
            f"collector besides: {ours.collector.all:,} vs {theirs.collector.all:,}",
            "≤ upstream's calls",
            ours.calls.all <= theirs.calls.all,
        )
        table.add(
            f"{where}: CPU seconds",
            f"kbatchd daemon {ours.cpu:.1f} s; upstream manager {theirs.cpu:.1f} s + "
            f"kube-controller-manager {theirs.kcm_cpu:.1f} s (all its controllers; "
            f"{ours.kcm_cpu:.1f} s during kbatchd's phase)",
        )
        table.add(
            f"{where}: startup, JobSet created → every pod Ready",
            f"kbatchd {ours.startup:.1f} s; upstream {theirs.startup:.1f} s",
        )


async def run(
    table: Table, scale: float = DEFAULT_SCALE, pods: int = 1, only: frozenset[str] = frozenset()
) -> None:
    """Every strategy (or those named in `only`), the Jobs multiplied by `scale`, `pods` a
    Job."""
    size = Size(max(2, round(JOBS * scale)), pods)
    chosen = [s for s in STRATEGIES if not only or s.name in only]
    print(
        f"jobset_vs_upstream: kbatchd and JobSet {JOBSET_VERSION} on kube-apiserver {VERSION}, "
        f"{TOPOLOGY}, {size.title}",
        flush=True,
    )
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        try:
            plane = await anyio.to_thread.run_sync(
                lambda: ControlPlane.start(VERSION, tmp / "plane", topology=TOPOLOGY, audit=True)
            )
        except ControlPlaneError as exc:
            table.add("JobSet controller vs upstream JobSet", f"not run: {exc}")
            return
        results: list[Result] = []
        try:
            config = production_config(tmp, plane.kbatchd_kubeconfig)
            async with kube_client(plane.admin_kubeconfig) as api:
                await schedulable(api)
                async with running_daemon(config) as daemon:
                    for strategy in chosen:
                        pid = daemon.process.pid
                        results.append(await _phase(api, plane, strategy, size, KBATCHD, pid))
                try:
                    manager = await anyio.to_thread.run_sync(
                        lambda: plane.start_jobset_manager({"RestartJob": True})
                    )
                except ControlPlaneError as exc:
                    table.add("JobSet controller vs upstream JobSet", f"upstream not run: {exc}")
                    return
                try:
                    for strategy in chosen:
                        results.append(await _phase(api, plane, strategy, size, UPSTREAM, manager))
                finally:
                    await anyio.to_thread.run_sync(plane.stop_jobset_manager)
        finally:
            if len(results) < 2 * len(chosen):
                print(plane.logs(CONTROLLER_MANAGER, 30), flush=True)
                if (plane.root / "jobset-manager.log").exists():
                    print(plane.logs("jobset-manager", 30), flush=True)
            await anyio.to_thread.run_sync(plane.stop)
    report(table, results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tests.bench.jobset_vs_upstream")
    parser.add_argument("--scale", type=float, default=DEFAULT_SCALE, help="Jobs × this")
    parser.add_argument("--pods", type=int, default=1, help="pods a Job")
    parser.add_argument(
        "strategies", nargs="*", help="those only (" + ", ".join(s.name for s in STRATEGIES) + ")"
    )
    args = parser.parse_args()
    if "InPlaceRestart" in args.strategies:
        parser.error("InPlaceRestart needs upstream's agent in every pod, which kwok cannot run")
    if unknown := set(args.strategies) - {s.name for s in STRATEGIES}:
        parser.error(f"no strategy {', '.join(sorted(unknown))}")
    table = Table()
    eventloop.run(run, table, args.scale, args.pods, frozenset(args.strategies))
    print(table.render())
