"""Builders for the JobSet reconciler tests: JobSets as the API server stores them after the
webhook's defaulting, their child Jobs in any state (built by the reconciler's own `job_body`,
so labels are exactly what it writes), and a `State` holding them through the fold."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Final

import msgspec

from daemon.controllers.base import Decision
from daemon.controllers.jobset.jobs import job_body
from daemon.controllers.jobset.reconciler import JobSetReconciler
from daemon.controllers.jobset.spec import view_jobset
from daemon.sim import defaults
from events.intents import Create, Delete, Intent, Patch
from events.objects import (
    Job,
    JobSet,
    OwnerRef,
    PersistentVolumeClaim,
    Pod,
    Service,
    decode_object_dict,
)
from events.state import State
from tests.daemon.controllers.builders import CLUSTER, NS, T0, T0_TEXT, observe

JS_UID: Final = "js-uid-0001"
JS_MANAGER: Final = "kbatchd.dev/jobset-controller"
JS_REC: Final = JobSetReconciler()
MAX_INT32: Final = 2**31 - 1


def rjob(
    name: str,
    replicas: int = 1,
    *,
    parallelism: int = 1,
    completions: int | None = 1,
    depends_on: list[tuple[str, str]] | None = None,
    group: str | None = None,
    containers: list[dict[str, Any]] | None = None,
    pod_labels: dict[str, str] | None = None,
    **job_spec: Any,
) -> dict[str, Any]:
    """A replicatedJob; extra Job spec fields in camelCase (`backoffLimit=0`)."""
    spec: dict[str, Any] = {
        "parallelism": parallelism,
        "template": {
            "metadata": {"labels": dict(pod_labels or {})},
            "spec": {
                "restartPolicy": "Never",
                "containers": copy.deepcopy(containers) or [{"name": "main", "image": "x"}],
            },
        },
        **job_spec,
    }
    if completions is not None:
        spec["completions"] = completions
    entry: dict[str, Any] = {"name": name, "replicas": replicas, "template": {"spec": spec}}
    if depends_on:
        entry["dependsOn"] = [{"name": n, "status": s} for n, s in depends_on]
    if group is not None:
        entry["groupName"] = group
    return entry


def jobset_json(
    name: str = "js",
    replicated: Sequence[dict[str, Any]] = (),
    *,
    uid: str = JS_UID,
    status: dict[str, Any] | None = None,
    annotations: dict[str, str] | None = None,
    managed_by: str | None = JS_MANAGER,
    rv: str = "1",
    **spec: Any,
) -> dict[str, Any]:
    """A JobSet after the webhook's defaulting; spec fields in camelCase."""
    obj: dict[str, Any] = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "resourceVersion": rv,
            "creationTimestamp": T0_TEXT,
            "annotations": dict(annotations or {}),
        },
        "spec": {"replicatedJobs": copy.deepcopy(list(replicated or [rjob("a")])), **spec},
    }
    if managed_by is not None:
        obj["spec"]["managedBy"] = managed_by
    defaults.jobset(obj)
    obj["status"] = copy.deepcopy(status or {})
    return obj


def make_jobset(name: str = "js", replicated: Sequence[dict[str, Any]] = (), **kw: Any) -> JobSet:
    obj = decode_object_dict("JobSet", jobset_json(name, replicated, **kw))
    assert isinstance(obj, JobSet)
    return obj


# -- child Job states --------------------------------------------------------------------------


def cond(type_: str, reason: str = "", message: str = "", at: str = T0_TEXT) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True",
        "reason": reason,
        "message": message,
        "lastProbeTime": at,
        "lastTransitionTime": at,
    }


RUNNING: Final[dict[str, Any]] = {"active": 1, "ready": 0}
READY: Final[dict[str, Any]] = {"active": 1, "ready": 1}
COMPLETE: Final[dict[str, Any]] = {"succeeded": 1, "conditions": [cond("Complete")]}


def failed(
    reason: str = "BackoffLimitExceeded", message: str = "", at: str = T0_TEXT
) -> dict[str, Any]:
    return {"failed": 1, "conditions": [cond("Failed", reason, message, at)]}


def child(
    jobset: JobSet,
    rj: str,
    index: int = 0,
    status: dict[str, Any] | None = None,
    *,
    restarts: int | None = None,
    job_restarts: int = 0,
    deleting: bool = False,
    suspend: bool | None = None,
    owner_uid: str | None = None,
) -> Job:
    """The child Job the reconciler would create, observed in `status` (RUNNING by default),
    labelled for attempt `restarts` (the JobSet's current one by default)."""
    view = view_jobset(jobset)
    if restarts is not None:
        view = view_jobset(
            msgspec.structs.replace(jobset, status={**jobset.status, "restarts": restarts})
        )
    spec_rj = view.replicated_job(rj)
    assert spec_rj is not None
    body = job_body(view, spec_rj, index, job_restarts, "kbatchd.dev/job-controller")
    meta = body["metadata"]
    meta.update(uid=f"uid-{meta['name']}", resourceVersion="1", creationTimestamp=T0_TEXT)
    if deleting:
        meta["deletionTimestamp"] = T0_TEXT
    if owner_uid is not None:
        meta["ownerReferences"][0]["uid"] = owner_uid
    if suspend is not None:
        body["spec"]["suspend"] = suspend
    body["status"] = copy.deepcopy(status if status is not None else RUNNING)
    job = decode_object_dict("Job", body)
    assert isinstance(job, Job)
    return job


def pvc(name: str, *, owner: JobSet | None = None) -> PersistentVolumeClaim:
    owners = (OwnerRef("JobSet", owner.name, owner.uid, True),) if owner is not None else ()
    return PersistentVolumeClaim(name=name, namespace=NS, uid=f"uid-{name}", rv="1", owners=owners)


def pod_of(job: Job, index: int, *, attempt: int | None = None, **fields: Any) -> Pod:
    notes = {} if attempt is None else {"jobset.sigs.k8s.io/in-place-restart-attempt": str(attempt)}
    fields.setdefault("phase", "Running")
    return Pod(
        name=f"{job.name}-{index}-pod",
        namespace=job.namespace,
        uid=f"uid-{job.name}-{index}",
        rv="1",
        created=T0,
        labels={"jobset.sigs.k8s.io/jobset-name": job.labels["jobset.sigs.k8s.io/jobset-name"]},
        annotations=notes,
        owners=(OwnerRef("Job", job.name, job.uid, True),),
        node_name="n1",
        **fields,
    )


def state_of(*objects: JobSet | Job | PersistentVolumeClaim | Pod | Service) -> State:
    state = State()
    state.now = T0
    for obj in objects:
        observe(state, obj)
    return state


def jskey(name: str = "js") -> str:
    return f"JobSet/{CLUSTER}/{NS}/{name}"


def decide(state: State, name: str = "js", rec: JobSetReconciler = JS_REC) -> Decision | None:
    return rec.decide(state, jskey(name), state.now)


# -- reading decisions ---------------------------------------------------------------------


def js_status(decision: Decision | None) -> dict[str, Any]:
    """The JobSet status fields the decision writes (empty when none)."""
    for intent in decision.intents if decision else ():
        if isinstance(intent, Patch) and intent.kind == "JobSet" and intent.subresource == "status":
            assert isinstance(intent.patch, dict)
            patch: dict[str, Any] = intent.patch["status"]
            return patch
    return {}


def created_jobs(decision: Decision | None) -> list[str]:
    return [i.name for i in _intents(decision) if isinstance(i, Create) and i.kind == "Job"]


def deleted_jobs(decision: Decision | None) -> list[str]:
    return [i.name for i in _intents(decision) if isinstance(i, Delete) and i.kind == "Job"]


def job_patches(decision: Decision | None) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = {}
    for i in _intents(decision):
        if isinstance(i, Patch) and i.kind == "Job":
            assert isinstance(i.patch, dict)
            result[i.name] = i.patch
    return result


def _intents(decision: Decision | None) -> tuple[Intent, ...]:
    return decision.intents if decision is not None else ()


def conditions(patch: dict[str, Any]) -> dict[str, tuple[str, str]]:
    """type -> (status, reason) of the conditions a status patch writes."""
    return {c["type"]: (c["status"], c["reason"]) for c in patch.get("conditions") or ()}


def counters(patch: dict[str, Any]) -> dict[str, tuple[int, int, int, int, int]]:
    """rj -> (ready, succeeded, failed, active, suspended)."""
    return {
        e["name"]: (e["ready"], e["succeeded"], e["failed"], e["active"], e["suspended"])
        for e in patch.get("replicatedJobsStatus") or ()
    }
