"""Properties of every admitted placement, on random topologies and requests: no leaf's free
capacity is exceeded, counts add up, a required level is one domain, slices are whole, node
order does not matter, and the internal "could not be completed" path is never taken."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from daemon.placement import NodeInfo, PlacementResult, PodSetRequest, place
from daemon.placement.model import ALGORITHMS, HOSTNAME_LABEL, Algorithm
from daemon.placement.tree import build_topology

BLOCK = "block"
RACK = "rack"
HOST = HOSTNAME_LABEL
LEVEL_SETS = [(BLOCK, RACK, HOST), (RACK, HOST), (HOST,), (BLOCK, RACK)]


@dataclass(frozen=True)
class Case:
    levels: tuple[str, ...]
    nodes: list[NodeInfo]
    pod_sets: list[PodSetRequest]
    algorithm: Algorithm


@st.composite
def nodes_for(draw: st.DrawFn, levels: tuple[str, ...]) -> list[NodeInfo]:
    nodes: list[NodeInfo] = []
    for block in range(draw(st.integers(1, 3))):
        for rack in range(draw(st.integers(1, 3))):
            for host in range(draw(st.integers(1, 4))):
                name = f"h{block}{rack}{host}"
                labels = {BLOCK: f"b{block}", RACK: f"r{rack}", HOST: name}
                allocatable = {
                    "cpu": draw(st.integers(0, 8)) * 1000,
                    "gpu": draw(st.integers(0, 8)),
                    "pods": draw(st.sampled_from([0, 3, 110])),
                }
                used = {name: draw(st.integers(0, value)) for name, value in allocatable.items()}
                nodes.append(
                    NodeInfo(
                        name=name,
                        labels={level: labels[level] for level in levels},
                        allocatable=allocatable,
                        used=used,
                        ready=draw(st.integers(0, 9)) > 0,
                    )
                )
    return nodes


@st.composite
def pod_set_for(draw: st.DrawFn, levels: tuple[str, ...], name: str, count: int) -> PodSetRequest:
    mode = draw(st.sampled_from(["required", "preferred", "unconstrained", "implied", "slices"]))
    level_index = draw(st.integers(0, len(levels) - 1))
    layers: tuple[tuple[str, int], ...] = ()
    if mode == "slices" or (mode != "implied" and draw(st.booleans())):
        slice_index = draw(st.integers(level_index if mode != "slices" else 0, len(levels) - 1))
        sizes = [s for s in (1, 2, 3, 4) if count % s == 0] or [1]
        size = draw(st.sampled_from(sizes))
        layers = ((levels[slice_index], size),)
        if slice_index < len(levels) - 1 and draw(st.booleans()):
            inner = [s for s in (1, 2) if size % s == 0]
            layers += (
                (
                    levels[draw(st.integers(slice_index + 1, len(levels) - 1))],
                    draw(st.sampled_from(inner)),
                ),
            )
    return PodSetRequest(
        name=name,
        count=count,
        requests={"cpu": draw(st.sampled_from([0, 500, 1000])), "gpu": draw(st.integers(0, 2))},
        required=levels[level_index] if mode == "required" else None,
        preferred=levels[level_index] if mode == "preferred" else None,
        unconstrained=mode == "unconstrained",
        implied=mode == "implied",
        slice_layers=layers,
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    levels = draw(st.sampled_from(LEVEL_SETS))
    nodes = draw(nodes_for(levels))
    pod_sets = [draw(pod_set_for(levels, "a", draw(st.integers(0, 12))))]
    if draw(st.booleans()):
        workers = draw(pod_set_for(levels, "workers", draw(st.integers(1, 8))))
        leader = PodSetRequest(
            name="leader",
            count=1,
            requests={"cpu": draw(st.sampled_from([0, 1000, 3000]))},
            required=workers.required,
            preferred=workers.preferred,
            unconstrained=workers.unconstrained,
            group="g",
        )
        workers = msgspec.structs.replace(workers, group="g")
        pod_sets += [leader, workers] if draw(st.booleans()) else [workers, leader]
    elif draw(st.booleans()):
        pod_sets.append(draw(pod_set_for(levels, "b", draw(st.integers(0, 12)))))
    return Case(levels, nodes, pod_sets, draw(st.sampled_from(ALGORITHMS)))


def _leaf_paths(case: Case) -> dict[tuple[str, ...], tuple[str, ...]]:
    """Output values -> the leaf's full path."""
    topo = build_topology(case.levels, case.nodes)
    return {
        ((topo.values[leaf][-1],) if topo.hostname_lowest else topo.values[leaf]): topo.values[leaf]
        for leaf in topo.leaves
    }


def _check_admitted(case: Case, result: PlacementResult) -> None:
    assert result.assignments is not None
    topo = build_topology(case.levels, case.nodes)
    paths = _leaf_paths(case)
    free = {topo.values[leaf]: topo.free[leaf] for leaf in topo.leaves}
    usage: dict[tuple[str, ...], dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for pod_set in case.pod_sets:
        assignment = result.assignments[pod_set.name]
        expected_levels = (HOST,) if case.levels[-1] == HOST else case.levels
        assert assignment.levels == expected_levels
        assert sum(d.count for d in assignment.domains) == pod_set.count
        full = [paths[d.values] for d in assignment.domains]
        assert full == sorted(full), "domains must come in topology-path order"
        assert all(d.count > 0 for d in assignment.domains)
        for domain, path in zip(assignment.domains, full, strict=True):
            for resource, amount in pod_set.requests.items():
                usage[path][resource] += amount * domain.count
            usage[path]["pods"] += domain.count
    for path, used in usage.items():
        for resource, amount in used.items():
            if amount > 0:
                assert amount <= free[path].get(resource, 0), (path, resource, amount, free[path])
    by_name = {ps.name: ps for ps in case.pod_sets}
    for pod_set in case.pod_sets:
        drives = by_name["workers"] if pod_set.group else pod_set
        full = [paths[d.values] for d in result.assignments[pod_set.name].domains]
        if drives.required is not None:
            depth = case.levels.index(drives.required) + 1
            assert len({path[:depth] for path in full}) <= 1, "required level must be one domain"
        if pod_set.group and pod_set.name == "leader":
            continue
        for level, size in drives.slice_layers:
            depth = case.levels.index(level) + 1
            per_domain: dict[tuple[str, ...], int] = defaultdict(int)
            for domain, path in zip(result.assignments[pod_set.name].domains, full, strict=True):
                per_domain[path[:depth]] += domain.count
            assert all(pods % size == 0 for pods in per_domain.values()), (level, size, per_domain)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases(), st.randoms(use_true_random=False))
def test_admitted_placements_are_sound(case: Case, random: object) -> None:
    result = place(case.levels, case.nodes, case.pod_sets, case.algorithm)
    if result.admitted:
        _check_admitted(case, result)
    else:
        assert result.reason
        assert not result.reason.startswith("assignment could not be completed"), result.reason
        assert result.pod_set in {ps.name for ps in case.pod_sets}
    shuffled = list(case.nodes)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    assert place(case.levels, shuffled, case.pod_sets, case.algorithm) == result
