"""What the fold keeps for gang admission (`daemon.controllers.gang`): the member pods of each
PodGroup, and which PodGroups wait for room.

- **Members.** Pods join a PodGroup through ``spec.schedulingGroup.podGroupName`` (immutable),
  not through an owner reference, so the fold's controller index cannot find them. Without
  this index every gang decision would scan every pod. ``State.group_members`` maps
  ``cluster/namespace/podgroup`` to the keys of the pods naming it, of any scheduler and in
  any phase, until they are deleted. ``State.group_schedulers`` counts them per scheduler
  name, so that a group none of whose pods names kbatchd's scheduler (a Job's gang that
  kube-scheduler places) is passed over without reading its members at each of their
  changes: at 10,000 pods those reads made a quadratic cost.
- **Waiting gangs.** A gang that did not fit must be decided again when room appears, but a
  pod finishing somewhere dirties only its own owner. ``State.waiting_gangs`` holds per
  cluster, highest priority then oldest first, the PodGroups whose ``PodGroupScheduled``
  condition says ``False``/``Unschedulable``
  (written by the gang reconciler); when a pod stops taking capacity or a node starts giving
  it, the cluster's queue key ``GangQueue/<cluster>`` is made dirty, and the gang reconciler
  releases from it, once per pass, the waiting gangs (and the Workloads that decide for
  coordinated ones) that the free room could hold, in that order. The reconciler's own
  back-off requeue is the safety net for changes this does not see (a taint removed, say).
- **Workloads.** A Workload that coordinates its groups (leader first, role ratios) decides
  for all of them; ``State.workload_groups`` maps ``cluster/namespace/workload`` to the keys of
  the PodGroups made from it, so that finding them does not scan (and sort) every PodGroup:
  at 15,000 PodGroups that scan took 9.6 ms of every Workload decision, against 0.12 ms now.

- **Admissions under way.** A gang is admitted by one decision: every member's bind, then
  ``PodGroupScheduled=True``. The decision is in the log before its first bind, and from it
  ``State.admissions`` keeps, per group, the binds it decided until the group is seen
  ``PodGroupScheduled=True`` and each pod it placed bound (or gone), or a later decision
  writes the condition ``False``, or the group goes. A daemon killed in the middle of the
  binds finds there, after its restart, what the admission still has to bind and where; so
  does the next pass after binds the API server refused (`daemon.controllers.gang`
  finishes it, or evicts what was bound and requeues the group).
- **Nominations.** A gang that preempted writes each pending member's
  ``status.nominatedNodeName``; ``State.nominated`` maps each node to the pending, unbound
  pods nominated to it, whose room no other gang may take (`gang.place.ClusterView`).

Cost: `pod_changed` does work only when a pod appears, goes or changes group; `wake` runs
only when capacity was released on a cluster that has waiting gangs.
"""

from __future__ import annotations

import bisect
from typing import Any, Final

from events.hooks import Change, Dirty, FoldHooks
from events.index import reindex
from events.intents import Bind, Patch
from events.objects import Pod, PodGroup
from events.schema import Decided
from events.state import Admission, State
from events.topology import charge_of

SCHEDULED: Final = "PodGroupScheduled"
# The kind of a cluster's waiting-gangs queue key, ``GangQueue/<cluster>``.
QUEUE: Final = "GangQueue"
UNSCHEDULABLE: Final = "Unschedulable"


def _group_of(cluster: str, pod: Pod | None) -> str | None:
    if pod is None or not pod.pod_group:
        return None
    return f"{cluster}/{pod.namespace}/{pod.pod_group}"


def pod_changed(state: State, cluster: str, key: str, old: Pod | None, new: Pod | None) -> None:
    """Keep ``group_members`` and ``group_schedulers`` right for a pod added, changed or
    (``new=None``) deleted."""
    before, after = _group_of(cluster, old), _group_of(cluster, new)
    reindex(state.group_members, key, before, after)
    if old is not None and before is not None:
        _count_scheduler(state.group_schedulers, before, old.scheduler_name, -1)
    if new is not None and after is not None:
        _count_scheduler(state.group_schedulers, after, new.scheduler_name, 1)


def _count_scheduler(index: dict[str, dict[str, int]], group: str, name: str, by: int) -> None:
    counts = index.setdefault(group, {})
    count = counts.get(name, 0) + by
    if count > 0:
        counts[name] = count
        return
    counts.pop(name, None)
    if not counts:
        del index[group]


def index_group_schedulers(state: State) -> None:
    state.group_schedulers = {}
    pods = state.pods
    for group, keys in state.group_members.items():
        for key in keys:
            pod = pods.get(key)
            if pod is not None:
                _count_scheduler(state.group_schedulers, group, pod.scheduler_name, 1)


def nominated_to(cluster: str, pod: Pod | None) -> str | None:
    """The node key whose room a pod holds by nomination: a live pod not yet bound."""
    if pod is None or not pod.nominated or pod.node_name or pod.deletion_ts is not None:
        return None
    return None if pod.terminal else f"{cluster}//{pod.nominated}"


def _scheduled(status: Any) -> dict[str, Any] | None:
    """The ``PodGroupScheduled`` condition of a PodGroup status (or status patch), if any."""
    conditions: Any = status.get("conditions") if isinstance(status, dict) else None
    if not isinstance(conditions, list):
        return None
    for condition in conditions:
        if isinstance(condition, dict) and condition.get("type") == SCHEDULED:
            return condition
    return None


def waiting(group: PodGroup) -> bool:
    """Whether the gang reconciler marked the group as not fitting."""
    condition = _scheduled(group.status)
    return (
        condition is not None
        and condition.get("status") == "False"
        and condition.get("reason") == UNSCHEDULABLE
    )


def group_priority(group: PodGroup) -> int:
    """``spec.priority``, 0 when unset (KEP-5710: a group without one has priority 0)."""
    value = group.spec.get("priority")
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def queue_entry(group: PodGroup, key: str) -> tuple[int, int, str]:
    """A waiting group's place in its cluster's queue: higher priority first, then older
    (kube-scheduler's and Kueue's order). Both are immutable, so the old object finds the
    entry of the new one."""
    return (-group_priority(group), group.created, key)


def admitted(group: PodGroup) -> bool:
    """Whether the group is seen ``PodGroupScheduled=True``."""
    condition = _scheduled(group.status)
    return condition is not None and condition.get("status") == "True"


def admission_decided(state: State, seq: int, decision: Decided) -> None:
    """Keep ``State.admissions`` for a decision: one that writes a group's
    ``PodGroupScheduled=True`` admits it with the binds it decides for the group's members;
    one that writes ``False`` ends whatever admission the group had."""
    verdicts: dict[str, bool] = {}
    for intent in decision.intents:
        if type(intent) is Patch and intent.kind == "PodGroup" and intent.subresource == "status":
            body: Any = intent.patch
            condition = _scheduled(body.get("status") if isinstance(body, dict) else None)
            if condition is not None:
                verdicts[intent.key] = condition.get("status") == "True"
    if not verdicts:
        return
    binds: dict[str, dict[str, tuple[str, str]]] = {}
    for key, admits in verdicts.items():
        if admits:
            binds[key] = {}
        else:
            state.admissions.pop(key, None)
    if not binds:
        return
    pods = state.pods
    for intent in decision.intents:
        if type(intent) is Bind:
            group = _group_of(intent.cluster, pods.get(intent.key))
            if group in binds:
                binds[group][intent.key] = (intent.uid, intent.node)
    for key, planned in binds.items():
        state.admissions[key] = Admission(seq, planned)


def bound_whole(state: State, group_key: str) -> bool:
    """Whether every pod the group's admission placed is bound, or gone (replaced, deleted,
    or finished): nothing is left for the admission to bind."""
    admission = state.admissions.get(group_key)
    if admission is None:
        return True
    pods = state.pods
    for pod_key, (uid, _) in admission.binds.items():
        pod = pods.get(pod_key)
        if pod is not None and pod.uid == uid and not pod.node_name and not pod.terminal:
            return False
    return True


def _settled(old: Pod | None, new: Pod | None) -> bool:
    """Whether a pod change can leave an admission nothing to bind: the pod was bound,
    finished or deleted."""
    if new is None:
        return True
    bound = bool(new.node_name) and (old is None or not old.node_name)
    finished = new.terminal and (old is None or not old.terminal)
    return bound or finished


def _admission_bound(state: State, group_key: str) -> None:
    """A member of a group seen admitted was bound or went: the admission may be whole now
    (its status was seen before its binds)."""
    group = state.podgroups.get(group_key)
    if group is not None and admitted(group) and bound_whole(state, group_key):
        del state.admissions[group_key]


def workload_key(cluster: str, group: PodGroup | None) -> str | None:
    """``cluster/namespace/workload`` of the Workload a PodGroup was made from, if any."""
    name = workload_name(group) if group is not None else None
    return f"{cluster}/{group.namespace}/{name}" if name is not None else None  # type: ignore[union-attr]


def index_workload_groups(state: State) -> None:
    """Build ``workload_groups`` from the PodGroups (for a snapshot from before it was kept)."""
    for key, group in state.podgroups.items():
        found = workload_key(key.split("/", 1)[0], group)
        if found is not None:
            state.workload_groups.setdefault(found, set()).add(key)


def podgroup_changed(
    state: State, cluster: str, key: str, old: PodGroup | None, new: PodGroup | None
) -> None:
    """Keep ``waiting_gangs`` and ``workload_groups`` right for a PodGroup added, changed or
    deleted. The queue is kept sorted here, once per change, because the gang reconciler
    reads it in order at every pass."""
    reindex(state.workload_groups, key, workload_key(cluster, old), workload_key(cluster, new))
    if state.admissions and (new is None or (admitted(new) and bound_whole(state, key))):
        state.admissions.pop(key, None)  # seen whole (or gone): nothing is left to finish
    queue = state.waiting_gangs.get(cluster)
    if new is not None and waiting(new):
        if queue is None:
            queue = state.waiting_gangs[cluster] = []
        entry = queue_entry(new, key)
        at = bisect.bisect_left(queue, entry)
        if at == len(queue) or queue[at] != entry:
            queue.insert(at, entry)
    elif queue is not None and old is not None:
        entry = queue_entry(old, key)
        at = bisect.bisect_left(queue, entry)
        if at < len(queue) and queue[at] == entry:
            del queue[at]
            if not queue:
                del state.waiting_gangs[cluster]


def workload_ref(spec: dict[str, Any]) -> tuple[str | None, str | None]:
    """The Workload and template a PodGroup was made from: ``spec.workloadRef`` (v1beta1,
    Kubernetes 1.37) or ``spec.podGroupTemplateRef.workload`` (v1alpha2, 1.36); (None, None)
    for a standalone PodGroup."""
    ref: Any = spec.get("workloadRef")
    template_key = "templateName"
    if not isinstance(ref, dict):
        outer: Any = spec.get("podGroupTemplateRef")
        ref = outer.get("workload") if isinstance(outer, dict) else None
        template_key = "podGroupTemplateName"
    if not isinstance(ref, dict):
        return None, None
    workload, template = ref.get("workloadName"), ref.get(template_key)
    return (
        workload if isinstance(workload, str) and workload else None,
        template if isinstance(template, str) and template else None,
    )


def workload_name(group: PodGroup) -> str | None:
    """The Workload a PodGroup was made from, if any."""
    return workload_ref(group.spec)[0]


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
    """Capacity was released on `cluster`: gangs waiting there may fit now. Only the
    cluster's queue key is dirtied; the gang reconciler picks, once per pass, which waiting
    gangs the room can hold (dirtying all of them made every finishing pod cost a decision
    per waiting gang)."""
    if cluster in state.waiting_gangs:
        dirty.add(f"{QUEUE}/{cluster}")


def _pod_observed(state: State, change: Change, dirty: Dirty | None) -> None:
    old: Pod | None = change.old
    new: Pod | None = change.new
    if (old is not None or new is not None) and (
        old is None
        or new is None
        or old.pod_group != new.pod_group
        or old.scheduler_name != new.scheduler_name
    ):
        pod_changed(state, change.cluster, change.key, old, new)
    if (old is not None and old.nominated) or (new is not None and new.nominated):
        reindex(
            state.nominated,
            change.key,
            nominated_to(change.cluster, old),
            nominated_to(change.cluster, new),
        )
    if state.admissions and _settled(old, new):
        group_key = _group_of(change.cluster, old or new)
        if group_key in state.admissions:
            _admission_bound(state, group_key)
    if dirty is None:
        return
    if state.waiting_gangs and change.moved and charge_of(change.cluster, new) is None:
        wake(state, change.cluster, dirty)  # the pod stopped taking room: gangs may fit now
    pod: Pod = change.obj
    if pod.pod_group:
        dirty_group(state, f"{change.cluster}/{pod.namespace}/{pod.pod_group}", dirty)


def _node_observed(state: State, change: Change, dirty: Dirty | None) -> None:
    if (
        dirty is not None
        and change.moved
        and state.waiting_gangs
        and change.key in state.topology.paths
    ):
        wake(state, change.cluster, dirty)  # a node joined or changed: maybe room for a gang


def _podgroup_observed(state: State, change: Change, dirty: Dirty | None) -> None:
    podgroup_changed(state, change.cluster, change.key, change.old, change.new)
    if dirty is not None:
        dirty_workload(change.cluster, change.obj, dirty)


def _composite_observed(state: State, change: Change, dirty: Dirty | None) -> None:
    """A CompositePodGroup's Workload decides for its child groups: it may admit them now."""
    if dirty is None:
        return
    group = change.obj
    name = workload_ref(group.spec)[0]
    if name is not None:
        dirty.add(f"Workload/{change.cluster}/{group.namespace}/{name}")


def _restored(state: State) -> None:
    if state.podgroups and not state.workload_groups:
        index_workload_groups(state)  # a snapshot from before the index
    if state.group_members and not state.group_schedulers:
        index_group_schedulers(state)  # a snapshot from before the index
    if state.podgroups and not state.waiting_gangs:
        # A snapshot from before the priority-ordered queue (or one with no waiting group).
        for key, group in state.podgroups.items():
            if waiting(group):
                cluster = key.split("/", 1)[0]
                state.waiting_gangs.setdefault(cluster, []).append(queue_entry(group, key))
        for queue in state.waiting_gangs.values():
            queue.sort()


FOLD: Final = FoldHooks(
    observed={
        "Pod": _pod_observed,
        "Node": _node_observed,
        "PodGroup": _podgroup_observed,
        "CompositePodGroup": _composite_observed,
    },
    decided=admission_decided,
    restored=_restored,
)
