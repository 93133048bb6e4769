"""The mixed load a chaos run submits: Indexed and plain Jobs (some pods failing once), gangs
of one-GPU pods that must share a rack, and JobSets; sizes drawn from the run's seed.

The load is written straight into the simulated cluster's registry: the submitter is not the
system under test, so its writes do not meet the injected faults."""

from __future__ import annotations

import asyncio
import copy
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Final

from daemon.sim.agent import EXIT_CODE
from daemon.sim.cluster import SimCluster
from daemon.sim.registry import MERGE_PATCH
from daemon.sim.resources import JOBS, JOBSETS, PODS, Resource, lookup
from daemon.sim.store import WatchEvent
from daemon.sim.topology import RACK_LABEL
from tests.daemon.test_gang import gpus_of
from tests.daemon.test_gang_preemption import pod as preempted_pod
from tests.daemon.test_jobs import job_body
from tests.daemon.test_jobsets import jobset, replicated

NAMESPACE: Final = "default"
# The one cluster of a single-cluster run, as the daemon's settings name it.
CLUSTER: Final = "sim-0"
# 4 racks of 4 hosts of 8 GPUs: a gang of up to 32 one-GPU pods fits in a rack.
TOPOLOGY: Final = "blocks=1,racks=4,hosts=4,gpus=8"
PODGROUPS: Final = lookup("scheduling.k8s.io", "v1alpha2", "podgroups")
JOB_NAME: Final = "batch.kubernetes.io/job-name"
INDEX: Final = "batch.kubernetes.io/job-completion-index"
# Simulated seconds a pod runs (the runs go at 4x), drawn per workload: long enough for the
# faults to land while pods are created, bound, running and finishing.
RUN_SECONDS: Final = (4, 8, 12)


@dataclass(frozen=True)
class Size:
    """How much of each kind one run submits."""

    indexed_jobs: int
    plain_jobs: int
    gangs: int
    jobsets: int
    dispatched: int  # Jobs sent to several clusters (`dispatched`)


FULL: Final = Size(indexed_jobs=3, plain_jobs=2, gangs=3, jobsets=1, dispatched=8)
SHORT: Final = Size(indexed_jobs=1, plain_jobs=1, gangs=2, jobsets=1, dispatched=3)


Objects = list[tuple[Resource, dict[str, Any]]]


@dataclass
class Load:
    """What one run creates, in order, and what it expects to have finished."""

    # Submitted to `home`, after `everywhere` to every cluster and `fill` to the workers.
    objects: Objects = field(default_factory=list)
    home: str = CLUSTER
    everywhere: Objects = field(default_factory=list)
    fill: dict[str, Objects] = field(default_factory=dict)
    jobs: list[str] = field(default_factory=list)
    gangs: dict[str, int] = field(default_factory=dict)  # PodGroup -> members (= minCount)
    jobsets: list[str] = field(default_factory=list)
    # Jobs whose pods fail once: of an Indexed Job, the first pod of these indexes; of a
    # plain Job, the pods created in these places (0 the first).
    fail_once: dict[str, set[int]] = field(default_factory=dict)


def _job(name: str, rng: random.Random, *, indexed: bool) -> dict[str, Any]:
    completions = rng.randint(4, 8)
    body = job_body(
        name,
        policy="Failed" if indexed else "TerminatingOrFailed",
        parallelism=rng.randint(2, completions),
        completions=completions,
        cpu="1",
        annotations=_runs(rng),
    )
    body["spec"]["backoffLimit"] = 100
    if indexed:
        body["spec"]["completionMode"] = "Indexed"
    return body


def _runs(rng: random.Random) -> dict[str, str]:
    return {"sim.kbatchd.dev/run-seconds": str(rng.choice(RUN_SECONDS))}


def _gang(name: str, size: int, rng: random.Random) -> list[tuple[Resource, dict[str, Any]]]:
    assert PODGROUPS is not None
    group = {
        "apiVersion": "scheduling.k8s.io/v1alpha2",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": size}},
            "schedulingConstraints": {"topology": [{"key": RACK_LABEL}]},
        },
    }
    runs = _runs(rng)
    members = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{name}-{i}",
                "annotations": runs,
            },
            "spec": {
                "schedulerName": "kbatchd",
                "schedulingGroup": {"podGroupName": name},
                "restartPolicy": "Never",
                "containers": [{"name": "main", "image": "busybox", "resources": gpus_of(1)}],
            },
        }
        for i in range(size)
    ]
    return [(PODGROUPS, group), *((PODS, m) for m in members)]


def build(rng: random.Random, size: Size) -> Load:
    load = Load()
    for i in range(size.indexed_jobs):
        body = _job(f"indexed-{i}", rng, indexed=True)
        completions = body["spec"]["completions"]
        load.fail_once[body["metadata"]["name"]] = set(rng.sample(range(completions), 1))
        load.objects.append((JOBS, body))
        load.jobs.append(body["metadata"]["name"])
    for i in range(size.plain_jobs):
        body = _job(f"plain-{i}", rng, indexed=False)
        load.fail_once[body["metadata"]["name"]] = {0}
        load.objects.append((JOBS, body))
        load.jobs.append(body["metadata"]["name"])
    for i in range(size.gangs):
        name, members = f"gang-{i}", rng.randint(8, 24)
        load.objects.extend(_gang(name, members, rng))
        load.gangs[name] = members
    for i in range(size.jobsets):
        name = f"set-{i}"
        annotations = _runs(rng)
        rjs = [
            replicated("leader", 1, 1, annotations=annotations),
            replicated("workers", 2, rng.randint(2, 3), annotations=annotations),
        ]
        load.objects.append((JOBSETS, jobset(name, rjs)))
        load.jobsets.append(name)
    return load


# Several clusters: a manager and three workers of 2 racks of 2 hosts of 8 GPUs, the workers
# partly full of low-priority pods that run until deleted. w1 has rack b0-r1 free, w2 rack
# b0-r0, w3 none: dispatched Jobs fit, wait, or preempt.
MANAGER: Final = "m"
WORKERS: Final = ("w1", "w2", "w3")
WORKER_TOPOLOGY: Final = "blocks=1,racks=2,hosts=2,gpus=8"
_FULL_RACKS: Final = {"w1": ("b0-r0",), "w2": ("b0-r1",), "w3": ("b0-r0", "b0-r1")}
PRIORITY_CLASSES: Final = lookup("scheduling.k8s.io", "v1", "priorityclasses")
DISPATCHED: Final = "kbatchd.dev/multicluster"


def _dispatched_job(name: str, rng: random.Random) -> dict[str, Any]:
    """Two 8-GPU pods that must share a rack, of priority high, sent to the workers; running
    longer than the other loads' pods, for the workers' outages to meet them at every step."""
    runs = {"sim.kbatchd.dev/run-seconds": str(rng.choice((12, 16, 24)))}
    body = job_body(name, parallelism=2, completions=2, annotations=runs)
    body["metadata"]["labels"] = {DISPATCHED: "true"}
    template = body["spec"]["template"]
    template["metadata"]["annotations"]["kueue.x-k8s.io/podset-required-topology"] = RACK_LABEL
    template["spec"]["priorityClassName"] = "high"
    template["spec"]["containers"][0]["resources"] = gpus_of(8)
    return body


def dispatched(rng: random.Random, jobs: int) -> Load:
    """`jobs` Jobs submitted to the manager, each to run in exactly one worker."""
    assert PRIORITY_CLASSES is not None
    load = Load(home=MANAGER)
    load.everywhere = [
        (PRIORITY_CLASSES, {"metadata": {"name": name}, "value": value})
        for name, value in (("low", 5), ("high", 1000))
    ]
    for worker, racks in _FULL_RACKS.items():
        load.fill[worker] = [
            (PODS, preempted_pod(f"fill-{rack}-h{h}", 8, "low", host=f"{rack}-h{h}"))
            for rack in racks
            for h in range(2)
        ]
    for i in range(jobs):
        body = _dispatched_job(f"dispatched-{i}", rng)
        load.objects.append((JOBS, body))
        load.jobs.append(body["metadata"]["name"])
    return load


def submit(sims: dict[str, SimCluster], load: Load) -> None:
    # Copies: the registry fills in the metadata of the body it is given and keeps it.
    for sim in sims.values():
        for resource, body in load.everywhere:
            sim.registry.create(resource, "", copy.deepcopy(body))
    for worker, objects in load.fill.items():
        for resource, body in objects:
            sims[worker].registry.create(resource, NAMESPACE, body)
    for resource, body in load.objects:
        sims[load.home].registry.create(resource, NAMESPACE, body)


class FailOnce:
    """Makes the chosen pods of `load.fail_once` exit 1, as they are created; records which it
    made fail (job name -> indexes, or places for a plain Job), the truth the invariants
    compare the cluster's pods against."""

    def __init__(self, sim: SimCluster, load: Load) -> None:
        self._sim = sim
        self._load = load
        self._created: dict[str, int] = {}
        self._indexes_seen: dict[str, set[int]] = {}
        self.failed: dict[str, list[int]] = {}
        sim.store.listeners.append(self._on_event)

    def _on_event(self, event: WatchEvent) -> None:
        if event.resource is not PODS or event.type != "ADDED":
            return
        metadata = event.obj["metadata"]
        job = (metadata.get("labels") or {}).get(JOB_NAME)
        chosen = self._load.fail_once.get(job or "")
        if job is None or chosen is None:
            return
        index_text = (metadata.get("annotations") or {}).get(INDEX)
        if index_text is not None:
            index = int(index_text)
            seen = self._indexes_seen.setdefault(job, set())
            first = index not in seen
            seen.add(index)
            fails = first and index in chosen
        else:
            index = self._created.get(job, 0)
            self._created[job] = index + 1
            fails = index in chosen
        if fails:
            self.failed.setdefault(job, []).append(index)
            # Not from inside the store's listener: the registry's write would emit again.
            asyncio.get_running_loop().call_soon(self._fail, metadata["name"])

    def _fail(self, name: str) -> None:
        patch = {"metadata": {"annotations": {EXIT_CODE: "1"}}}
        self._sim.registry.patch(PODS, NAMESPACE, name, MERGE_PATCH, patch)


def _condition(obj: dict[str, Any], kind: str) -> bool:
    return any(
        c.get("type") == kind and c.get("status") == "True"
        for c in (obj.get("status") or {}).get("conditions") or ()
    )


async def unfinished(
    get: Callable[[Resource, str], Awaitable[dict[str, Any] | None]], load: Load
) -> list[str]:
    """What of the load has not finished yet (empty once everything has), by `get` (an object
    of the home cluster's namespace, by resource and name; None when absent)."""
    left: list[str] = []
    for name in load.jobs:
        job = await get(JOBS, name)
        if job is None or not _condition(job, "Complete"):
            left.append(f"Job {name}")
    for name in load.jobsets:
        found = await get(JOBSETS, name)
        if found is None or not _condition(found, "Completed"):
            left.append(f"JobSet {name}")
    for name, members in load.gangs.items():
        done = 0
        for i in range(members):
            pod = await get(PODS, f"{name}-{i}") or {}
            done += (pod.get("status") or {}).get("phase") == "Succeeded"
        if done < members:
            left.append(f"gang {name} ({done}/{members} Succeeded)")
    return left
