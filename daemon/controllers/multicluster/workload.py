"""A workload submitted to the manager cluster, a Job or a JobSet, as the dispatcher reads and
copies it: what it asks of a worker (`demand_of`) and the suspended copy a worker gets
(`copy_body`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import msgspec
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
from daemon.controllers.jobset.spec import JobSetSpecError, view_jobset
from daemon.controllers.labels import GANG_TOPOLOGY
from daemon.controllers.multicluster.plan import Demand
from daemon.controllers.multicluster.projection import CLAIM, ORIGIN, PLACED
from events.objects import Job, JobSet, ObjectError, Pod, decode_object_dict
from events.state import State

# What the Job API writes into a Job that a copy must not carry: a copy with the original's
# selector (and the pod labels that match it) is refused unless manualSelector is set.
_GENERATED_LABELS: Final = (
    LEGACY_CONTROLLER_UID_LABEL,
    CONTROLLER_UID_LABEL,
    LEGACY_JOB_NAME_LABEL,
    JOB_NAME_LABEL,
)

Workload = Job | JobSet


class WorkloadError(ValueError):
    """A workload the dispatcher cannot place; the message names the field."""


class _PodSet(msgspec.Struct, frozen=True):
    """Pods of one template a workload starts at once: `count` of them, named from `name`;
    `path` is where the template is in the workload."""

    name: str
    count: int
    template: dict[str, Any]
    path: str


def demand_of(state: State, cluster: str, key: str, workload: Workload) -> Demand:
    """What `workload` (on the manager `cluster`) asks of a worker: the pods it starts at
    once, all of them one unit (a Job's parallelism, at most its completions; each of a
    JobSet's replicated Jobs, times its replicas), their priority from the PriorityClass the
    first pod template naming one names on the manager (its global default without one;
    none: 0), and the topology its ``spec.scheduling`` (a Job), its gang annotation (a JobSet)
    or its pods' Kueue annotations require."""
    if isinstance(workload, JobSet):
        sets, topology = _jobset_pods(workload)
    else:
        sets, topology = _job_pods(workload)
    priority, preempts = _priority(state, cluster, sets)
    pods: list[Pod] = []
    for one in sets:
        meta = one.template.get("metadata") or {}
        try:
            model = decode_object_dict(
                "Pod",
                {
                    "metadata": {
                        "name": one.name,
                        "namespace": workload.namespace,
                        "annotations": meta.get("annotations") or {},
                    },
                    "spec": dict(one.template.get("spec") or {}),
                },
            )
        except ObjectError as exc:
            raise WorkloadError(f"{one.path}: {exc}") from exc
        assert isinstance(model, Pod)
        pods += (
            replace(model, name=f"{one.name}-{i}", uid=f"{workload.uid}-{one.name}-{i}",
                    priority=priority)
            for i in range(one.count)
        )  # fmt: skip
    group = GroupSpec(
        cluster, workload.namespace, workload.name, workload.uid, len(pods), topology, None, None,
        None, None, 0,
    )  # fmt: skip
    try:
        request = topology_request(group, pods)
    except GangSpecError as exc:
        raise WorkloadError(str(exc)) from exc
    return Demand(
        key=key,
        namespace=workload.namespace,
        name=workload.name,
        uid=workload.uid,
        priority=priority,
        created=workload.created,
        pods=tuple(pods),
        request=request,
        preempts=preempts,
    )


def _finished(copy: Workload) -> bool:
    """The Job (JobSet) controllers' own rule; a copy they cannot read is not finished."""
    try:
        return view_job(copy).finished if isinstance(copy, Job) else view_jobset(copy).finished
    except (JobSpecError, JobSetSpecError):
        return False


def _pods_of_copy(state: State, copy: Workload, worker: str) -> list[Pod]:
    ref = f"{type(copy).__name__}/{worker}/{copy.namespace}/{copy.name}"
    if isinstance(copy, Job):
        return state.pods_of(ref)
    return [
        pod
        for key in sorted(state.children.get(ref, ()))
        if key in state.jobs
        for pod in state.pods_of(f"Job/{key}")
    ]


def unbound(state: State, manager: str, key: str, worker: str) -> Demand | None:
    """What of the workload `key`, admitted to `worker`, its copy there has not bound yet:
    the room to hold for it until it has (None: nothing, or the copy is finished or gone)."""
    kind, _, namespace, name = key.split("/", 3)
    table = state.table(kind)
    workload = table.get(f"{manager}/{namespace}/{name}")
    copy = table.get(f"{worker}/{namespace}/{name}")
    if not isinstance(workload, Job | JobSet) or not isinstance(copy, Job | JobSet):
        return None
    if _finished(copy):
        return None
    try:
        demand = demand_of(state, manager, key, workload)
    except WorkloadError:
        return None
    bound = sum(1 for pod in _pods_of_copy(state, copy, worker) if pod.node_name)
    if bound >= len(demand.pods):
        return None
    return replace(demand, pods=demand.pods[bound:])


def _job_pods(job: Job) -> tuple[list[_PodSet], str | None]:
    try:
        view = view_job(job)
    except JobSpecError as exc:
        raise WorkloadError(f"spec: {exc}") from exc
    count = view.parallelism
    if view.completions is not None:
        count = min(count, view.completions)
    template: Any = view.spec.template or {}
    return [_PodSet(job.name, max(count, 0), template, "spec.template")], _topology_key(job)


def _jobset_pods(jobset: JobSet) -> tuple[list[_PodSet], str | None]:
    try:
        view = view_jobset(jobset)
    except JobSetSpecError as exc:
        raise WorkloadError(f"spec: {exc}") from exc
    sets = [
        _PodSet(
            f"{jobset.name}-{rj.name}",
            rj.replicas * rj.pods_per_job,
            rj.pod_template,
            f"spec.replicatedJobs[{i}].template.spec.template",
        )
        for i, rj in enumerate(view.spec.replicated_jobs)
    ]
    return sets, jobset.annotations.get(GANG_TOPOLOGY) or None


def _priority(state: State, cluster: str, sets: Sequence[_PodSet]) -> tuple[int, bool]:
    """(priority, may preempt) as the Priority admission plugin would give the pods of the
    first template naming a PriorityClass (of the first template, when none does)."""
    classes = [c for k, c in state.priorityclasses.items() if k.startswith(f"{cluster}//")]
    named = [s for s in sets if (s.template.get("spec") or {}).get("priorityClassName")]
    first = (named or list(sets))[0] if sets else None
    pod_spec: dict[str, Any] = (first.template.get("spec") or {}) if first is not None else {}
    name = pod_spec.get("priorityClassName")
    if name:
        found = next((c for c in classes if c.name == name), None)
        if found is None:
            assert first is not None
            raise WorkloadError(
                f"{first.path}.spec.priorityClassName: no PriorityClass {name!r} in cluster "
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


def copy_body(workload: Workload, key: str, label: str) -> dict[str, Any]:
    """The suspended copy a worker gets: the workload as submitted, without what the
    manager's API server generated for it (a Job's selector and the pod labels matching it)
    and without the dispatcher's own annotations and label, naming the original in
    ``kbatchd.dev/origin``. Its apiVersion and kind are the actuator's to set: the version
    the worker serves."""
    spec = dict(workload.spec)
    generated: tuple[str, ...] = ()
    if isinstance(workload, Job):
        spec.pop("selector", None)
        template: dict[str, Any] = dict(spec.get("template") or {})
        meta: dict[str, Any] = dict(template.get("metadata") or {})
        meta["labels"] = {
            k: v for k, v in (meta.get("labels") or {}).items() if k not in _GENERATED_LABELS
        }
        template["metadata"] = meta
        spec["template"] = template
        generated = _GENERATED_LABELS
    spec["suspend"] = True
    annotations = {
        k: v for k, v in workload.annotations.items() if k not in (CLAIM, PLACED, ORIGIN)
    }
    annotations[ORIGIN] = key
    return {
        "metadata": {
            "name": workload.name,
            "namespace": workload.namespace,
            "labels": {
                k: v for k, v in workload.labels.items() if k != label and k not in generated
            },
            "annotations": annotations,
        },
        "spec": spec,
    }
