"""The public entry: place every pod set of a request, all or nothing (TAS spec sections 7-9)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from daemon.placement import reasons
from daemon.placement.balanced import balanced_fit
from daemon.placement.bestfit import descend, find_fit_domains
from daemon.placement.counts import CountRequest, Counts, fill_counts, pod_requests
from daemon.placement.model import (
    HOSTNAME_LABEL,
    Algorithm,
    Domain,
    NodeInfo,
    PlacementResult,
    PodSetRequest,
    TopologyAssignment,
)
from daemon.placement.plan import BALANCED, Plan, resolve
from daemon.placement.tree import Topology, build_topology
from daemon.placement.validation import first_problem

# Assumed usage per leaf: what pod sets placed earlier in this pass take (spec 2.2, 8).
Assumed = dict[int, dict[str, int]]
# A placed pod set: its assignment and the pods it puts on each leaf.
Placed = tuple[TopologyAssignment, list[tuple[int, int]]]


def place(
    levels: Sequence[str],
    nodes: Sequence[NodeInfo],
    pod_sets: Sequence[PodSetRequest],
    algorithm: Algorithm = "auto",
) -> PlacementResult:
    """Place `pod_sets` on the topology of `nodes`, in order, each seeing what the earlier
    ones took. Malformed shapes come back as a failed result too: pure code never raises on
    data."""
    problem = first_problem(levels, pod_sets)
    if problem is not None:
        pod_set = pod_sets[problem.pod_set].name if problem.pod_set is not None else None
        return PlacementResult(False, None, f"{problem.field}: {problem.message}", pod_set)
    return place_on(build_topology(levels, nodes), pod_sets, algorithm)


def place_on(
    topo: Topology, pod_sets: Sequence[PodSetRequest], algorithm: Algorithm = "auto"
) -> PlacementResult:
    """`place` on a tree built once with `build_topology` (shapes assumed valid)."""
    assumed: Assumed = {}
    assignments: dict[str, TopologyAssignment] = {}
    for unit in _units(pod_sets):
        workers, leader = _roles(unit)
        placed = _place_unit(topo, workers, leader, algorithm, assumed)
        if isinstance(placed, str):
            return PlacementResult(False, None, placed, unit[0].name)
        for pod_set, (assignment, leaves) in zip((workers, leader), placed, strict=False):
            if pod_set is None:
                continue
            assignments[pod_set.name] = assignment
            _assume(assumed, leaves, pod_set.requests)
    return PlacementResult(True, {ps.name: assignments[ps.name] for ps in pod_sets})


def _units(pod_sets: Sequence[PodSetRequest]) -> list[list[PodSetRequest]]:
    """Pod sets sharing a group form one unit; units in order of first appearance."""
    units: list[list[PodSetRequest]] = []
    by_group: dict[str, list[PodSetRequest]] = {}
    for pod_set in pod_sets:
        if pod_set.group is None:
            units.append([pod_set])
        elif pod_set.group in by_group:
            by_group[pod_set.group].append(pod_set)
        else:
            by_group[pod_set.group] = [pod_set]
            units.append(by_group[pod_set.group])
    return units


def _roles(unit: list[PodSetRequest]) -> tuple[PodSetRequest, PodSetRequest | None]:
    """Workers and leader: the larger count is the workers; on a tie the first listed."""
    if len(unit) == 1:
        return unit[0], None
    workers, leader = unit[0], unit[1]
    if leader.count > workers.count:
        workers, leader = leader, workers
    return workers, leader


def _assume(assumed: Assumed, leaves: list[tuple[int, int]], requests: Mapping[str, int]) -> None:
    for leaf, pods in leaves:
        usage = assumed.setdefault(leaf, {})
        for name, amount in requests.items():
            usage[name] = usage.get(name, 0) + amount * pods
        usage["pods"] = usage.get("pods", 0) + pods


def _place_unit(
    topo: Topology,
    workers: PodSetRequest,
    leader: PodSetRequest | None,
    algorithm: Algorithm,
    assumed: Assumed,
) -> list[Placed] | str:
    """Only the workers' topology request drives the placement; the leader brings its
    per-pod requests (spec 9)."""
    plan = resolve(topo.levels, workers, leader is not None, algorithm)
    if isinstance(plan, str):
        return plan
    request = CountRequest(
        requests=pod_requests(workers.requests),
        leader=pod_requests(leader.requests) if leader is not None else None,
        slice_size=plan.slice_size,
        slice_level=plan.slice_level,
        inner=plan.inner,
        tolerations=workers.tolerations,
        node_selector=workers.node_selector,
        assumed=assumed,
        node_affinity=workers.node_affinity,
    )
    counts, exclusions = fill_counts(topo, request)
    chosen = _chosen_leaves(topo, counts, plan, exclusions)
    if isinstance(chosen, str):
        return chosen
    final, leaves = chosen
    leaves = sorted(set(leaves))
    worker_leaves = [(leaf, final.pod[leaf]) for leaf in leaves if final.pod[leaf] > 0]
    leader_leaves = [(leaf, final.leader[leaf]) for leaf in leaves if final.leader[leaf] > 0]
    if sum(n for _, n in worker_leaves) != workers.count or len(leader_leaves) != plan.leader:
        return reasons.incomplete(topo.levels[-1])
    placed: list[Placed] = [(_assignment(topo, worker_leaves), worker_leaves)]
    if leader is not None:
        placed.append((_assignment(topo, leader_leaves), leader_leaves))
    return placed


def _chosen_leaves(
    topo: Topology, counts: Counts, plan: Plan, exclusions: reasons.Exclusions
) -> tuple[Counts, list[int]] | str:
    if plan.engine == BALANCED:
        balanced = balanced_fit(topo, counts, plan)
        if balanced is not None:
            work, level, units = balanced
            leaves = descend(topo, work, plan, level, units, pooled=False)
            return leaves if isinstance(leaves, str) else (work, leaves)
    found = find_fit_domains(topo, counts, plan, exclusions)
    if isinstance(found, str):
        return found
    level, fit = found
    leaves = descend(topo, counts, plan, level, fit, pooled=True)
    return leaves if isinstance(leaves, str) else (counts, leaves)


def _assignment(topo: Topology, leaves: list[tuple[int, int]]) -> TopologyAssignment:
    """Spec 7: hostname values only when the lowest level is the hostname; leaves in
    topology-path order (domain numbers are in that order already)."""
    if topo.hostname_lowest:
        return TopologyAssignment(
            (HOSTNAME_LABEL,),
            tuple(Domain((topo.values[leaf][-1],), pods) for leaf, pods in leaves),
        )
    return TopologyAssignment(
        topo.levels, tuple(Domain(topo.values[leaf], pods) for leaf, pods in leaves)
    )
