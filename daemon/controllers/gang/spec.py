"""Reading gangs from folded state: a PodGroup's policy, constraints and conditions
(``scheduling.k8s.io/v1alpha2``, spec A.2, A.6), its member pods, and the topology request
their pod template carries (Kueue's pod set annotations, TAS spec 3.1).

Everything here reads raw API dicts that the server already accepted, so malformed values are
rare; when one turns up it is a `GangSpecError` naming the field and the value, which the
reconciler reports on the PodGroup instead of guessing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

import msgspec

from daemon.controllers.gang.projection import group_priority, workload_ref
from events.objects import (
    CompositePodGroup,
    ObjectError,
    Pod,
    PodGroup,
    Workload,
    timestamp_ms,
)

SCHEDULED: Final = "PodGroupScheduled"
PODS_READY: Final = "PodsReady"

# Condition reasons kbatchd writes (metav1.Condition reasons are CamelCase).
SCHEDULED_REASON: Final = "Scheduled"
UNSCHEDULABLE: Final = "Unschedulable"
# The message prefix of a group waiting for its members (not for room).
NOT_ENOUGH_MEMBERS: Final = "NotEnoughMembers:"
SCHEDULER_ERROR: Final = "SchedulerError"
READY_TIMEOUT: Final = "PodsReadyTimeout"
LEADER_LOST: Final = "LeaderLost"
LIMIT_EXCEEDED: Final = "RequeuingLimitExceeded"
STARTED: Final = "Started"
WAIT_FOR_START: Final = "WaitForStart"

# kbatchd's own annotations.
EVICTIONS: Final = "kbatchd.dev/evictions"
ROLE_RATIO: Final = "kbatchd.dev/role-ratio"
ROLE_RATIO_TOPOLOGY: Final = "kbatchd.dev/role-ratio-topology"

# Kueue's pod set annotations, read from the member pods (they carry their template's).
KUEUE_REQUIRED: Final = "kueue.x-k8s.io/podset-required-topology"
KUEUE_PREFERRED: Final = "kueue.x-k8s.io/podset-preferred-topology"
KUEUE_UNCONSTRAINED: Final = "kueue.x-k8s.io/podset-unconstrained-topology"
KUEUE_SLICE_REQUIRED: Final = "kueue.x-k8s.io/podset-slice-required-topology"
KUEUE_SLICE_SIZE: Final = "kueue.x-k8s.io/podset-slice-size"
KUEUE_KEYS: Final = (
    KUEUE_REQUIRED,
    KUEUE_PREFERRED,
    KUEUE_UNCONSTRAINED,
    KUEUE_SLICE_REQUIRED,
    KUEUE_SLICE_SIZE,
)


class GangSpecError(ValueError):
    """A PodGroup, Workload or member pod kbatchd cannot act on; the message names the field."""


class Condition(msgspec.Struct, frozen=True):
    type: str
    status: str
    reason: str = ""
    message: str = ""
    since: int | None = None  # lastTransitionTime in ms

    @property
    def true(self) -> bool:
        return self.status == "True"


def conditions_of(status: Mapping[str, Any], where: str) -> dict[str, Condition]:
    raw = status.get("conditions")
    found: dict[str, Condition] = {}
    if raw is None:
        return found
    if not isinstance(raw, list):
        raise GangSpecError(f"{where}.status.conditions: expected a list, got {raw!r}")
    for index, item in enumerate(raw):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str):
            continue
        try:
            since = timestamp_ms(item.get("lastTransitionTime"), "lastTransitionTime")
        except ObjectError as exc:
            raise GangSpecError(f"{where}.status.conditions[{index}].{exc}") from None
        found[item["type"]] = Condition(
            type=item["type"],
            status=str(item.get("status", "")),
            reason=str(item.get("reason") or ""),
            message=str(item.get("message") or ""),
            since=since,
        )
    return found


class GroupSpec(msgspec.Struct, frozen=True):
    """One PodGroup as the gang reconciler reads it."""

    cluster: str
    namespace: str
    name: str
    uid: str
    min_count: int
    # ``spec.schedulingConstraints.topology[0].key``: all members inside one value of it.
    topology_key: str | None
    workload: str | None
    template: str | None
    scheduled: Condition | None
    pods_ready: Condition | None
    evictions: int
    # ``spec.priority`` (the Priority admission plugin fills it from ``priorityClassName``;
    # none is 0), the group's priority as preemptor and as victim (KEP-5710).
    priority: int = 0
    # ``spec.disruptionMode`` is ``all`` (1.37) or ``PodGroup`` (1.36): evicted whole.
    evicted_whole: bool = False
    # ``spec.preemptionPolicy`` is not ``Never``.
    preempts: bool = True
    # ``spec.parentCompositePodGroupName``: the CompositePodGroup it is a child of (1.37).
    parent: str | None = None

    @property
    def key(self) -> str:
        return f"{self.cluster}/{self.namespace}/{self.name}"

    @property
    def ref(self) -> str:
        return f"PodGroup/{self.key}"

    @property
    def admitted(self) -> bool:
        return self.scheduled is not None and self.scheduled.true

    @property
    def admitted_at(self) -> int | None:
        return self.scheduled.since if self.admitted and self.scheduled else None

    def reason_is(self, *reasons: str) -> bool:
        scheduled = self.scheduled
        return scheduled is not None and not scheduled.true and scheduled.reason in reasons


def _count(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GangSpecError(f"{where}: must be an integer of at least 1, got {value!r}")
    return value


# spec.disruptionMode: the v1beta1 union member or the v1alpha2 enum value -> evicted whole.
_DISRUPTION: Final = {"single": False, "all": True, "Pod": False, "PodGroup": True}
PREEMPTION_POLICIES: Final = ("PreemptLowerPriority", "Never")


def evicted_whole(spec: Mapping[str, Any], where: str) -> bool:
    """Whether ``spec.disruptionMode`` makes the group one preemption victim: ``{all: {}}``
    (v1beta1) or ``PodGroup`` (v1alpha2); unset is ``single``/``Pod``."""
    mode = spec.get("disruptionMode")
    if mode is None:
        return False
    if isinstance(mode, dict) and len(mode) == 1:
        mode = next(iter(mode))
    if isinstance(mode, str) and mode in _DISRUPTION:
        return _DISRUPTION[mode]
    raise GangSpecError(
        f"{where}: spec.disruptionMode: expected {{single: {{}}}}, {{all: {{}}}}, Pod or "
        f"PodGroup, got {mode!r}"
    )


def _policy_count(spec: Mapping[str, Any], field: str, where: str) -> int | None:
    """``spec.schedulingPolicy``: the gang's `field` (minCount, minGroupCount), None for a
    basic policy."""
    policy = spec.get("schedulingPolicy")
    if not isinstance(policy, dict) or not (("gang" in policy) ^ ("basic" in policy)):
        raise GangSpecError(
            f"{where}: spec.schedulingPolicy: exactly one of basic or gang is required, "
            f"got {policy!r}"
        )
    if "basic" in policy:
        return None
    gang = policy["gang"]
    if not isinstance(gang, dict):
        raise GangSpecError(f"{where}: spec.schedulingPolicy.gang: expected an object")
    return _count(gang.get(field), f"{where}: spec.schedulingPolicy.gang.{field}")


def _topology_key(spec: Mapping[str, Any], where: str) -> str | None:
    """``spec.schedulingConstraints.topology[0].key``, if any."""
    constraints = spec.get("schedulingConstraints")
    if constraints is None:
        return None
    topology = constraints.get("topology") if isinstance(constraints, dict) else constraints
    if topology is None:
        return None
    if not isinstance(topology, list) or len(topology) > 1:
        raise GangSpecError(
            f"{where}: spec.schedulingConstraints.topology: at most one item, got {topology!r}"
        )
    if not topology:
        return None
    key = topology[0].get("key") if isinstance(topology[0], dict) else None
    if not isinstance(key, str) or not key:
        raise GangSpecError(
            f"{where}: spec.schedulingConstraints.topology[0].key: a node label key is "
            f"required, got {key!r}"
        )
    return key


class CompositeSpec(msgspec.Struct, frozen=True):
    """A CompositePodGroup as gang admission reads it (KEP-6012): how many of its child groups
    must be admitted together, and the level they all share."""

    name: str
    # None: a basic composite (its children are admitted on their own).
    min_group_count: int | None
    topology_key: str | None


def composite_spec(group: CompositePodGroup) -> CompositeSpec:
    where = f"CompositePodGroup {group.namespace}/{group.name}"
    return CompositeSpec(
        name=group.name,
        min_group_count=_policy_count(group.spec, "minGroupCount", where),
        topology_key=_topology_key(group.spec, where),
    )


def group_spec(cluster: str, group: PodGroup) -> GroupSpec:
    where = f"PodGroup {group.namespace}/{group.name}"
    spec = group.spec
    policy = spec.get("schedulingPolicy")
    counted = _policy_count(spec, "minCount", where)
    # A basic group has no quorum: whatever members exist are placed together.
    min_count = 1 if counted is None else counted
    topology_key = _topology_key(spec, where)
    parent = spec.get("parentCompositePodGroupName")
    if parent is not None and (not isinstance(parent, str) or not parent):
        raise GangSpecError(
            f"{where}: spec.parentCompositePodGroupName: expected a name, got {parent!r}"
        )
    workload, template = workload_ref(spec)
    whole = evicted_whole(spec, where)
    if whole and isinstance(policy, dict) and "basic" in policy:
        # Upstream's workload builder refuses it (KEP-5710); a 1.37 server may still store it.
        raise GangSpecError(f"{where}: spec.disruptionMode: all needs a gang policy, not basic")
    policy_name = spec.get("preemptionPolicy", "PreemptLowerPriority")
    if policy_name not in PREEMPTION_POLICIES:
        raise GangSpecError(
            f"{where}: spec.preemptionPolicy: expected PreemptLowerPriority or Never, "
            f"got {policy_name!r}"
        )
    conditions = conditions_of(group.status, where)
    raw_evictions = group.annotations.get(EVICTIONS, "0")
    if not raw_evictions.isdecimal() or len(raw_evictions) > 9:
        raise GangSpecError(
            f"{where}: annotation {EVICTIONS}: expected a count, got {raw_evictions!r}"
        )
    return GroupSpec(
        cluster=cluster,
        namespace=group.namespace,
        name=group.name,
        uid=group.uid,
        min_count=min_count,
        topology_key=topology_key,
        workload=workload,
        template=template,
        scheduled=conditions.get(SCHEDULED),
        pods_ready=conditions.get(PODS_READY),
        evictions=int(raw_evictions),
        priority=group_priority(group),
        evicted_whole=whole,
        preempts=policy_name != "Never",
        parent=parent,
    )


def template_names(workload: Workload) -> list[str]:
    raw = workload.spec.get("podGroupTemplates")
    if not isinstance(raw, list):
        return []
    return [t["name"] for t in raw if isinstance(t, dict) and isinstance(t.get("name"), str)]


# -- members ------------------------------------------------------------------------------------


def live(pod: Pod) -> bool:
    return not pod.terminal and pod.deletion_ts is None


class Members(msgspec.Struct, frozen=True):
    """A group's pods, sorted by name, split by what the gang reconciler does with them."""

    # Pods of kbatchd's scheduler, any phase.
    ours: tuple[Pod, ...]
    # Ours, live and bound; live, unbound and without scheduling gates (to place).
    bound: tuple[Pod, ...]
    pending: tuple[Pod, ...]
    # Ours, live but gated: not members yet (upstream's PreEnqueue does not see them).
    gated: tuple[Pod, ...]
    succeeded: tuple[Pod, ...]
    # Live pods naming the group but another scheduler.
    foreign: tuple[Pod, ...]

    @property
    def count(self) -> int:
        """Members that count towards minCount: live and ungated, and those that already
        succeeded: they ran as members (a gang whose admission a crash cut short may finish
        some before it is decided again), as Kueue's PodsReady counts them."""
        return len(self.bound) + len(self.pending) + len(self.succeeded)

    def ready(self) -> int:
        """Kueue's PodsReady arithmetic: ready pods plus the ones that already succeeded."""
        return sum(1 for p in self.bound if p.ready) + len(self.succeeded)

    def running(self) -> int:
        return sum(1 for p in self.bound if p.phase == "Running")


def members(pods: Iterable[Pod], scheduler: str) -> Members:
    """`pods` split as `Members` holds them, in the order given: the caller gives them by
    name, sorting their keys as strings, which is cheaper than sorting the pods by an
    attribute (about a fifth of a 4,000-pod group's read), and a group is read again at each
    of its members' changes."""
    ours: list[Pod] = []
    bound: list[Pod] = []
    pending: list[Pod] = []
    gated: list[Pod] = []
    succeeded: list[Pod] = []
    foreign: list[Pod] = []
    for pod in pods:
        if pod.scheduler_name != scheduler:
            if live(pod):
                foreign.append(pod)
            continue
        ours.append(pod)
        if pod.phase == "Succeeded":
            succeeded.append(pod)
        if not live(pod):
            continue
        if pod.node_name:
            bound.append(pod)
        elif pod.scheduling_gates:
            gated.append(pod)
        else:
            pending.append(pod)
    return Members(
        tuple(ours), tuple(bound), tuple(pending), tuple(gated), tuple(succeeded), tuple(foreign)
    )


def max_requests(pods: Iterable[Pod]) -> dict[str, int]:
    """Per resource, the largest request among `pods`: members of one group are placed as
    identical pods (the placement library's pod set), so a heterogeneous group is placed as if
    every member asked for the most any of them asks — never overcommitting a node."""
    result: dict[str, int] = {}
    for pod in pods:
        for name, amount in pod.requests.items():
            if amount > result.get(name, 0):
                result[name] = amount
    return result


# -- the topology request -----------------------------------------------------------------------


class TopologyRequest(msgspec.Struct, frozen=True):
    required: str | None = None
    preferred: str | None = None
    unconstrained: bool = False
    slice_level: str | None = None
    slice_size: int = 0


def _annotations(pods: Iterable[Pod]) -> dict[str, str]:
    """The Kueue annotations of the members, which must agree (they come from one template)."""
    chosen: dict[str, str] | None = None
    first = ""
    for pod in pods:
        found: dict[str, str] = {k: pod.annotations[k] for k in KUEUE_KEYS if k in pod.annotations}
        if chosen is None:
            chosen, first = found, pod.name
        elif found != chosen:
            raise GangSpecError(
                f"pods {first} and {pod.name}: members disagree on Kueue topology annotations "
                f"({chosen} vs {found})"
            )
    return chosen or {}


def topology_request(group: GroupSpec, pods: Iterable[Pod]) -> TopologyRequest:
    """The group's topology request: the PodGroup's scheduling constraint (a required level)
    and the Kueue pod set annotations on its members' template."""
    notes = _annotations(pods)
    required = notes.get(KUEUE_REQUIRED) or None
    preferred = notes.get(KUEUE_PREFERRED) or None
    raw_unconstrained = notes.get(KUEUE_UNCONSTRAINED)
    unconstrained = False
    if raw_unconstrained is not None:
        if raw_unconstrained.lower() not in ("true", "false"):
            raise GangSpecError(
                f"annotation {KUEUE_UNCONSTRAINED}: expected true or false, "
                f"got {raw_unconstrained!r}"
            )
        unconstrained = raw_unconstrained.lower() == "true"
    key = group.topology_key
    if key is not None:
        # The PodGroup's constraint is a hard requirement; an annotation may repeat it but
        # not ask for something else.
        if (required not in (None, key)) or preferred is not None or unconstrained:
            raise GangSpecError(
                f"spec.schedulingConstraints.topology[0].key {key!r} conflicts with the "
                f"members' Kueue annotations {notes}"
            )
        required = key
    slice_level = notes.get(KUEUE_SLICE_REQUIRED) or None
    slice_size = 0
    raw_size = notes.get(KUEUE_SLICE_SIZE)
    if raw_size is not None:
        if not raw_size.isdecimal() or len(raw_size) > 9:
            raise GangSpecError(
                f"annotation {KUEUE_SLICE_SIZE}: expected a count, got {raw_size!r}"
            )
        slice_size = int(raw_size)
    if slice_level is not None and raw_size is None:
        raise GangSpecError(f"annotation {KUEUE_SLICE_REQUIRED} needs {KUEUE_SLICE_SIZE} too")
    if raw_size is not None and slice_level is None:
        raise GangSpecError(f"annotation {KUEUE_SLICE_SIZE} needs {KUEUE_SLICE_REQUIRED} too")
    return TopologyRequest(required, preferred, unconstrained, slice_level, slice_size)
