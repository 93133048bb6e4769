"""What the fold keeps for gang admission (`daemon.reconcilers.gang`): the member pods of each
PodGroup, and which PodGroups wait for room.

- **Members.** Pods join a PodGroup through ``spec.schedulingGroup.podGroupName`` (immutable),
  not through an owner reference, so the fold's controller index cannot find them. Without
  this index every gang decision would scan every pod. ``State.group_members`` maps
  ``cluster/namespace/podgroup`` to the keys of the pods naming it, of any scheduler and in
  any phase, until they are deleted.
- **Waiting gangs.** A gang that did not fit must be decided again when room appears, but a
  pod finishing somewhere dirties only its own owner. ``State.gang_waiting`` maps a cluster
  to the PodGroups whose ``PodGroupScheduled`` condition says ``False``/``Unschedulable``
  (written by the gang reconciler); when a pod stops taking capacity or a node starts giving
  it, those PodGroups — and the Workloads their templates belong to, which decide for
  coordinated groups — are made dirty. The reconciler's own back-off requeue is the safety
  net for changes this does not see (a taint removed, say).

Cost: `pod_changed` does work only when a pod appears, goes or changes group; `wake` runs
only when capacity was released on a cluster that has waiting gangs.
"""

from __future__ import annotations

from typing import Any, Final

from events.index import reindex
from events.objects import Pod, PodGroup
from events.state import State

SCHEDULED: Final = "PodGroupScheduled"
UNSCHEDULABLE: Final = "Unschedulable"


def _group_of(cluster: str, pod: Pod | None) -> str | None:
    if pod is None or not pod.pod_group:
        return None
    return f"{cluster}/{pod.namespace}/{pod.pod_group}"


def pod_changed(state: State, cluster: str, key: str, old: Pod | None, new: Pod | None) -> None:
    """Keep ``group_members`` right for a pod added, changed or (``new=None``) deleted."""
    reindex(state.group_members, key, _group_of(cluster, old), _group_of(cluster, new))


def waiting(group: PodGroup) -> bool:
    """Whether the gang reconciler marked the group as not fitting."""
    conditions: Any = group.status.get("conditions") if isinstance(group.status, dict) else None
    if not isinstance(conditions, list):
        return False
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == SCHEDULED:
            return condition.get("status") == "False" and condition.get("reason") == UNSCHEDULABLE
    return False


def podgroup_changed(state: State, cluster: str, key: str, new: PodGroup | None) -> None:
    """Keep ``gang_waiting`` right for a PodGroup added, changed or deleted."""
    groups = state.gang_waiting.get(cluster)
    if new is not None and waiting(new):
        if groups is None:
            groups = state.gang_waiting[cluster] = set()
        groups.add(key)
    elif groups is not None and key in groups:
        groups.discard(key)
        if not groups:
            del state.gang_waiting[cluster]


def workload_name(group: PodGroup) -> str | None:
    """The Workload a PodGroup was made from (``spec.podGroupTemplateRef.workload``), if any."""
    ref: Any = group.spec.get("podGroupTemplateRef")
    workload: Any = ref.get("workload") if isinstance(ref, dict) else None
    name: Any = workload.get("workloadName") if isinstance(workload, dict) else None
    return name if isinstance(name, str) and name else None


def dirty_workload(cluster: str, group: PodGroup, dirty: set[str]) -> None:
    """Dirty the Workload a PodGroup was made from: it decides for coordinated groups."""
    name = workload_name(group)
    if name is not None:
        dirty.add(f"Workload/{cluster}/{group.namespace}/{name}")


def dirty_group(state: State, group_key: str, dirty: set[str]) -> None:
    """Dirty a PodGroup (``cluster/namespace/name``) and the Workload it was made from."""
    dirty.add(f"PodGroup/{group_key}")
    group = state.podgroups.get(group_key)
    if group is not None:
        dirty_workload(group_key.split("/", 1)[0], group, dirty)


def wake(state: State, cluster: str, dirty: set[str]) -> None:
    """Capacity was released on `cluster`: every gang waiting there may fit now."""
    for group_key in state.gang_waiting.get(cluster, ()):
        dirty_group(state, group_key, dirty)
