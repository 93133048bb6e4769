"""The daemon at 10,000 GPU nodes and 100,000 pods: a simulated cluster of 4 blocks × 25 racks
× 100 hosts × 8 GPUs, and a mixed load created as fast as the cluster takes it, every pod
running 2 s and succeeding:

- ~60 % of the pods in gangs (PodGroups, minCount = size, `schedulerName: kbatchd`, one GPU a
  pod) of 8 to 1,000 pods: five of 1,000 (alternately requiring one block and unconstrained),
  the rest of 8 to 512, a third requiring one rack, a third one block, a third unconstrained;
- ~25 % in plain Jobs managed by kbatchd (1 to 128 pods each);
- ~15 % in JobSets managed by kbatchd (one replicated Job, 4 to 32 pods a set).

Job and JobSet pods ask for one CPU and no GPU and are left to the simulated cluster's own
scheduler, so that only kbatchd places GPUs (see `CPU_ONLY` for why the CPU).

The daemon (`kbatchd run`, its own process, a SQLite log file on disk, default settings but
for the test daemon's short back-offs of `tests.processes.daemon_config`) and the simulated
cluster (this process, as in `tests.bench.gang`) run apart. Measured:

- events/s and decisions/s: events and `Decided` events in the log whose `at` falls between
  the first object created and the last pod Succeeded, over that wall time; the peak is the
  busiest second by `at`;
- gang latency, from the `Observed` ADDED of a gang's last member to (a) its admission: the
  `Decided` event holding its binds, which are handed to the actuator all at once as it is
  logged. Its `at` is the log's clock (the newest event folded when it was made), so it
  reads early by at most the fold lag below; (b) the `Outcome` of its first and its last
  bind: bindings done, the actuator's queue and the API's answers included. Gangs refused
  room first (a decision `InsufficientRoom` or `TopologyPlacementFailed` after their last
  member) waited for pods to finish, which is the load, not the daemon: they are counted
  and left out;
- CPU seconds of the daemon (`/proc/PID/stat`) and of this process, over the same time:
  which side is busy says where the time goes;
- the daemon's peak RSS (VmHWM), read just before it is stopped;
- log bytes per event: the file (snapshots included) ÷ events in it;
- snapshot time: `encode_state` and `EventLog.save_snapshot` of the final state, the path the
  daemon's pump takes (`daemon.runtime.snapshots`), timed here on the stopped daemon's log;
- restart catch-up: SIGTERM at the end, one more 8-pod gang created while it is down, then a
  start: process start → its `synced` line; its `Started` event → its first decision (log
  clock); process start → the new gang's pods Running;
- no stage backs up without bound: the daemon's own `/metrics`, sampled each second: the
  ingest queue (watch items waiting for the pump; bounded at 4,096 by design, so a full one
  is the sign) and the actions queue (decisions waiting for the actuator, unbounded), their
  maxima, and how long after the last pod Succeeded every queue (ingest, actions, calls in
  flight) was empty; and, read at the end, the histograms `kbatchd_fold_lag_seconds` (an
  API change seen → its event folded, each batch's oldest) and
  `kbatchd_reconcile_latency_seconds` of the gang reconciler.

`python -m tests.bench.scale --scale F` shrinks hosts per rack and every count by F (at least
one host per rack, and gangs no larger than a block holds) for quick tries; `make bench` runs
it at full size. `tests.bench.scale_real` runs the same load, shrunk, on a real control plane
(`LoadCluster` is what differs).
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import cycle
from pathlib import Path
from typing import Any, Final, NamedTuple, Protocol

import aiohttp
import anyio
import anyio.lowlevel

from daemon.runtime import eventloop
from daemon.runtime.heap import relax_collector
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS, PODS, Resource, lookup
from events.intents import Bind
from events.replay import rebuild
from events.schema import Decided, Observed, Outcome, Started
from events.state import encode_state
from events.store import EventLog
from tests.bench.phases import Reached, phase_of
from tests.bench.proc import cpu_seconds, peak_rss
from tests.bench.table import Table
from tests.daemon.controllers.jobset_builders import JS_MANAGER, rjob
from tests.daemon.embedded import job
from tests.processes import Child, daemon_config, eventually, running_daemon, snapshot_seqs

BLOCKS, RACKS, HOSTS, GPUS = 4, 25, 100, 8
BLOCK: Final = "cloud.provider.com/topology-block"
RACK: Final = "cloud.provider.com/topology-rack"
POD_COUNT: Final = 100_000
GANG_SHARE, JOB_SHARE = 0.60, 0.25  # the rest in JobSets
BIG: Final = 1_000
BIG_GANGS: Final = 5
GANG_SIZES: Final = (8, 8, 16, 16, 32, 64, 128, 256, 512)
JOB_SIZES: Final = (1, 2, 4, 8, 16, 32, 64, 128)
JOBSET_SHAPES: Final = ((4, 8), (2, 16), (8, 4))  # replicas × pods per Job
RUN_SECONDS: Final = 2
NS: Final = "default"
# Decision reasons that say a gang waited for room rather than for the daemon.
NO_ROOM: Final = ("InsufficientRoom", "TopologyPlacementFailed")
TARGET_RSS: Final = 1 << 30
# The container of Job and JobSet pods. One CPU each keeps a node to 96 of them (its CPUs), so
# with its 8 GPU pods it stays under the 110-pod limit: without a request the cluster's first
# fit packed 110 onto a node while kbatchd bound a gang member there, and the node rejected
# the member (`OutOfpods`), failing it; two schedulers racing for one node's pod slots.
CPU_ONLY: Final = {"name": "main", "image": "x", "resources": {"requests": {"cpu": "1"}}}
TARGET_BIG_P99: Final = 1.0


@dataclass(frozen=True)
class Gang:
    name: str
    size: int
    level: str | None  # the required topology level, if any


@dataclass
class Plan:
    hosts: int
    gangs: list[Gang] = field(default_factory=list)
    jobs: list[tuple[str, int]] = field(default_factory=list)
    jobsets: list[tuple[str, int, int]] = field(default_factory=list)  # name, replicas, pods

    @property
    def topology(self) -> str:
        return f"blocks={BLOCKS},racks={RACKS},hosts={self.hosts},gpus={GPUS}"

    @property
    def nodes(self) -> int:
        return BLOCKS * RACKS * self.hosts

    @property
    def gang_pods(self) -> int:
        return sum(g.size for g in self.gangs)

    @property
    def job_pods(self) -> int:
        return sum(size for _, size in self.jobs)

    @property
    def jobset_pods(self) -> int:
        return sum(replicas * pods for _, replicas, pods in self.jobsets)

    @property
    def pods(self) -> int:
        return self.gang_pods + self.job_pods + self.jobset_pods


def _sizes(total: int, sizes: tuple[int, ...], smallest: int = 1) -> Iterator[int]:
    """Sizes cycling through `sizes` that add up to `total`; a remainder under `smallest`
    joins the last one."""
    left = total
    for size in cycle(sizes):
        if left <= 0:
            return
        take = min(size, left)
        if left - take < smallest:
            take = left
        left -= take
        yield take


def plan(scale: float = 1.0) -> Plan:
    hosts = max(1, round(HOSTS * scale))
    rack_gpus, block_gpus = hosts * GPUS, RACKS * hosts * GPUS
    the = Plan(hosts)
    total = round(POD_COUNT * scale)
    gang_total = round(total * GANG_SHARE)
    job_total = round(total * JOB_SHARE)
    big = min(BIG, block_gpus)
    bigs = min(max(1, round(BIG_GANGS * scale)), gang_total // big)
    for i in range(bigs):
        the.gangs.append(Gang(f"g{len(the.gangs):04d}", big, BLOCK if i % 2 == 0 else None))
    for i, size in enumerate(_sizes(gang_total - bigs * big, GANG_SIZES, smallest=8)):
        # A required level only where half a domain holds the gang: a gang as large as its
        # whole domain would wait for one to empty, which measures the load, not the daemon.
        level = (RACK, BLOCK, None)[i % 3]
        if level == RACK and size > rack_gpus // 2:
            level = BLOCK
        if level == BLOCK and size > block_gpus // 2:
            level = None
        the.gangs.append(Gang(f"g{len(the.gangs):04d}", size, level))
    for i, size in enumerate(_sizes(job_total, JOB_SIZES)):
        the.jobs.append((f"j{i:04d}", size))
    shapes = cycle(JOBSET_SHAPES)
    left = total - gang_total - job_total
    while left > 0:
        replicas, pods = next(shapes)
        if replicas * pods > left:
            replicas, pods = 1, left
        the.jobsets.append((f"s{len(the.jobsets):04d}", replicas, pods))
        left -= replicas * pods
    return the


def gang_objects(gang: Gang) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    group: dict[str, Any] = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": gang.name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": gang.size}}},
    }
    if gang.level is not None:
        group["spec"]["schedulingConstraints"] = {"topology": [{"key": gang.level}]}
    gpu = {"nvidia.com/gpu": "1"}
    members = [
        {
            "metadata": {
                "name": f"{gang.name}-{p}",
                "annotations": {"sim.kbatchd.dev/run-seconds": str(RUN_SECONDS)},
            },
            "spec": {
                "schedulerName": "kbatchd",
                "schedulingGroup": {"podGroupName": gang.name},
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "x", "resources": {"requests": gpu, "limits": gpu}}
                ],
            },
        }
        for p in range(gang.size)
    ]
    return group, members


def jobset_object(name: str, replicas: int, pods: int) -> dict[str, Any]:
    replicated = rjob("w", replicas, parallelism=pods, completions=pods, containers=[CPU_ONLY])
    template = replicated["template"]["spec"]["template"]
    template["metadata"]["annotations"] = {"sim.kbatchd.dev/run-seconds": str(RUN_SECONDS)}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"managedBy": JS_MANAGER, "replicatedJobs": [replicated]},
    }


class Workload(NamedTuple):
    pods: int
    # What to create, in order (a gang's PodGroup, then its pods), each with its resource's
    # plural.
    objects: list[tuple[str, dict[str, Any]]]


def workloads(the: Plan) -> Iterator[Workload]:
    """Every workload of the plan, the three kinds interleaved by pods so that the mix
    arrives together rather than one kind after another."""
    queues: list[list[tuple[int, Any]]] = [
        [(g.size, g) for g in the.gangs],
        [(size, (name, size)) for name, size in the.jobs],
        [(r * p, (name, r, p)) for name, r, p in the.jobsets],
    ]
    done = [0, 0, 0]
    totals = [sum(size for size, _ in q) or 1 for q in queues]
    while any(queues):
        # The kind furthest behind its share goes next.
        kind = min((done[k] / totals[k], k) for k in range(3) if queues[k])[1]
        size, item = queues[kind].pop(0)
        done[kind] += size
        if kind == 0:
            yield gang_workload(item)
        elif kind == 1:
            name, pods = item
            body = job(name, parallelism=pods, run_seconds=RUN_SECONDS)
            body["spec"]["template"]["spec"]["containers"] = [CPU_ONLY]
            yield Workload(size, [("jobs", body)])
        else:
            yield Workload(size, [("jobsets", jobset_object(*item))])


def gang_workload(gang: Gang) -> Workload:
    group, members = gang_objects(gang)
    return Workload(gang.size, [("podgroups", group), *(("pods", m) for m in members)])


class Waiter(Protocol):
    async def wait(self) -> float:
        """Until what it waits for has happened; returns when (`time.perf_counter`)."""
        ...


class LoadCluster(Protocol):
    """Where the load runs: the simulated cluster in this process (`SimLoad`) or a real control
    plane (`tests.bench.scale_real.PlaneLoad`)."""

    def daemon_config(self, tmp: Path) -> Path:
        """The config of a daemon run against this cluster, its log `tmp/kbatchd.db`."""
        ...

    def reached(self, count: int, phase: str) -> Waiter:
        """Counts pods turning `phase` from now on, and waits for the `count`th."""
        ...

    def failed_pod(self) -> str:
        """A pod that has failed, named with its status."""
        ...

    async def create(self, workload: Workload) -> None:
        """One workload's objects, in order."""
        ...

    async def create_all(self, the: Plan) -> None: ...

    def cpu_seconds(self) -> float:
        """CPU seconds of the cluster's processes so far."""
        ...


def _resource(group: str, version: str, plural: str) -> Resource:
    found = lookup(group, version, plural)
    assert found is not None, f"the simulated cluster serves no {group}/{version} {plural}"
    return found


@dataclass
class SimLoad:
    """The simulated cluster, hosted by this process: its CPU is this process's."""

    sim: SimCluster

    def __post_init__(self) -> None:
        self._resources = {
            "pods": PODS,
            "jobs": JOBS,
            "podgroups": _resource("scheduling.k8s.io", "v1alpha2", "podgroups"),
            "jobsets": _resource("jobset.x-k8s.io", "v1alpha2", "jobsets"),
        }

    def daemon_config(self, tmp: Path) -> Path:
        assert self.sim.kubeconfig_path is not None
        return daemon_config(tmp, self.sim.kubeconfig_path)

    def reached(self, count: int, phase: str) -> Reached:
        return Reached(self.sim.store, count, phase)

    def failed_pod(self) -> str:
        pod = next(p for p in self.sim.objects(PODS, NS) if phase_of(p) == "Failed")
        return f"{pod['metadata']['name']}: {pod['status']}"

    async def create(self, workload: Workload) -> None:
        for plural, body in workload.objects:
            self.sim.registry.create(self._resources[plural], NS, body)

    async def create_all(self, the: Plan) -> None:
        since = 0
        for workload in workloads(the):
            await self.create(workload)
            since += workload.pods
            if since >= 200:
                since = 0
                await anyio.lowlevel.checkpoint()  # let the server and the agent run

    def cpu_seconds(self) -> float:
        return time.process_time()


@dataclass
class Sampled:
    """What the daemon's `/metrics` showed, sampled while it ran."""

    samples: int = 0
    ingest_max: float = 0.0
    actions_max: float = 0.0
    ingest_last: float = 0.0
    actions_last: float = 0.0
    in_flight_last: float = 0.0
    # Histogram series (`name{labels}` without `le`) -> upper bound -> cumulative count.
    histograms: dict[str, dict[float, float]] = field(default_factory=dict)


HISTOGRAMS: Final = ("kbatchd_fold_lag_seconds", "kbatchd_reconcile_latency_seconds")


def _parse_metrics(text: str, into: Sampled) -> None:
    for line in text.splitlines():
        if line.startswith("#") or " " not in line:
            continue
        name, value = line.rsplit(" ", 1)
        number = float(value)
        if name == 'kbatchd_queue_depth{queue="ingest"}':
            into.ingest_last = number
            into.ingest_max = max(into.ingest_max, number)
        elif name == 'kbatchd_queue_depth{queue="actions"}':
            into.actions_last = number
            into.actions_max = max(into.actions_max, number)
        elif name == 'kbatchd_queue_depth{queue="in_flight"}':
            into.in_flight_last = number
        elif name.startswith(HISTOGRAMS) and "_bucket{" in name:
            series, labels = name.split("_bucket{", 1)
            bound = labels.split('le="', 1)[1].split('"', 1)[0]
            rest = ",".join(x for x in labels.rstrip("}").split(",") if not x.startswith("le="))
            into.histograms.setdefault(f"{series}{{{rest}}}", {})[float(bound)] = number
    into.samples += 1


async def scrape(url: str, into: Sampled) -> Sampled:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/metrics") as response:
        _parse_metrics(await response.text(), into)
    return into


async def sample_metrics(url: str, into: Sampled, stop: anyio.Event) -> None:
    """`/metrics` once a second until `stop`: a sampler, not a wait (nothing waits on it)."""
    while not stop.is_set():
        await scrape(url, into)
        with anyio.move_on_after(1.0):
            await stop.wait()


async def drained(url: str) -> Sampled | None:
    """The daemon's queues, once every one is empty: nothing waits for the pump, the
    actuator or the API."""
    now = await scrape(url, Sampled())
    empty = now.ingest_last == now.actions_last == now.in_flight_last == 0
    return now if empty else None


def _health_url(daemon: Child) -> str:
    lines = daemon.lines("health serving")
    assert lines, "the daemon logged no health address"
    return str(lines[0]["url"])


def _file_bytes(log: Path) -> int:
    """The log's size on disk, its write-ahead log included (empty once the daemon stopped)."""
    return sum(os.path.getsize(p) for p in log.parent.glob(f"{log.name}*"))


@dataclass
class Run:
    created_s: float = 0.0
    wall_s: float = 0.0
    start_ms: int = 0
    end_ms: int = 0
    hwm: int = 0
    # CPU seconds from the first object created to the last pod Succeeded.
    daemon_cpu_s: float = 0.0
    cluster_cpu_s: float = 0.0
    sampled: Sampled = field(default_factory=Sampled)
    # From the last pod Succeeded to every queue of the daemon empty.
    drained_s: float = 0.0
    end: Sampled = field(default_factory=Sampled)
    restart_synced_s: float = 0.0
    restart_done_s: float = 0.0


async def _all_succeeded(cluster: LoadCluster, finished: Waiter) -> float:
    """When every pod had Succeeded (`finished.wait`); fails at the first pod that failed
    instead, which no pod of this load should (a gang member failed is never replaced)."""
    failed = cluster.reached(1, "Failed")
    at = 0.0
    async with anyio.create_task_group() as tg:

        async def succeeded() -> None:
            nonlocal at
            at = await finished.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(succeeded)
        await failed.wait()
        raise AssertionError(f"a pod failed: {cluster.failed_pod()}")
    return at


async def _stop(daemon: Child) -> None:
    daemon.send_signal(signal.SIGTERM)
    code = await daemon.wait(within=300)
    assert code == 0, daemon.output()


async def drive(the: Plan, tmp: Path, cluster: LoadCluster) -> Run:
    """The load, then a stop, a change and a restart. The daemon's log is `tmp/kbatchd.db`."""
    result = Run()
    config = cluster.daemon_config(tmp)
    async with running_daemon(config) as daemon:
        stop = anyio.Event()
        url = _health_url(daemon)
        async with anyio.create_task_group() as tg:
            tg.start_soon(sample_metrics, url, result.sampled, stop)
            finished = cluster.reached(the.pods, "Succeeded")
            result.start_ms = time.time_ns() // 1_000_000
            start = time.perf_counter()
            cpu = cpu_seconds(daemon.process.pid), cluster.cpu_seconds()
            await cluster.create_all(the)
            result.created_s = time.perf_counter() - start
            with anyio.fail_after(3_600):
                result.wall_s = await _all_succeeded(cluster, finished) - start
            result.end_ms = time.time_ns() // 1_000_000
            result.daemon_cpu_s = cpu_seconds(daemon.process.pid) - cpu[0]
            result.cluster_cpu_s = cluster.cpu_seconds() - cpu[1]
            stop.set()
        result.end = await eventually(
            lambda: drained(url), within=600, what="the daemon's queues empty"
        )
        result.drained_s = time.perf_counter() - start - result.wall_s
        result.hwm = peak_rss(daemon.process.pid)
        await _stop(daemon)

    # Down: the cluster moves on without it (one more gang), then it starts again.
    late = Gang("late", 8, RACK)
    bound = cluster.reached(late.size, "Running")
    await cluster.create(gang_workload(late))
    start = time.perf_counter()
    async with running_daemon(config) as daemon:
        result.restart_synced_s = time.perf_counter() - start
        with anyio.fail_after(600):
            result.restart_done_s = await bound.wait() - start
        await _stop(daemon)
    return result


@dataclass
class GangTimes:
    size: int
    last_member_ms: int = 0
    decision: int = 0
    binds: frozenset[int] = frozenset()
    decided_ms: int = 0
    first_bound_ms: int = 0
    last_bound_ms: int = 0
    refused: bool = False


@dataclass
class Read:
    """What the log says about the run."""

    events: int = 0
    in_run: int = 0
    decisions_in_run: int = 0
    per_second: dict[int, int] = field(default_factory=dict)
    decisions_per_second: dict[int, int] = field(default_factory=dict)
    gangs: dict[str, GangTimes] = field(default_factory=dict)
    restart_ms: int = 0
    restart_first_decision_ms: int = 0


async def read_log(path: Path, the: Plan, run: Run) -> Read:
    found = Read(gangs={g.name: GangTimes(g.size) for g in the.gangs})
    gangs = found.gangs
    admitting: dict[int, GangTimes] = {}
    starts = 0
    async with EventLog.open(path, readonly=True) as log:
        async for seq, event in log.read():
            found.events = seq
            if run.start_ms <= event.at <= run.end_ms:
                found.in_run += 1
                second = event.at // 1000
                found.per_second[second] = found.per_second.get(second, 0) + 1
                if isinstance(event, Decided):
                    found.decisions_in_run += 1
                    found.decisions_per_second[second] = (
                        found.decisions_per_second.get(second, 0) + 1
                    )
            if isinstance(event, Started):
                starts += 1
                if starts == 2:
                    found.restart_ms = event.at
                continue
            if starts == 2 and not found.restart_first_decision_ms and isinstance(event, Decided):
                found.restart_first_decision_ms = event.at
            if starts != 1:
                continue  # the gang figures are of the first run only
            if isinstance(event, Observed):
                if event.change == "ADDED" and event.kind == "Pod":
                    times = gangs.get(event.name.rsplit("-", 1)[0])
                    if times is not None and event.name.startswith("g"):
                        times.last_member_ms = max(times.last_member_ms, event.at)
            elif isinstance(event, Decided):
                if not event.key.startswith("PodGroup/"):
                    continue
                times = gangs.get(event.key.rsplit("/", 1)[1])
                if times is None or times.decision:
                    continue
                binds = frozenset(i for i, x in enumerate(event.intents) if type(x) is Bind)
                if binds:
                    times.decision, times.binds, times.decided_ms = seq, binds, event.at
                    admitting[seq] = times
                elif times.last_member_ms and event.reason.startswith(NO_ROOM):
                    times.refused = True
            elif isinstance(event, Outcome):
                times = admitting.get(event.decision)
                if times is not None and event.index in times.binds:
                    if not times.first_bound_ms or event.at < times.first_bound_ms:
                        times.first_bound_ms = event.at
                    times.last_bound_ms = max(times.last_bound_ms, event.at)
    return found


def _percentiles(values: list[float]) -> tuple[float, float]:
    if len(values) == 1:
        return values[0], values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[98]


def _latency_row(table: Table, where: str, what: str, gangs: list[GangTimes], target: bool) -> None:
    clean = [g for g in gangs if not g.refused and g.first_bound_ms]
    refused = sum(1 for g in gangs if g.refused)
    if not clean:
        table.add(f"{where}: {what}", f"none admitted without waiting ({refused} waited)")
        return
    d50, d99 = _percentiles([(g.decided_ms - g.last_member_ms) / 1000 for g in clean])
    f50, f99 = _percentiles([(g.first_bound_ms - g.last_member_ms) / 1000 for g in clean])
    b50, b99 = _percentiles([(g.last_bound_ms - g.last_member_ms) / 1000 for g in clean])
    table.add(
        f"{where}: {what}, last member observed → admission decided (binds issued; log clock), "
        "p50 / p99",
        f"{d50:.2f} / {d99:.2f} s ({len(clean)} gangs; {refused} waited for room, left out)",
        f"p99 < {TARGET_BIG_P99:.0f} s" if target else "",
        d99 < TARGET_BIG_P99 if target else None,
    )
    table.add(
        f"{where}: {what}, last member observed → first / last bind done, p50 / p99",
        f"{f50:.2f} / {f99:.2f} s; {b50:.2f} / {b99:.2f} s",
    )


async def snapshot_time(path: Path) -> tuple[float, int, float]:
    """Seconds to fold the whole log from its newest snapshot, seconds to encode and save a
    snapshot of the result (the daemon's path), and its size."""
    async with EventLog.open(path) as log:
        began = time.perf_counter()
        replayed = await rebuild(log)
        folded = time.perf_counter() - began
        began = time.perf_counter()
        body = encode_state(replayed.state)
        await log.save_snapshot(replayed.state.seq, body)
        saved = time.perf_counter() - began
    return saved, len(body), folded


def describe(the: Plan) -> str:
    return (
        f"{the.nodes:,} nodes ({the.topology}), {the.pods:,} pods: "
        f"{len(the.gangs)} gangs ({the.gang_pods:,} pods), {len(the.jobs)} Jobs "
        f"({the.job_pods:,}), {len(the.jobsets)} JobSets ({the.jobset_pods:,})"
    )


@dataclass
class Figures:
    """What the stopped daemon's log file says, beside the run's own measures."""

    read: Read
    size: int
    daemon_snapshots: int
    saved_s: float
    snapshot_bytes: int
    folded_s: float


async def read_figures(path: Path, the: Plan, done: Run) -> Figures:
    read = await read_log(path, the, done)
    size, snapshots = _file_bytes(path), len(snapshot_seqs(path))
    return Figures(read, size, snapshots, *await snapshot_time(path))


async def run(table: Table, scale: float = 1.0) -> None:
    the = plan(scale)
    print(f"scale: {describe(the)}", flush=True)
    relax_collector()  # this process hosts the simulated cluster, as `kbatchd sim` does
    with tempfile.TemporaryDirectory(prefix="kbatchd-scale-") as tmp_name:
        tmp = Path(tmp_name)
        async with SimCluster.start(topology=the.topology, seed=7) as sim:
            done = await drive(the, tmp, SimLoad(sim))
        figures = await read_figures(tmp / "kbatchd.db", the, done)
    report(table, the, done, figures, "scale", "the simulated cluster's process (this one)")


def report(table: Table, the: Plan, done: Run, figures: Figures, where: str, cluster: str) -> None:
    """The rows of one run, each label begun with `where`; `cluster` names what
    `Run.cluster_cpu_s` is the CPU of."""
    read, size = figures.read, figures.size
    big = max(g.size for g in the.gangs)
    shares = (the.gang_pods / the.pods, the.job_pods / the.pods, the.jobset_pods / the.pods)
    table.add(
        f"{where}: {the.nodes:,} nodes, {the.pods:,} pods "
        f"({shares[0]:.0%} gang / {shares[1]:.0%} Job / {shares[2]:.0%} JobSet), "
        "first object created → last pod Succeeded",
        f"{done.wall_s:.0f} s (created in {done.created_s:.0f} s)",
    )
    seconds = (done.end_ms - done.start_ms) / 1000
    table.add(
        f"{where}: events appended (ingest → log → fold), mean / busiest second",
        f"{read.in_run / seconds:,.0f} / {max(read.per_second.values(), default=0):,} "
        f"events/s ({read.in_run:,} events)",
    )
    table.add(
        f"{where}: decisions logged, mean / busiest second",
        f"{read.decisions_in_run / seconds:,.0f} / "
        f"{max(read.decisions_per_second.values(), default=0):,} decisions/s "
        f"({read.decisions_in_run:,})",
    )
    gangs = list(read.gangs.values())
    _latency_row(table, where, f"all {len(gangs)} gangs", gangs, target=False)
    _latency_row(
        table,
        where,
        f"the {sum(1 for g in gangs if g.size == big)} gangs of {big:,}",
        [g for g in gangs if g.size == big],
        target=big == BIG,
    )
    table.add(
        f"{where}: CPU of the daemon / of {cluster}, first object created → last pod Succeeded",
        f"{done.daemon_cpu_s:.0f} s / {done.cluster_cpu_s:.0f} s",
    )
    table.add(
        f"{where}: daemon peak RSS (VmHWM)",
        f"{done.hwm / 2**20:,.0f} MiB",
        "< 1 GiB",
        done.hwm < TARGET_RSS,
    )
    table.add(
        f"{where}: log bytes per event (file with its snapshots ÷ events)",
        f"{size / read.events:,.0f} B ({size / 2**20:,.0f} MiB, {read.events:,} events, "
        f"{figures.daemon_snapshots} snapshots by the daemon)",
    )
    table.add(
        f"{where}: snapshot of the final state, encode and save",
        f"{figures.saved_s:.2f} s ({figures.snapshot_bytes / 2**20:,.0f} MiB; "
        f"folding the log from the newest snapshot {figures.folded_s:.1f} s)",
    )
    decided = (read.restart_first_decision_ms - read.restart_ms) / 1000
    table.add(
        f"{where}: restart after SIGTERM: start → synced / Started → first decision / "
        "start → a gang made meanwhile running",
        f"{done.restart_synced_s:.1f} s / {decided:.1f} s / {done.restart_done_s:.1f} s",
    )
    sampled = done.sampled
    table.add(
        f"{where}: backlog, daemon's /metrics each second: ingest queue max (items, cap 4,096) / "
        "actions queue max; every queue empty after the last pod Succeeded",
        f"{sampled.ingest_max:,.0f} / {sampled.actions_max:,.0f} ({sampled.samples} samples); "
        f"empty {done.drained_s:.1f} s after",
    )
    table.add(
        f"{where}: fold lag (API change seen → its event folded; oldest of each batch), "
        "p50 / p99 / max, histogram buckets",
        _buckets(done.end, "kbatchd_fold_lag_seconds{}"),
    )
    table.add(
        f"{where}: reconcile latency of the gang reconciler (oldest watch event of a pass → its "
        "decisions logged and handed to the actuator), p50 / p99 / max, histogram buckets",
        _buckets(done.end, 'kbatchd_reconcile_latency_seconds{reconciler="gang"}'),
    )


def _buckets(sampled: Sampled, series: str) -> str:
    """p50, p99 and max of a histogram as the upper bounds of the buckets holding them."""
    counts = sampled.histograms.get(series, {})
    total = counts.get(float("inf"), 0.0)
    if not total:
        return "no records"
    finite = sorted(b for b in counts if b != float("inf"))

    def bound(share: float) -> str:
        for le in finite:
            if counts[le] >= share * total:
                return f"≤ {le:g}"
        return f"> {finite[-1]:g}"

    return f"{bound(0.5)} / {bound(0.99)} / {bound(1.0)} s ({total:,.0f} records)"


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--scale", type=float, default=1.0, help="fraction of full size")
    args = parser.parse_args()
    table = Table()
    eventloop.run(run, table, args.scale)
    print()
    print(table.render())
