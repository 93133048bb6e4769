"""A JobSet's gang: one Workload for the JobSet, and — where the cluster serves
CompositePodGroup (Kubernetes 1.37, KEP-6012) — one CompositePodGroup over one PodGroup per
child Job, so that the gang scheduler admits the whole set at once, the set inside one domain
and each Job inside one domain below it.

A JobSet opts in with annotations (JobSet v0.12's API has no field for it):

```yaml
metadata:
  annotations:
    kbatchd.dev/gang: composite
    kbatchd.dev/gang-topology: cloud.provider.com/topology-block       # the set (optional)
    kbatchd.dev/gang-job-topology: cloud.provider.com/topology-rack    # each Job (optional)
    kbatchd.dev/leader-template: driver   # the replicatedJob admitted first (default: leader)
```

The objects, in the order they are made (each step waits for the previous one to be seen,
and the child Jobs wait for the groups their pods name):

- the Workload ``<jobset>``: a composite template ``jobset`` (gang of every child Job, the set's
  topology, disruption ``all``) holding one PodGroup template per replicatedJob (a gang of the
  Job's parallelism, the Job's topology, ``all``);
- the CompositePodGroup ``<jobset>-a<attempt>``;
- per child Job, the PodGroup ``<job>-a<attempt>``, child of that CompositePodGroup; the Job's
  pod template names it in ``spec.schedulingGroup``.

Groups are per attempt: a JobSet that restarts gets fresh ones, so the new pods are admitted as
a gang again, and the previous attempt's groups are deleted.

**Without CompositePodGroup** (Kubernetes 1.36, or 1.37 without the gate) the Workload holds the
replicatedJobs' templates at its top level and each child Job gets its PodGroup: each Job is a
gang, the set is not one, and the leader is not ordered first. The decision that makes them
says so once.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from daemon.controllers.job import gang as job_gang
from daemon.controllers.jobset.spec import JobSetSpecError, JobSetView, ReplicatedJob, job_name
from daemon.controllers.labels import (
    DEFAULT_LEADER_TEMPLATE,
    GANG,
    GANG_JOB_TOPOLOGY,
    GANG_TOPOLOGY,
    LEADER_TEMPLATE,
)
from daemon.controllers.workloads import (
    V1ALPHA2,
    V1ALPHA3,
    CompositeTemplate,
    GroupTemplate,
    OwnerRef,
    composite_body,
    podgroup_body,
    workload_body,
)
from events.state import State

COMPOSITE: Final = "composite"
# The composite template's name; a replicatedJob of that name moves it aside.
ROOT_TEMPLATE: Final = "jobset"
JOBSET_API: Final = ("jobset.x-k8s.io", "JobSet")


class SetGang(msgspec.Struct, frozen=True):
    """What a JobSet's gang is made of, in the versions the cluster serves."""

    version: str  # of Workload and PodGroup
    composite: bool  # whether a CompositePodGroup goes over the Jobs' groups
    workload: str
    root: CompositeTemplate
    attempt: int
    leader: str | None

    @property
    def templates(self) -> tuple[GroupTemplate, ...]:
        return self.root.children

    @property
    def parent(self) -> str | None:
        """The CompositePodGroup of this attempt (None without one)."""
        return composite_name(self.workload, self.attempt) if self.composite else None


def composite_name(jobset: str, attempt: int) -> str:
    return f"{jobset}-a{attempt}"


def group_name(job: str, attempt: int) -> str:
    """The PodGroup of a child Job at one attempt."""
    return f"{job}-a{attempt}"


def _label(view: JobSetView, key: str) -> str | None:
    value = view.jobset.annotations.get(key)
    if value is None:
        return None
    if not value or len(value) > 317 or " " in value:
        raise JobSetSpecError(
            f"metadata.annotations[{key}]: expected a node label key, got {value!r}"
        )
    return value


def _min_count(rj: ReplicatedJob) -> int:
    """A child Job's gang: its parallelism (at most its completions), as upstream's Job
    controller sizes a Job's group."""
    spec = rj.job_spec
    parallelism: Any = spec.get("parallelism", 1)
    completions: Any = spec.get("completions")
    count = parallelism if isinstance(parallelism, int) and not isinstance(parallelism, bool) else 1
    if isinstance(completions, int) and not isinstance(completions, bool):
        count = min(count, completions)
    return max(1, count)


def gang_of(view: JobSetView, version: str, composite: bool) -> SetGang | None:
    """The gang a JobSet asks for (None when it asks for none), in `version` of Workload and
    PodGroup, with a CompositePodGroup when `composite` (the cluster serves one)."""
    asked = view.jobset.annotations.get(GANG)
    if asked is None:
        return None
    if asked != COMPOSITE:
        raise JobSetSpecError(
            f"metadata.annotations[{GANG}]: expected {COMPOSITE!r}, got {asked!r}"
        )
    set_key, job_key = _label(view, GANG_TOPOLOGY), _label(view, GANG_JOB_TOPOLOGY)
    names = [rj.name for rj in view.spec.replicated_jobs]
    leader = view.jobset.annotations.get(LEADER_TEMPLATE)
    if leader is not None and leader not in names:
        raise JobSetSpecError(
            f"metadata.annotations[{LEADER_TEMPLATE}]: {leader!r} names no replicatedJob "
            f"(have {', '.join(names)})"
        )
    if leader is None and DEFAULT_LEADER_TEMPLATE in names:
        leader = DEFAULT_LEADER_TEMPLATE
    writes_priority = version != V1ALPHA2
    children = tuple(
        GroupTemplate(
            name=rj.name,
            min_count=_min_count(rj),
            topology_key=job_key,
            disruption="all",
            priority_class_name=(rj.pod_spec.get("priorityClassName") or None)
            if writes_priority
            else None,
        )
        for rj in view.spec.replicated_jobs
    )
    root = CompositeTemplate(
        name=ROOT_TEMPLATE if ROOT_TEMPLATE not in names else f"{ROOT_TEMPLATE}-set",
        min_group_count=sum(rj.replicas for rj in view.spec.replicated_jobs),
        children=children,
        topology_key=set_key,
        disruption="all",
        priority_class_name=next((c.priority_class_name for c in children), None),
    )
    return SetGang(version, composite, view.name, root, view.status.restarts, leader)


def served(state: State, cluster: str) -> tuple[str | None, bool]:
    """(the version Workload and PodGroup are served in, whether CompositePodGroup is)."""
    version = job_gang.served(state, cluster)
    if version is None:
        return None, False
    return version, state.served.get(f"{cluster}/CompositePodGroup") == V1ALPHA3


def _owner(view: JobSetView) -> OwnerRef:
    ref = view.owner_reference()
    return OwnerRef(ref["apiVersion"], "JobSet", view.name, view.jobset.uid, controller=True)


def workload_body_for(view: JobSetView, gang: SetGang) -> dict[str, Any]:
    """The JobSet's Workload. Without a composite its groups are not coordinated: a leader
    template would confine the workers to the leader's domain at the Jobs' own level (one
    rack for the whole set), which is not what the set asked for; the empty leader
    annotation says there is none."""
    annotations = {LEADER_TEMPLATE: gang.leader or ""} if gang.composite else {LEADER_TEMPLATE: ""}
    if gang.composite:
        return workload_body(
            gang.version,
            (*JOBSET_API, view.name),
            [],
            _owner(view),
            annotations,
            composites=(gang.root,),
        )
    return workload_body(
        gang.version, (*JOBSET_API, view.name), list(gang.templates), _owner(view), annotations
    )


def _owners(view: JobSetView, gang: SetGang, workload_uid: str) -> list[OwnerRef]:
    """Controlled by the JobSet; owned (not controlled) by the Workload, as upstream's groups."""
    return [_owner(view), OwnerRef(gang.version, "Workload", gang.workload, workload_uid)]


def composite_body_for(view: JobSetView, gang: SetGang, workload_uid: str) -> dict[str, Any]:
    owners = _owners(view, gang, workload_uid)
    return composite_body(gang.workload, gang.root, owners)


def podgroup_body_for(
    view: JobSetView, gang: SetGang, rj: ReplicatedJob, workload_uid: str
) -> dict[str, Any]:
    template = next(t for t in gang.templates if t.name == rj.name)
    owners = _owners(view, gang, workload_uid)
    return podgroup_body(gang.version, gang.workload, template, owners, parent=gang.parent)


def groups_of(view: JobSetView, attempt: int) -> list[tuple[ReplicatedJob, str]]:
    """Every child Job's PodGroup at `attempt`: (its replicatedJob, the group's name)."""
    return [
        (rj, group_name(job_name(view.name, rj.name, index), attempt))
        for rj in view.spec.replicated_jobs
        for index in range(rj.replicas)
    ]
