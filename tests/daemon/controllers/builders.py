"""Builders for the Job reconciler tests: a Job in the API's JSON shape as the server returns
it after defaulting (decoded by the real decoder into the slim `Job`), the slim pods it owns,
and a `State` holding them."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Final

from daemon.controllers.job.reconciler import DEFAULT_FINALIZER, DEFAULT_MANAGER, JobReconciler
from daemon.controllers.job.spec import COMPLETION_INDEX, INDEX_FAILURE_COUNT
from daemon.sim import defaults
from events.fold import fold
from events.intents import Create, Delete, Intent, Patch
from events.objects import Job, Node, OwnerRef, Pod, SlimObject, decode_object_dict
from events.schema import Change, Observed
from events.state import State

CLUSTER: Final = "c1"
NS: Final = "ns"
JOB_UID: Final = "11111111-2222-3333-4444-555555555555"
T0: Final = 1_767_225_600_000  # 2026-01-01T00:00:00Z
T0_TEXT: Final = "2026-01-01T00:00:00Z"
SECOND: Final = 1000
FIN: Final = DEFAULT_FINALIZER
MANAGER: Final = DEFAULT_MANAGER
REC: Final = JobReconciler()


def container(name: str = "main", **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox:1.36", **extra}


def job_json(
    name: str = "job",
    *,
    uid: str = JOB_UID,
    managed_by: str | None = MANAGER,
    status: dict[str, Any] | None = None,
    containers: list[dict[str, Any]] | None = None,
    init_containers: list[dict[str, Any]] | None = None,
    restart_policy: str = "Never",
    template_labels: dict[str, str] | None = None,
    template_annotations: dict[str, str] | None = None,
    node_selector: dict[str, str] | None = None,
    rv: str = "1",
    deletion_timestamp: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A Job as the API server stores it: defaulted, with the generated selector and labels.
    Spec fields are given in snake_case or camelCase (`completion_mode="Indexed"`)."""
    pod_spec: dict[str, Any] = {
        "restartPolicy": restart_policy,
        "containers": copy.deepcopy(containers) if containers else [container()],
    }
    if init_containers:
        pod_spec["initContainers"] = copy.deepcopy(init_containers)
    if node_selector:
        pod_spec["nodeSelector"] = dict(node_selector)
    template: dict[str, Any] = {"metadata": {}, "spec": pod_spec}
    if template_labels:
        template["metadata"]["labels"] = dict(template_labels)
    if template_annotations:
        template["metadata"]["annotations"] = dict(template_annotations)
    obj: dict[str, Any] = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "resourceVersion": rv,
            "creationTimestamp": T0_TEXT,
        },
        "spec": {_camel(k): v for k, v in spec.items() if v is not None} | {"template": template},
    }
    if managed_by is not None:
        obj["spec"]["managedBy"] = managed_by
    defaults.job(obj)
    defaults.job_selector(obj)
    if deletion_timestamp is not None:
        obj["metadata"]["deletionTimestamp"] = deletion_timestamp
    obj["status"] = copy.deepcopy(status or {})
    return obj


def make_job(name: str = "job", **kwargs: Any) -> Job:
    job = decode_object_dict("Job", job_json(name, **kwargs))
    assert isinstance(job, Job)
    return job


def condition(
    type_: str, status: str = "True", reason: str = "", message: str = ""
) -> dict[str, Any]:
    return {
        "type": type_,
        "status": status,
        "reason": reason,
        "message": message,
        "lastProbeTime": T0_TEXT,
        "lastTransitionTime": T0_TEXT,
    }


def make_pod(
    job: Job,
    name: str,
    *,
    index: int | None = None,
    phase: str = "Running",
    ready: bool = False,
    node: str = "n1",
    deletion_ts: int | None = None,
    finalizers: tuple[str, ...] = (FIN,),
    exit_codes: dict[str, int] | None = None,
    conditions: dict[str, str] | None = None,
    failure_count: int | None = None,
    annotations: dict[str, str] | None = None,
    created: int = T0,
    finished: int | None = None,
    restart_count: int = 0,
    grace_seconds: int = 30,
    owner_uid: str | None = None,
    ready_changed: int | None = None,
) -> Pod:
    """A pod controlled by `job` (Indexed when `index` is given)."""
    notes = dict(annotations or {})
    labels = {"batch.kubernetes.io/controller-uid": job.uid, "job-name": job.name}
    if index is not None:
        notes[COMPLETION_INDEX] = str(index)
        labels[COMPLETION_INDEX] = str(index)
    if failure_count is not None:
        notes[INDEX_FAILURE_COUNT] = str(failure_count)
    conds = dict(conditions or {})
    if phase == "Running" and "Ready" not in conds:
        conds["Ready"] = "True" if ready else "False"
    return Pod(
        name=name,
        namespace=job.namespace,
        uid=f"uid-{name}",
        rv="1",
        created=created,
        deletion_ts=deletion_ts,
        labels=labels,
        annotations=notes,
        owners=(OwnerRef("Job", job.name, owner_uid or job.uid, True),),
        finalizers=finalizers,
        node_name=node,
        phase=phase,
        conditions=conds,
        restart_count=restart_count,
        exit_codes=dict(exit_codes or {}),
        grace_seconds=grace_seconds,
        finished=finished,
        ready_changed=ready_changed,
    )


def make_node(name: str = "n1", *, ready: bool = True) -> Node:
    return Node(name=name, uid=f"uid-{name}", rv="1", ready=ready)


def make_state(
    job: Job | None, pods: Sequence[Pod] | None = None, nodes: Sequence[Node] | None = None
) -> State:
    state = State()
    objects: list[SlimObject] = [*([job] if job is not None else []), *(pods or ()), *(nodes or ())]
    for obj in objects:
        observe(state, obj)
    return state


def observe(state: State, obj: SlimObject, change: Change = "ADDED") -> None:
    """Put an object into `state` the way the daemon does: through the fold, so every index
    the fold keeps (pods by controller, usage by node) stays right."""
    fold(state, state.seq + 1, Observed(at=state.now, cluster=CLUSTER, change=change, obj=obj))


def key(job: Job | str = "job") -> str:
    name = job if isinstance(job, str) else job.name
    return f"Job/{CLUSTER}/{NS}/{name}"


# -- reading decisions -----------------------------------------------------------------------


def status_patch(intents: tuple[Intent, ...]) -> dict[str, Any]:
    """The status fields the decision writes (empty when it writes none)."""
    for intent in intents:
        if isinstance(intent, Patch) and intent.kind == "Job" and intent.subresource == "status":
            assert isinstance(intent.patch, dict)
            patch: dict[str, Any] = intent.patch["status"]
            return patch
    return {}


def creates(intents: tuple[Intent, ...]) -> list[Create]:
    return [i for i in intents if isinstance(i, Create)]


def deletes(intents: tuple[Intent, ...]) -> list[str]:
    return [i.name for i in intents if isinstance(i, Delete)]


def releases(intents: tuple[Intent, ...]) -> list[str]:
    return [i.name for i in intents if isinstance(i, Patch) and i.kind == "Pod"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)
