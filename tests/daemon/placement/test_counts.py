"""Phase 1: free capacity, pods per leaf with the `pods` resource, and aggregation up the tree
(TAS spec 2.2-2.4 and 9's leader variants)."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from daemon.placement import NodeInfo, Taint, Topology, build_topology
from daemon.placement.counts import (
    MAX_PODS,
    CountRequest,
    Counts,
    fill_counts,
    pod_requests,
    pods_that_fit,
)
from daemon.placement.reasons import Exclusions
from tests.daemon.placement.builders import BLOCK, RACK, THREE_LEVELS, cpu_hosts, node

PODS_THAT_FIT: list[tuple[str, dict[str, int], dict[str, int], tuple[int, str]]] = [
    ("cpu limits", {"cpu": 1000}, {"cpu": 3500, "pods": 10}, (3, "cpu")),
    ("pods limits", {"cpu": 100}, {"cpu": 3500, "pods": 2}, (2, "pods")),
    ("a zero request imposes no limit", {"cpu": 0}, {"pods": 7}, (7, "pods")),
    (
        "an absent resource fits none",
        {"nvidia.com/gpu": 1},
        {"cpu": 1000, "pods": 10},
        (0, "nvidia.com/gpu"),
    ),
    (
        "a resource at 0 fits none",
        {"nvidia.com/gpu": 1},
        {"nvidia.com/gpu": 0, "pods": 10},
        (0, "nvidia.com/gpu"),
    ),
    (
        "negative free capacity is clamped to 0",
        {"cpu": 1000},
        {"cpu": -500, "pods": 10},
        (0, "cpu"),
    ),
    ("no pods allocatable fits none", {"cpu": 1000}, {"cpu": 4000}, (0, "pods")),
    (
        "ties go to the alphabetically smaller resource",
        {"cpu": 1000, "memory": 1},
        {"cpu": 2000, "memory": 2, "pods": 5},
        (2, "cpu"),
    ),
    ("counts are capped at int32", {"cpu": 0}, {"pods": 2**40}, (MAX_PODS, "pods")),
]


@pytest.mark.parametrize(
    ("requests", "free", "expected"), [pytest.param(r, f, e, id=i) for i, r, f, e in PODS_THAT_FIT]
)
def test_pods_that_fit(
    requests: dict[str, int], free: dict[str, int], expected: tuple[int, str]
) -> None:
    assert pods_that_fit(pod_requests(requests), free) == expected


def test_every_pod_takes_one_pods_unit() -> None:
    assert pod_requests({"cpu": 500}) == [("cpu", 500), ("pods", 1)]
    assert pod_requests({"pods": 1, "memory": 0}) == [("pods", 2)]


def _counts(
    nodes: list[NodeInfo],
    slice_size: int = 1,
    slice_level: int = 2,
    inner: dict[int, int] | None = None,
    leader: dict[str, int] | None = None,
    assumed: dict[int, dict[str, int]] | None = None,
) -> tuple[Topology, Counts, dict[str, int], Exclusions]:
    topo = build_topology(THREE_LEVELS, nodes)
    request = CountRequest(
        requests=pod_requests({"cpu": 1000}),
        leader=pod_requests(leader) if leader is not None else None,
        slice_size=slice_size,
        slice_level=slice_level,
        inner=inner or {},
        tolerations=(),
        node_selector={},
        assumed=assumed or {},
    )
    counts, exclusions = fill_counts(topo, request)
    by_path = {"/".join(topo.values[d]): d for d in range(len(topo.values))}
    return topo, counts, by_path, exclusions


def test_pod_counts_add_up_the_tree() -> None:
    _, counts, at, _ = _counts(cpu_hosts({"b1/r1/x1": "3", "b1/r1/x2": "2", "b1/r2/x3": "4"}))
    assert [counts.pod[at[p]] for p in ("b1/r1/x1", "b1/r1", "b1/r2", "b1")] == [3, 5, 4, 9]
    # Slice size 1 at the hostname level: slices are pods.
    assert counts.slice[at["b1"]] == 9


def test_slice_counts_are_whole_slices_per_slice_level_domain() -> None:
    _, counts, at, _ = _counts(
        cpu_hosts({"b1/r1/x1": "3", "b1/r1/x2": "3", "b1/r2/x3": "5"}), slice_size=4, slice_level=1
    )
    assert counts.slice[at["b1/r1"]] == 1  # 6 pods, one whole slice of 4
    assert counts.slice[at["b1/r2"]] == 1
    assert counts.slice[at["b1"]] == 2  # sum of the racks', not floor(11 / 4)
    assert counts.slice[at["b1/r1/x1"]] == 0  # below the slice level: unused


def test_inner_layers_round_each_child_down_to_whole_inner_slices() -> None:
    _, counts, at, _ = _counts(
        cpu_hosts({"b1/r1/x1": "7", "b1/r1/x2": "4"}), slice_size=8, slice_level=1, inner={2: 4}
    )
    assert counts.pod[at["b1/r1"]] == 8  # 4 + 4, not 11
    assert counts.slice[at["b1/r1"]] == 1


def test_leader_variants() -> None:
    """Spec 9: a leaf hosts the leader when one leader pod fits; the parent keeps the best
    leader-capable child's penalty."""
    _, counts, at, _ = _counts(
        cpu_hosts({"b1/r1/h1": "2", "b1/r1/h2": "4", "b1/r1/h3": "3"}), leader={"cpu": 1000}
    )
    leaves = [at[p] for p in ("b1/r1/h1", "b1/r1/h2", "b1/r1/h3")]
    assert [counts.leader[d] for d in leaves] == [1, 1, 1]
    assert [counts.pod_wl[d] for d in leaves] == [1, 3, 2]
    rack = at["b1/r1"]
    assert (counts.pod[rack], counts.pod_wl[rack], counts.leader[rack]) == (9, 8, 1)


def test_a_parent_without_leader_capable_children_has_no_with_leader_capacity() -> None:
    _, counts, at, _ = _counts(cpu_hosts({"b1/r1/h1": "2", "b2/r1/h2": "8"}), leader={"cpu": 5000})
    assert (counts.leader[at["b1"]], counts.pod_wl[at["b1"]]) == (0, 0)
    assert (counts.leader[at["b2"]], counts.pod_wl[at["b2"]]) == (1, 3)


def test_assumed_usage_reduces_free_capacity() -> None:
    nodes = cpu_hosts({"b1/r1/x1": "4"})
    leaf = build_topology(THREE_LEVELS, nodes).leaves[0]
    _, counts, _, _ = _counts(nodes, assumed={leaf: {"cpu": 3000, "pods": 3}})
    assert counts.pod[leaf] == 1


def test_exclusions_count_leaves_that_fit_no_pod_by_limiting_resource() -> None:
    nodes = [
        node("b1/r1/x1", cpu="500m", pods="10"),
        node("b1/r1/x2", cpu="4", pods="0"),
        *cpu_hosts({"b1/r1/x3": "1"}),
    ]
    _, _, _, exclusions = _counts(nodes)
    assert exclusions.total == 3
    assert (
        exclusions.suffix() == '. Total nodes: 3; excluded: resource "cpu": 1, resource "pods": 1'
    )


@pytest.mark.parametrize("level", [BLOCK, RACK])
def test_levels_without_domains_exist_only_when_no_node_takes_part(level: str) -> None:
    topo = build_topology(THREE_LEVELS, [node("b1/r1/x1", cpu="1", pods="10", ready=False)])
    assert topo.by_level[THREE_LEVELS.index(level)] == []


# -- counts kept on the tree across charges ------------------------------------------------------


def _request(cpu: int, slice_size: int = 1, slice_level: int = 2) -> CountRequest:
    return CountRequest(
        requests=pod_requests({"cpu": cpu}),
        leader=None,
        slice_size=slice_size,
        slice_level=slice_level,
        inner={},
        tolerations=(),
        node_selector={},
        assumed={},
    )


def _numbers(counts: Counts, exclusions: Exclusions) -> tuple[object, ...]:
    return (
        counts.pod,
        counts.pod_wl,
        counts.slice,
        counts.slice_wl,
        counts.leader,
        exclusions.suffix(),
    )


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 7), min_size=1, max_size=12),  # cpu per host, whole CPUs
    st.lists(
        st.tuples(
            st.integers(0, 11),  # host charged
            st.integers(0, 3000),  # its pod's millicores
            st.sampled_from([(500, 1, 2), (1000, 2, 2), (1500, 2, 1), (250, 3, 0)]),
        ),
        max_size=25,
    ),
    st.booleans(),
)
def test_counts_kept_on_the_tree_match_counts_from_scratch(
    cpus: list[int],
    steps: list[tuple[int, int, tuple[int, int, int]]],
    taint_some: bool,
) -> None:
    """Whatever the order of charges and placements, the counts a tree keeps for a shape are
    those of a tree built afresh from the nodes with the charged usage, exclusions included."""
    taint = Taint("gpu", "NoSchedule", "true")
    nodes = [
        node(
            f"b{i % 2}/r{i % 4}/x{i}",
            cpu=str(cpu),
            pods=2 + i % 3,
            taints=(taint,) if taint_some and i % 5 == 0 else (),
        )
        for i, cpu in enumerate(cpus)
    ]
    used = {n.name: {"cpu": 0, "pods": 0} for n in nodes}
    kept = build_topology(THREE_LEVELS, nodes)

    def same_as_rebuilt(request: CountRequest) -> None:
        rebuilt = build_topology(
            THREE_LEVELS, [msgspec.structs.replace(n, used=used[n.name]) for n in nodes]
        )
        assert _numbers(*fill_counts(kept, request)) == _numbers(*fill_counts(rebuilt, request))

    for host, millicores, (cpu, slice_size, slice_level) in steps:
        same_as_rebuilt(_request(cpu, slice_size, slice_level))
        name = nodes[host % len(nodes)].name
        leaf = kept.leaf_of.get(name)
        if leaf is not None:
            kept.charge(leaf, {"cpu": millicores})
            used[name]["cpu"] += millicores
            used[name]["pods"] += 1
    for _, _, (cpu, slice_size, slice_level) in steps:
        same_as_rebuilt(_request(cpu, slice_size, slice_level))


def test_phase_two_writes_into_a_copy_of_the_kept_counts() -> None:
    topo = build_topology(THREE_LEVELS, cpu_hosts({"b1/r1/x1": 4, "b1/r1/x2": 2}))
    counts, exclusions = fill_counts(topo, _request(1000))
    counts.pod[0] = -1
    exclusions.add_resource("cpu")
    again, excluded = fill_counts(topo, _request(1000))
    assert again.pod[0] == 6
    assert excluded.resources == {}
