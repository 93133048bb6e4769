"""A JobSet's child Jobs: finding them, sorting them into the current attempt and the previous
one (spec B3), counting them per replicatedJob (B0), and building new ones with upstream's
names, labels, annotations and owner reference.

Child Job names are deterministic (``<jobset>-<replicatedJob>-<index>``), so the children are
found by name — O(replicas), no index over all Jobs. A Job of that name that some other object
controls (say, an earlier JobSet of the same name still being collected) is *foreign*: it is
neither counted nor replaced, but it blocks the creation, as upstream's create would fail with
AlreadyExists.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Final

from daemon.controllers.jobset.spec import (
    COORDINATOR,
    EXCLUSIVE_TOPOLOGY,
    GLOBAL_REPLICAS,
    GROUP_NAME,
    GROUP_REPLICAS,
    JOB_GLOBAL_INDEX,
    JOB_GROUP_INDEX,
    JOB_INDEX,
    JOB_KEY,
    JOB_RESTART_ATTEMPT,
    JOBSET_NAME,
    JOBSET_UID,
    NAMESPACED_JOB,
    NO_SCHEDULE_TAINT,
    NODE_SELECTOR_STRATEGY,
    REPLICATED_JOB_NAME,
    REPLICATED_JOB_REPLICAS,
    RESTART_ATTEMPT,
    JobSetView,
    ReplicatedJob,
    job_name,
)
from daemon.controllers.jobset.status import Counters
from daemon.controllers.jobset.volumes import add_volumes
from events.jsondata import clone
from events.objects import Job
from events.state import State

ACTIVE: Final = "active"
SUCCEEDED: Final = "succeeded"
FAILED_JOB: Final = "failed"


@dataclass(frozen=True)
class Child:
    """One child Job slot: a replicatedJob's Job index, and the Job there if any."""

    rj: ReplicatedJob
    index: int
    name: str
    job: Job | None


@dataclass
class Children:
    """Every child Job slot of a JobSet, sorted the way upstream's `getChildJobs` does."""

    slots: list[Child] = field(default_factory=list)
    active: list[Child] = field(default_factory=list)
    succeeded: list[Child] = field(default_factory=list)
    failed: list[Child] = field(default_factory=list)
    previous: list[Child] = field(default_factory=list)
    foreign: list[Child] = field(default_factory=list)
    missing: list[Child] = field(default_factory=list)

    def of(self, rj: str, bucket: list[Child]) -> list[Child]:
        return [c for c in bucket if c.rj.name == rj]


def job_condition(job: Job, type_: str) -> dict[str, Any] | None:
    for condition in job.status.get("conditions") or ():
        if (
            isinstance(condition, dict)
            and condition.get("type") == type_
            and condition.get("status") == "True"
        ):
            return condition
    return None


def finished_type(job: Job) -> str:
    """upstream `JobFinished`: the first true Complete or Failed condition decides."""
    for condition in job.status.get("conditions") or ():
        if not isinstance(condition, dict) or condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return SUCCEEDED
        if condition.get("type") == "Failed":
            return FAILED_JOB
    return ACTIVE


def _attempt(job: Job, key: str) -> int:
    value = job.labels.get(key, "")
    return int(value) if value.isdecimal() else -1  # unreadable: treated as outdated


def classify(state: State, cluster: str, view: JobSetView) -> Children:
    jobs = state.jobs
    prefix = f"{cluster}/{view.namespace}/"
    uid = view.jobset.uid
    restarts = view.status.restarts
    children = Children()
    for rj in view.spec.replicated_jobs:
        job_restarts = view.job_restarts(rj.name)
        for index in range(rj.replicas):
            name = job_name(view.name, rj.name, index)
            job = jobs.get(prefix + name)
            child = Child(rj, index, name, job)
            children.slots.append(child)
            if job is None:
                children.missing.append(child)
                continue
            owner = job.controller
            if owner is None or owner.kind != "JobSet" or owner.uid != uid:
                children.foreign.append(child)
                continue
            wanted_job_attempt = job_restarts[index] if index < len(job_restarts) else 0
            if (
                _attempt(job, RESTART_ATTEMPT) < restarts
                or (
                    JOB_RESTART_ATTEMPT in job.labels
                    and _attempt(job, JOB_RESTART_ATTEMPT) < wanted_job_attempt
                )
                or (JOB_RESTART_ATTEMPT not in job.labels and wanted_job_attempt > 0)
            ):
                children.previous.append(child)
                continue
            kind = finished_type(job)
            bucket = {
                ACTIVE: children.active,
                SUCCEEDED: children.succeeded,
                FAILED_JOB: children.failed,
            }[kind]
            bucket.append(child)
    return children


def count(view: JobSetView, children: Children) -> dict[str, Counters]:
    """upstream `calculateReplicatedJobStatuses`, over the current attempt only."""
    counters = {rj.name: Counters() for rj in view.spec.replicated_jobs}
    for child in children.active:
        job = child.job
        assert job is not None
        counter = counters[child.rj.name]
        status, spec = job.status, job.spec
        parallelism = spec.get("parallelism")
        pods = parallelism if isinstance(parallelism, int) else 1
        completions = spec.get("completions")
        if isinstance(completions, int) and completions < pods:
            pods = completions
        if (status.get("succeeded") or 0) + (status.get("ready") or 0) >= pods:
            counter.ready += 1
        if (status.get("active") or 0) > 0:
            counter.active += 1
        if spec.get("suspend") is True:
            counter.suspended += 1
    for child in children.succeeded:
        counters[child.rj.name].succeeded += 1
    for child in children.failed:
        counters[child.rj.name].failed += 1
    return counters


# -- building a child Job --------------------------------------------------------------------


def job_key(namespace: str, name: str) -> str:
    """upstream `jobHashKey`: SHA-1 of ``<namespace>/<jobName>``, hex."""
    return hashlib.sha1(f"{namespace}/{name}".encode(), usedforsecurity=False).hexdigest()


def identity(view: JobSetView, rj: ReplicatedJob, index: int, job_restarts: int) -> dict[str, str]:
    """The labels upstream's `labelAndAnnotateObject` writes, as labels and as annotations,
    on the Job and on its pod template."""
    spec = view.spec
    name = job_name(view.name, rj.name, index)
    global_index = 0
    group_replicas = 0
    group_index = 0
    seen = False
    for other in spec.replicated_jobs:
        if other.name == rj.name:
            seen = True
        if not seen:
            global_index += other.replicas
        if other.group_name == rj.group_name:
            group_replicas += other.replicas
            if not seen:
                group_index += other.replicas
    values = {
        JOBSET_NAME: view.name,
        JOBSET_UID: view.jobset.uid,
        REPLICATED_JOB_NAME: rj.name,
        RESTART_ATTEMPT: str(view.status.restarts),
        JOB_RESTART_ATTEMPT: str(job_restarts),
        REPLICATED_JOB_REPLICAS: str(rj.replicas),
        GLOBAL_REPLICAS: str(view.total_replicas),
        JOB_INDEX: str(index),
        JOB_KEY: job_key(view.namespace, name),
        JOB_GLOBAL_INDEX: str(global_index + index),
        GROUP_NAME: rj.group_name,
        GROUP_REPLICAS: str(group_replicas),
        JOB_GROUP_INDEX: str(group_index + index),
    }
    coordinator = spec.coordinator
    if coordinator is not None:
        values[COORDINATOR] = (
            f"{view.name}-{coordinator.replicated_job}-{coordinator.job_index}-"
            f"{coordinator.pod_index}.{view.subdomain}"
        )
    return values


def _exclusive(view: JobSetView, rj: ReplicatedJob) -> dict[str, str]:
    """Exclusive-placement annotations (spec B6): the JobSet's, then the replicatedJob's."""
    notes: dict[str, str] = {}
    for source in (view.jobset.annotations, rj.job_meta.get("annotations") or {}):
        if EXCLUSIVE_TOPOLOGY in source:
            notes[EXCLUSIVE_TOPOLOGY] = source[EXCLUSIVE_TOPOLOGY]
            if NODE_SELECTOR_STRATEGY in source:
                notes[NODE_SELECTOR_STRATEGY] = source[NODE_SELECTOR_STRATEGY]
    return notes


def _merged(base: Any, extra: dict[str, str]) -> dict[str, str]:
    result = dict(base) if isinstance(base, dict) else {}
    result.update(extra)
    return result


def job_body(
    view: JobSetView,
    rj: ReplicatedJob,
    index: int,
    job_restarts: int,
    job_manager: str,
    pod_group: str | None = None,
) -> dict[str, Any]:
    """upstream `constructJob`, with `spec.managedBy` naming kbatchd's Job controller so that
    kbatchd runs the child (unless the template names another controller); its pods join
    `pod_group` when given (`jobset.gangs`)."""
    name = job_name(view.name, rj.name, index)
    ids = identity(view, rj, index, job_restarts)
    notes = {**ids, **_exclusive(view, rj)}
    meta = rj.job_meta
    spec: dict[str, Any] = clone(rj.job_spec)
    pod_template = spec.setdefault("template", {})
    pod_meta = pod_template.setdefault("metadata", {})
    pod_meta["labels"] = _merged(pod_meta.get("labels"), ids)
    pod_meta["annotations"] = _merged(pod_meta.get("annotations"), notes)
    pod_spec = pod_template.setdefault("spec", {})
    if view.dns_hostnames:
        pod_spec["subdomain"] = view.subdomain
    if EXCLUSIVE_TOPOLOGY in notes and NODE_SELECTOR_STRATEGY in notes:
        selector = dict(pod_spec.get("nodeSelector") or {})
        selector[NAMESPACED_JOB] = f"{view.namespace}_{name}"
        pod_spec["nodeSelector"] = selector
        tolerations = list(pod_spec.get("tolerations") or [])
        tolerations.append({"key": NO_SCHEDULE_TAINT, "operator": "Exists", "effect": "NoSchedule"})
        pod_spec["tolerations"] = tolerations
    add_volumes(view, pod_spec)
    if pod_group is not None:
        pod_spec["schedulingGroup"] = {"podGroupName": pod_group}
    spec["suspend"] = view.suspended
    spec.setdefault("managedBy", job_manager)
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": view.namespace,
            "labels": _merged(meta.get("labels"), ids),
            "annotations": _merged(meta.get("annotations"), notes),
            "ownerReferences": [view.owner_reference()],
        },
        "spec": spec,
    }
