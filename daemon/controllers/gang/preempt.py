"""Workload-aware preemption inside one cluster (KEP-5710, workload-aware-scheduling spec §5):
which lower-priority pods and PodGroups a waiting gang evicts to get room.

- **The preemptor** is a whole PodGroup, at its ``spec.priority`` (none is 0), unless its
  ``preemptionPolicy`` is ``Never``.
- **Victim units.** A PodGroup whose ``disruptionMode`` is ``all`` (``PodGroup`` in 1.36) is
  one unit: every bound member goes, or none does, at the group's priority. Every other pod
  (no group, or a ``single`` group) is a unit of its own at the pod's priority. Only units of
  strictly lower priority than the preemptor are candidates.
- **Remove all, then a reverse pass.** Every candidate is taken out and the gang is placed
  once. If it does not fit even then, nobody is preempted. Otherwise the candidates are put
  back one by one, the most important first (`importance`), and each stays (is spared) when
  the placement found still holds with it back on its nodes — upstream 1.37's "in place"
  check, which runs the group algorithm once instead of once per unit. The rest are the
  victims: the fewest priority-weighted pods the order allows.

This module is the planner: the units of a cluster, where the gang goes, and the reverse
pass, given the group algorithm as a function (`Place`, as upstream hands its preemption the
pod group scheduling function). It decides nothing and writes nothing: the gang reconciler
marks, nominates and deletes (`gang.reconciler`); the multi-cluster dispatcher asks it what a
workload would cost in each worker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from daemon.controllers.gang.place import (
    Amounts,
    ClusterView,
    Restrict,
    Slots,
    add_free,
    demand,
    domain_of,
    fits,
    restrict_to,
)
from daemon.controllers.gang.projection import group_priority
from daemon.controllers.gang.spec import GangSpecError, evicted_whole
from events.objects import Pod, PodGroup
from events.state import State

DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTED_REASON: Final = "PreemptionByScheduler"
# A gang confined to one domain is tried in at most this many domains, the lightest first.
PREEMPT_DOMAINS: Final = 8


class Unit(msgspec.Struct, frozen=True):
    """What preemption evicts at once: a PodGroup (``grouped``, several pods) or one pod."""

    name: str  # ``PodGroup ns/name`` or ``Pod ns/name``
    priority: int
    # Whether its pods belong to a PodGroup (a ``single`` group's pod still counts as one).
    grouped: bool
    pods: tuple[Pod, ...]
    # When its earliest pod was created (ms): of two like units, the older is more important.
    started: int
    # The key (``cluster/namespace/name``) of the PodGroup a unit evicted whole is; else "".
    group: str = ""


def importance(unit: Unit) -> tuple[int, bool, int, int, str]:
    """The sort key that puts the most important unit first (upstream's
    ``moreImportantVictim``): higher priority; then a group's pod before a plain pod; then,
    among groups, the one with more pods; then the one that started earlier."""
    size = -len(unit.pods) if unit.grouped else 0
    return (-unit.priority, not unit.grouped, size, unit.started, unit.name)


def leaving(pod: Pod) -> bool:
    """A pod already on its way out: being deleted, or marked ``DisruptionTarget`` (a victim
    of an earlier preemption, or of a placement violation, not yet deleted)."""
    return pod.deletion_ts is not None or pod.conditions.get(DISRUPTION_TARGET) == "True"


def pod_unit(pod: Pod) -> Unit:
    return Unit(
        name=f"Pod {pod.namespace}/{pod.name}",
        priority=pod.priority,
        grouped=bool(pod.pod_group),
        pods=(pod,),
        started=pod.created,
    )


def group_unit(group_key: str, priority: int, pods: Sequence[Pod]) -> Unit:
    _, namespace, name = group_key.split("/", 2)
    return Unit(
        name=f"PodGroup {namespace}/{name}",
        priority=priority,
        grouped=True,
        pods=tuple(sorted(pods, key=lambda p: p.name)),
        started=min((p.created for p in pods), default=0),
        group=group_key,
    )


def weight(units: Iterable[Unit]) -> int:
    """Priority-weighted pods: what a choice of victims costs (more pods at higher priority
    weigh more; priorities below 1 count as 1)."""
    return sum(len(u.pods) * max(1, u.priority) for u in units)


def reprieve(
    candidates: Sequence[Unit], slack: Mapping[str, Amounts]
) -> tuple[list[Unit], list[Unit]]:
    """(victims, spared): the reverse pass. `slack` is the room left on each node the gang
    was placed on, with every candidate gone and the gang bound; a unit is spared when its
    pods on those nodes fit in what is left (its pods elsewhere do not touch the placement).
    Victims come out least important first, the order they are evicted in."""
    left = {node: dict(room) for node, room in slack.items()}
    victims: list[Unit] = []
    spared: list[Unit] = []
    for unit in sorted(candidates, key=importance):
        back: dict[str, Amounts] = {}
        for pod in unit.pods:
            if pod.node_name in left:
                for name, amount in demand([pod]).items():
                    need = back.setdefault(pod.node_name, {})
                    need[name] = need.get(name, 0) + amount
        if all(fits(need, left[node]) for node, need in back.items()):
            for node, need in back.items():
                room = left[node]
                for name, amount in need.items():
                    if name in room:
                        room[name] -= amount
            spared.append(unit)
        else:
            victims.append(unit)
    victims.reverse()
    return victims, spared


def disruption(message: str, stamp: str) -> dict[str, Any]:
    """A victim pod's status patch (strategic merge: conditions merge by type), as
    kube-scheduler marks the pods it preempts."""
    condition = {
        "type": DISRUPTION_TARGET,
        "status": "True",
        "reason": PREEMPTED_REASON,
        "message": message,
        "lastTransitionTime": stamp,
    }
    return {"status": {"conditions": [condition]}}


def describe(victims: Sequence[Unit]) -> str:
    """Victims as a reason lists them: the first few by name, and the count."""
    pods = sum(len(u.pods) for u in victims)
    names = ", ".join(f"{u.name} (priority {u.priority})" for u in victims[:4])
    more = f" and {len(victims) - 4} more" if len(victims) > 4 else ""
    return f"{len(victims)} victim(s), {pods} pod(s): {names}{more}"


# -- the planner --------------------------------------------------------------------------------

# The group algorithm: the gang's pending pods placed on a view, inside a domain (`()`:
# anywhere it may go), or why they do not fit.
Place = Callable[[ClusterView, Restrict], "Slots | str"]


@dataclass(frozen=True)
class Preemptor:
    """Who asks for room: a PodGroup (or a workload not yet in the cluster) at `priority`."""

    namespace: str
    name: str
    priority: int
    pending: Sequence[Pod]  # the pods to place
    level: str | None  # the level all of them must share, if any


@dataclass(frozen=True)
class Plan:
    """Room for a preemptor: the nodes it goes on, and the units that must go first.
    `waiting`: they are on their way out already (marked or being deleted), so nothing new
    is evicted."""

    slots: Slots
    victims: list[Unit]
    spared: list[Unit]
    waiting: bool = False


def units(view: ClusterView, preemptor: Preemptor) -> tuple[list[Unit], list[Unit]]:
    """The units of lower priority than `preemptor` bound in the view's cluster: (those
    already leaving, the candidates). A group evicted whole is one unit with all its bound
    members; its members already leaving are a unit of their own, the rest another."""
    state, cluster = view.state, view.cluster
    pods, node_pods, podgroups = state.pods, state.topology.node_pods, state.podgroups
    going: list[Unit] = []
    candidates: list[Unit] = []
    whole: dict[str, tuple[Unit, Unit]] = {}
    for node in view.nodes:
        for pod_key in sorted(node_pods.get(f"{cluster}//{node.name}", ())):
            pod = pods.get(pod_key)
            if pod is None or pod.terminal:
                continue
            if pod.pod_group:
                if pod.namespace == preemptor.namespace and pod.pod_group == preemptor.name:
                    continue  # its own members
                group_key = f"{cluster}/{pod.namespace}/{pod.pod_group}"
                podgroup = podgroups.get(group_key)
                if podgroup is not None and _whole(podgroup):
                    if group_key not in whole and group_priority(podgroup) < preemptor.priority:
                        whole[group_key] = _group_units(state, group_key, podgroup)
                    continue
            if pod.priority >= preemptor.priority:
                continue
            unit = pod_unit(pod)
            (going if leaving(pod) else candidates).append(unit)
    for staying, left in whole.values():
        if staying.pods:
            candidates.append(staying)
        if left.pods:
            going.append(left)
    return going, candidates


def plan(
    view: ClusterView,
    place: Place,
    preemptor: Preemptor,
    found: tuple[list[Unit], list[Unit]] | None = None,
) -> Plan | str:
    """Room for `preemptor` on `view` by evicting lower-priority units, or why there is none.
    Room already on its way out comes first: if the preemptor fits once the leaving units are
    gone, it waits for those among them on its nodes. Otherwise every candidate is taken out,
    the preemptor placed once (`lightest`), and the reverse pass spares what it can. `found`:
    the (leaving, candidate) units, when the caller has narrowed `units`' answer."""
    going, candidates = units(view, preemptor) if found is None else found
    freed = view
    if going:
        freed = view.copy()
        freed.release([(p, p.node_name) for u in going for p in u.pods])
        slots = place(freed, ())
        if not isinstance(slots, str):
            nodes = {node for _, node in slots}
            needed = [u for u in going if any(p.node_name in nodes for p in u.pods)]
            return Plan(slots, needed, [], waiting=True)
    if not candidates:
        return "no lower-priority pod or group to evict"
    trial = freed.copy()
    trial.release([(p, p.node_name) for u in candidates for p in u.pods])
    slots = lightest(trial, place, preemptor, candidates)
    if isinstance(slots, str):
        return f"{len(candidates)} lower-priority unit(s) would not make room: {slots}"
    trial.assume(slots)
    taken = {node for _, node in slots}
    slack: dict[str, Amounts] = {}
    for info in trial.infos():
        if info.name in taken:
            add_free(slack.setdefault(info.name, {}), info)
    victims, spared = reprieve(candidates, slack)
    return Plan(slots, victims, spared)


def lightest(
    view: ClusterView, place: Place, preemptor: Preemptor, candidates: Sequence[Unit]
) -> Slots | str:
    """Where the preemptor goes once every candidate is gone. One confined to one domain is
    tried in the domains of the fewest priority-weighted candidate pods first (then by
    name), so that the reverse pass starts from the cheapest room; else wherever placement
    puts it."""
    level = preemptor.level
    configured = view.state.topology.levels
    if level is None or level not in configured:
        return place(view, ())
    weights: dict[tuple[str, ...], int] = {}
    for unit in candidates:
        for pod in unit.pods:
            labels = view.labels_of(pod.node_name)
            domain = domain_of(labels, configured, level) if labels is not None else None
            if domain is not None:
                weights[domain] = weights.get(domain, 0) + max(1, unit.priority)
    need = demand(preemptor.pending)
    domains = [d for d, room in view.room(level).items() if fits(need, room)]
    domains.sort(key=lambda d: (weights.get(d, 0), d))
    for domain in domains[:PREEMPT_DOMAINS]:
        slots = place(view, restrict_to(configured, level, domain))
        if not isinstance(slots, str):
            return slots
    return place(view, ())


def _whole(podgroup: PodGroup) -> bool:
    """Whether a group is evicted whole; a malformed mode reads as ``single`` here (the
    group's own decisions report it)."""
    try:
        return evicted_whole(podgroup.spec, "")
    except GangSpecError:
        return False


def _group_units(state: State, group_key: str, podgroup: PodGroup) -> tuple[Unit, Unit]:
    """A whole group's bound members: (the unit still to evict, the unit already leaving)."""
    pods = state.pods
    bound = [
        pod
        for key in sorted(state.group_members.get(group_key, ()))
        if (pod := pods.get(key)) is not None and pod.node_name and not pod.terminal
    ]
    priority = group_priority(podgroup)
    return (
        group_unit(group_key, priority, [p for p in bound if not leaving(p)]),
        group_unit(group_key, priority, [p for p in bound if leaving(p)]),
    )
