"""Role ratios (beyond upstream, which can only say "at least N of each role", spec B.4).

A Workload annotated ``kbatchd.dev/role-ratio: "prefill=1,decode=3"`` whose PodGroups are
made from templates named by those roles is admitted only in whole *units* — here one prefill
pod and three decode pods — and each unit lands inside one domain of the *unit level* (a
rack by default: a prefill pod and its decoders share a KV cache over the rack's fabric).

Placement of k units: for every domain of the unit level, the most units (up to k) the
placement library can fit inside it, each role a pod set required at that level on that
domain's nodes alone (pod sets placed in order see each other's usage); then the units go to
the domains with the most room first (fewest domains, names break ties), all k or none. When
a role's PodGroup requires a wider level (its ``schedulingConstraints.topology``), every unit
must also share one domain of that level: the tightest such domain that holds all k wins.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from daemon.controllers.gang.place import (
    Amounts,
    ClusterView,
    PlacedTree,
    Restrict,
    Slots,
    add_free,
    eligible,
    expand,
)
from daemon.controllers.gang.spec import GangSpecError
from daemon.placement import NodeInfo, PodSetRequest, TopologyAssignment, place_on
from events.objects import Pod

MAX_WEIGHT: Final = 10_000


class Role(msgspec.Struct, frozen=True):
    name: str
    weight: int


def parse_ratio(text: str, where: str) -> tuple[Role, ...]:
    """``"prefill=1,decode=3"`` → roles in the order written."""
    roles: list[Role] = []
    seen: set[str] = set()
    for part in text.split(","):
        name, eq, raw = (piece.strip() for piece in part.partition("="))
        if not eq or not name:
            raise GangSpecError(f"{where}: invalid entry {part.strip()!r} (want role=count)")
        if not raw.isdecimal() or not 1 <= int(raw) <= MAX_WEIGHT:
            raise GangSpecError(
                f"{where}: role {name!r}: count must be an integer from 1 to {MAX_WEIGHT}, "
                f"got {raw!r}"
            )
        if name in seen:
            raise GangSpecError(f"{where}: role {name!r} appears twice")
        seen.add(name)
        roles.append(Role(name, int(raw)))
    return tuple(roles)


def describe(roles: Sequence[Role]) -> str:
    return ",".join(f"{role.name}={role.weight}" for role in roles)


class Demand(msgspec.Struct, frozen=True):
    """One role's share of the units to place: its pending pods (at least k × weight, the
    first k × weight are placed) and their per-pod requests."""

    role: Role
    requests: Amounts
    pods: tuple[Pod, ...]


class _Inner:
    """A unit-level domain: its tree and the placements that fit 1, 2, ... units in it."""

    def __init__(self, path: tuple[str, ...], placed: PlacedTree) -> None:
        self.path = path
        self.placed = placed
        self.results: list[dict[str, TopologyAssignment]] = []

    @property
    def cap(self) -> int:
        return len(self.results)


def _upper_bound(placed: PlacedTree, demands: Sequence[Demand], k: int) -> int:
    """Units the domain's summed free room could hold at most: skips the placement runs for
    domains that cannot take even one."""
    free: Amounts = {}
    for info in placed.infos:
        if eligible(info, placed.levels):
            add_free(free, info)
    unit: Amounts = {}
    for demand in demands:
        for name, amount in demand.requests.items():
            unit[name] = unit.get(name, 0) + amount * demand.role.weight
        unit["pods"] = unit.get("pods", 0) + demand.role.weight
    bound = k
    for name, amount in unit.items():
        if amount > 0:
            bound = min(bound, free.get(name, 0) // amount)
    return bound


def _requests(demands: Sequence[Demand], units: int, level: str) -> list[PodSetRequest]:
    return [
        PodSetRequest(
            name=d.role.name,
            count=units * d.role.weight,
            requests=dict(d.requests),
            required=level,
            tolerations=d.pods[0].tolerations,
            node_selector=dict(d.pods[0].node_selector),
            node_affinity=d.pods[0].node_affinity,
        )
        for d in demands
    ]


def place_units(
    view: ClusterView,
    levels: tuple[str, ...],
    unit_level: str,
    outer_level: str | None,
    restrict: Restrict,
    demands: Sequence[Demand],
    k: int,
) -> Slots | str:
    """Nodes for k whole units, or why not (``RatioUnitsUnschedulable: ...``)."""
    unit_depth = levels.index(unit_level) + 1
    outer_depth = 0
    if outer_level is not None:
        depth = levels.index(outer_level) + 1
        if depth >= unit_depth:
            # The whole group must share a domain at least as narrow as a unit's: all k
            # units go into one domain of that level.
            unit_depth = outer_depth = depth
        else:
            outer_depth = depth
    inner_level = levels[unit_depth - 1]
    by_path: dict[tuple[str, ...], list[NodeInfo]] = {}
    for info in view.infos():
        if restrict and not all(info.labels.get(key) == value for key, value in restrict):
            continue
        if not eligible(info, levels):
            continue
        path = tuple(info.labels[level] for level in levels[:unit_depth])
        by_path.setdefault(path, []).append(info)
    inners: list[_Inner] = []
    for path in sorted(by_path):
        placed = PlacedTree(levels, by_path[path])
        inner = _Inner(path, placed)
        for units in range(1, _upper_bound(placed, demands, k) + 1):
            result = place_on(placed.tree, _requests(demands, units, inner_level))
            if not result.admitted or result.assignments is None:
                break
            inner.results.append(dict(result.assignments))
        inners.append(inner)
    outers: dict[tuple[str, ...], list[_Inner]] = {}
    for inner in inners:
        outers.setdefault(inner.path[:outer_depth], []).append(inner)
    totals = {outer: sum(i.cap for i in members) for outer, members in outers.items()}
    fitting = sorted((total, outer) for outer, total in totals.items() if total >= k)
    if not fitting:
        best = max(totals.values(), default=0)
        scope = f" inside one {outer_level}" if outer_level is not None and outer_depth else ""
        return (
            f"RatioUnitsUnschedulable: only {best} of {k} unit(s) of "
            f"{describe([d.role for d in demands])} fit, each within one {inner_level}{scope}"
        )
    chosen = outers[fitting[0][1]]
    slots: Slots = []
    remaining = k
    taken_pods = {d.role.name: 0 for d in demands}
    for inner in sorted(chosen, key=lambda i: (-i.cap, i.path)):
        if not remaining:
            break
        units = min(inner.cap, remaining)
        remaining -= units
        assignments = inner.results[units - 1]
        taken: dict[str, Amounts] = {}
        for demand in demands:
            nodes = expand(
                inner.placed,
                assignments[demand.role.name],
                demand.requests,
                taken,
                demand.pods[0],
            )
            if isinstance(nodes, str):
                return nodes
            start = taken_pods[demand.role.name]
            pods = demand.pods[start : start + len(nodes)]
            taken_pods[demand.role.name] = start + len(nodes)
            slots.extend(zip(pods, nodes, strict=True))
    return slots


def unit_level(annotation: str | None, configured: str, levels: tuple[str, ...], where: str) -> str:
    """The level each unit must stay inside: the Workload's annotation, else the configured
    one, else the level just above the lowest (the rack in block → rack → host)."""
    level = annotation or configured or (levels[-2] if len(levels) > 1 else levels[0])
    if level not in levels:
        raise GangSpecError(
            f"{where}: unit level {level!r} is not a topology level (levels: {list(levels)})"
        )
    return level
