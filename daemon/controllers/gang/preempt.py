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

This module is the pure part: the units and the reverse pass. The reconciler builds the
units from the state, places the gang, and writes the eviction (`gang.reconciler`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Final

import msgspec

from daemon.controllers.gang.place import Amounts, demand, fits
from events.objects import Pod

DISRUPTION_TARGET: Final = "DisruptionTarget"
PREEMPTED_REASON: Final = "PreemptionByScheduler"


class Unit(msgspec.Struct, frozen=True):
    """What preemption evicts at once: a PodGroup (``grouped``, several pods) or one pod."""

    name: str  # ``PodGroup ns/name`` or ``Pod ns/name``
    priority: int
    # Whether its pods belong to a PodGroup (a ``single`` group's pod still counts as one).
    grouped: bool
    pods: tuple[Pod, ...]
    # When its earliest pod was created (ms): of two like units, the older is more important.
    started: int


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


def group_unit(namespace: str, name: str, priority: int, pods: Sequence[Pod]) -> Unit:
    return Unit(
        name=f"PodGroup {namespace}/{name}",
        priority=priority,
        grouped=True,
        pods=tuple(sorted(pods, key=lambda p: p.name)),
        started=min((p.created for p in pods), default=0),
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


def describe(victims: Sequence[Unit]) -> str:
    """Victims as a reason lists them: the first few by name, and the count."""
    pods = sum(len(u.pods) for u in victims)
    names = ", ".join(f"{u.name} (priority {u.priority})" for u in victims[:4])
    more = f" and {len(victims) - 4} more" if len(victims) > 4 else ""
    return f"{len(victims)} victim(s), {pods} pod(s): {names}{more}"
