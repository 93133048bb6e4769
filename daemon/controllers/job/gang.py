"""The gang a Job gets: the Workload and PodGroup that the Job controller makes for it before
its pods (KEP-5547, spec 4), so that a gang scheduler admits the pods whole.

Upstream's built-in integration never runs for a Job another controller manages (spec 4.3), so
kbatchd does it for its own Jobs, with upstream's names and fields:

- **Which Jobs.** One with ``spec.scheduling`` (Kubernetes 1.37) gets the policy, topology
  constraint and disruption mode it asks for (a gang's ``minCount`` defaults to the Job's
  parallelism). One without it gets objects only where ``[reconcilers.job] workload_with_job``
  is on, the counterpart of upstream's ``WorkloadWithJob`` gate: on 1.36 an Indexed Job with
  ``parallelism > 1`` and ``completions == parallelism`` becomes a gang of that many; on 1.37
  every such Job gets a basic group. Never a Job whose pod template names its own PodGroup
  (``schedulingGroup``: brought by the user), nor one a parent controller owns (a JobSet makes
  the groups of its Jobs).
- **When.** Objects are made only for a Job that has not started (upstream's ``isNewJob``:
  no pods, no start time, nothing succeeded or failed, never suspended), so a Job from before
  the setting was turned on keeps running as it was. A Job that started without them, or whose
  Workload belongs to someone else, runs its pods ungrouped, and the reason says so.
- **Order.** The Workload first (a 1.36 server refuses a PodGroup whose Workload it cannot
  find, and the PodGroup's owner reference needs the Workload's UID); then the PodGroup and the
  pods, each pod naming it in ``spec.schedulingGroup``.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from daemon.controllers.job.spec import SUSPENDED, JobSpecError, JobView
from daemon.controllers.workloads import (
    MAX_LABEL,
    V1ALPHA2,
    Disruption,
    GroupTemplate,
    OwnerRef,
    podgroup_body,
    podgroup_name,
    template_name,
    workload_body,
    workload_name,
)
from events.objects import KObject, Pod, Workload
from events.state import State

JOB_API: Final = ("batch", "Job")


class JobGang(msgspec.Struct, frozen=True):
    """The objects a Job's gang is made of, in the version the cluster serves."""

    version: str
    workload: str
    podgroup: str
    template: GroupTemplate


def _owner(view: JobView) -> OwnerRef:
    job = view.job
    return OwnerRef("batch/v1", "Job", job.name, job.uid, controller=True)


def _parent_owned(view: JobView) -> bool:
    """Whether a controller other than a CronJob owns the Job (a CronJob's Jobs stand alone)."""
    owner = view.job.controller
    return owner is not None and owner.kind != "CronJob"


def _scheduled_template(view: JobView, name: str, version: str) -> GroupTemplate:
    """The template ``spec.scheduling`` asks for (spec 4.2.1-4.2.2)."""
    raw: Any = view.job.spec.get("scheduling")
    where = "spec.scheduling"
    if not isinstance(raw, dict):
        raise JobSpecError(f"{where}: expected an object, got {raw!r}")
    policy: Any = raw.get("schedulingPolicy") or {"basic": {}}
    if not isinstance(policy, dict) or ("gang" in policy) == ("basic" in policy):
        raise JobSpecError(
            f"{where}.schedulingPolicy: exactly one of basic or gang, got {policy!r}"
        )
    min_count: int | None = None
    if "gang" in policy:
        gang: Any = policy["gang"] or {}
        min_count = gang.get("minCount") if isinstance(gang, dict) else None
        if min_count is None:
            min_count = max(view.parallelism, 1)
        if isinstance(min_count, bool) or not isinstance(min_count, int) or min_count < 1:
            raise JobSpecError(
                f"{where}.schedulingPolicy.gang.minCount: at least 1, got {min_count!r}"
            )
    topology_key = scheduling_topology(raw, where)
    disruption: Disruption | None = None
    mode: Any = raw.get("disruptionMode")
    if mode is not None:
        if (
            not isinstance(mode, dict)
            or len(mode) != 1
            or next(iter(mode)) not in ("single", "all")
        ):
            raise JobSpecError(
                f"{where}.disruptionMode: exactly one of single or all, got {mode!r}"
            )
        disruption = "all" if "all" in mode else "single"
        if disruption == "all" and min_count is None:
            # The API server accepts it; upstream's Workload builder refuses it (spec 2.4).
            raise JobSpecError(f"{where}.disruptionMode: all needs a gang schedulingPolicy")
    return GroupTemplate(name, min_count, topology_key, disruption, _priority_class(view, version))


def scheduling_topology(raw: dict[str, Any], where: str = "spec.scheduling") -> str | None:
    """The node label ``spec.scheduling.schedulingConstraints.topology`` (`raw`) requires all
    the pods inside one value of, None without one."""
    constraints: Any = raw.get("schedulingConstraints")
    topology: Any = constraints.get("topology") if isinstance(constraints, dict) else None
    if not topology:
        return None
    key = (
        topology[0].get("key")
        if isinstance(topology, list) and isinstance(topology[0], dict)
        else None
    )
    if not isinstance(key, str) or not key or len(topology) > 1:
        raise JobSpecError(
            f"{where}.schedulingConstraints.topology: one item with a node label key, "
            f"got {topology!r}"
        )
    return key


def _priority_class(view: JobView, version: str) -> str | None:
    """The pods' priority class, which their group must share for a 1.37 scheduler to take
    them (spec 2.6); v1alpha2 gates the field, so it is left out there."""
    value = view.template_spec.get("priorityClassName")
    return value if version != V1ALPHA2 and isinstance(value, str) and value else None


def gang_for(view: JobView, version: str | None, infer: bool) -> JobGang | None:
    """The gang the Job gets on a cluster that serves `version` of Workload and PodGroup (None:
    neither is served); `infer` is ``workload_with_job``. Raises `JobSpecError` for a
    ``spec.scheduling`` it cannot make objects from."""
    if version is None:
        return None
    if view.template_spec.get("schedulingGroup") is not None or _parent_owned(view):
        return None
    job = view.job
    name = template_name(job.name)
    if "scheduling" in job.spec:
        template = _scheduled_template(view, name, version)
    elif not infer:
        return None
    elif version == V1ALPHA2:
        shaped = view.indexed and view.parallelism > 1 and view.completions == view.parallelism
        if not shaped:
            return None
        template = GroupTemplate(name, view.parallelism)
    else:
        template = GroupTemplate(name, None, priority_class_name=_priority_class(view, version))
    if len(name) > MAX_LABEL:
        raise JobSpecError(
            f"the Workload's template name {name!r} is longer than {MAX_LABEL} characters "
            f"(Job names of {MAX_LABEL - len('-pgt-0') + 1} or more); upstream's name, kept "
            "so that its controllers find the objects (kubernetes/kubernetes#142844)"
        )
    workload = workload_name(job.name, job.uid)
    return JobGang(version, workload, podgroup_name(workload, name), template)


def served(state: State, cluster: str) -> str | None:
    """The version of ``scheduling.k8s.io`` the cluster serves Workload and PodGroup in, if it
    serves both in one (as every release does)."""
    version = state.served.get(f"{cluster}/PodGroup")
    return version if version and state.served.get(f"{cluster}/Workload") == version else None


def never_started(view: JobView, pods: list[Pod]) -> bool:
    """upstream's ``isNewJob``: nothing of the Job has run, and it was never suspended."""
    status = view.status
    return (
        not pods
        and status.start_time is None
        and not status.succeeded
        and not status.failed
        and view.condition(SUSPENDED) is None
    )


def controlled_by(obj: KObject, uid: str) -> bool:
    """Whether the object with controller UID `uid` controls `obj`."""
    owner = obj.controller
    return owner is not None and owner.uid == uid


def workload_body_for(view: JobView, gang: JobGang) -> dict[str, Any]:
    return workload_body(gang.version, (*JOB_API, view.job.name), [gang.template], _owner(view))


def podgroup_body_for(view: JobView, gang: JobGang, workload: Workload) -> dict[str, Any]:
    """The PodGroup: controlled by the Job, and owned (not controlled, not blocking its
    deletion) by the Workload, as upstream's."""
    workload_owner = OwnerRef(gang.version, "Workload", workload.name, workload.uid)
    return podgroup_body(gang.version, gang.workload, gang.template, [_owner(view), workload_owner])
