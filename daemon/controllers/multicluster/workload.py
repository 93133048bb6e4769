"""A Job submitted to the manager cluster, as the dispatcher reads and copies it: what it asks
of a worker (`demand_of`) and the suspended copy a worker gets (`copy_body`)."""

from __future__ import annotations

from typing import Any, Final

from msgspec.structs import replace

from daemon.controllers.gang.spec import GangSpecError, GroupSpec, topology_request
from daemon.controllers.job.gang import scheduling_topology
from daemon.controllers.job.spec import (
    CONTROLLER_UID_LABEL,
    JOB_NAME_LABEL,
    LEGACY_CONTROLLER_UID_LABEL,
    LEGACY_JOB_NAME_LABEL,
    JobSpecError,
    view_job,
)
from daemon.controllers.multicluster.plan import Demand
from daemon.controllers.multicluster.projection import CLAIM, ORIGIN
from events.objects import Job, ObjectError, Pod, decode_object_dict
from events.state import State

# On the manager's workload: the worker it runs in, once one took it.
PLACED: Final = "kbatchd.dev/cluster"
# What the Job API writes into a Job that a copy must not carry: a copy with the original's
# selector (and the pod labels that match it) is refused unless manualSelector is set.
_GENERATED_LABELS: Final = (
    LEGACY_CONTROLLER_UID_LABEL,
    CONTROLLER_UID_LABEL,
    LEGACY_JOB_NAME_LABEL,
    JOB_NAME_LABEL,
)


class WorkloadError(ValueError):
    """A workload the dispatcher cannot place; the message names the field."""


def demand_of(state: State, cluster: str, key: str, job: Job) -> Demand:
    """What `job` (on the manager `cluster`) asks of a worker: its pods as the Job would start
    them (parallelism, at most its completions), their priority from the template's
    PriorityClass on the manager (its global default without one; none: 0), and the topology
    its ``spec.scheduling`` or its pods' Kueue annotations require."""
    try:
        view = view_job(job)
    except JobSpecError as exc:
        raise WorkloadError(f"spec: {exc}") from exc
    count = view.parallelism
    if view.completions is not None:
        count = min(count, view.completions)
    template: Any = view.spec.template or {}
    meta = template.get("metadata") or {}
    pod_spec: dict[str, Any] = dict(template.get("spec") or {})
    priority, preempts = _priority(state, cluster, pod_spec)
    try:
        model = decode_object_dict(
            "Pod",
            {
                "metadata": {
                    "name": job.name,
                    "namespace": job.namespace,
                    "annotations": meta.get("annotations") or {},
                },
                "spec": pod_spec,
            },
        )
    except ObjectError as exc:
        raise WorkloadError(f"spec.template: {exc}") from exc
    assert isinstance(model, Pod)
    pods = tuple(
        replace(model, name=f"{job.name}-{i}", uid=f"{job.uid}-{i}", priority=priority)
        for i in range(max(count, 0))
    )
    group = GroupSpec(
        cluster, job.namespace, job.name, job.uid, len(pods), _topology_key(job), None, None,
        None, None, 0,
    )  # fmt: skip
    try:
        request = topology_request(group, pods)
    except GangSpecError as exc:
        raise WorkloadError(str(exc)) from exc
    return Demand(
        key=key,
        namespace=job.namespace,
        name=job.name,
        uid=job.uid,
        priority=priority,
        created=job.created,
        pods=pods,
        request=request,
        preempts=preempts,
    )


def _priority(state: State, cluster: str, pod_spec: dict[str, Any]) -> tuple[int, bool]:
    """(priority, may preempt) as the Priority admission plugin would give the Job's pods."""
    classes = [c for k, c in state.priorityclasses.items() if k.startswith(f"{cluster}//")]
    name = pod_spec.get("priorityClassName")
    if name:
        found = next((c for c in classes if c.name == name), None)
        if found is None:
            raise WorkloadError(
                f"spec.template.spec.priorityClassName: no PriorityClass {name!r} in cluster "
                f"{cluster}"
            )
    else:
        found = next((c for c in sorted(classes, key=lambda c: c.name) if c.global_default), None)
    priority = found.value if found is not None else 0
    policy = pod_spec.get("preemptionPolicy") or (
        found.preemption_policy if found is not None else "PreemptLowerPriority"
    )
    return priority, policy != "Never"


def _topology_key(job: Job) -> str | None:
    """The topology ``spec.scheduling`` (Kubernetes 1.37) requires, as the Job controller
    reads it for the gang it makes."""
    scheduling: Any = job.spec.get("scheduling")
    if not isinstance(scheduling, dict):
        return None
    try:
        return scheduling_topology(scheduling)
    except JobSpecError as exc:
        raise WorkloadError(str(exc)) from exc


def copy_body(job: Job, key: str, label: str) -> dict[str, Any]:
    """The suspended copy a worker gets: the Job as submitted, without what the manager's API
    server generated for it (its selector and the pod labels matching it) and without the
    dispatcher's own annotations and label, naming the original in ``kbatchd.dev/origin``."""
    spec = {k: v for k, v in job.spec.items() if k != "selector"}
    template: dict[str, Any] = dict(spec.get("template") or {})
    meta: dict[str, Any] = dict(template.get("metadata") or {})
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in _GENERATED_LABELS}
    meta["labels"] = labels
    template["metadata"] = meta
    spec["template"] = template
    spec["suspend"] = True
    annotations = {k: v for k, v in job.annotations.items() if k not in (CLAIM, PLACED, ORIGIN)}
    annotations[ORIGIN] = key
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job.name,
            "namespace": job.namespace,
            "labels": {
                k: v for k, v in job.labels.items() if k != label and k not in _GENERATED_LABELS
            },
            "annotations": annotations,
        },
        "spec": spec,
    }
