"""The domain tree (TAS spec 1 and 2.1) and the output shape (spec 7)."""

from __future__ import annotations

import pytest

from daemon.placement import NodeInfo, build_topology
from tests.daemon.placement.builders import (
    BLOCK,
    HOST,
    ONE_LEVEL,
    RACK,
    THREE_LEVELS,
    TWO_LEVELS,
    cpu_hosts,
    domains,
    levels_of,
    node,
    pod_set,
    run,
)

CPU1 = {"cpu": "1"}


def leaf_paths(nodes: list[NodeInfo], levels: tuple[str, ...] = THREE_LEVELS) -> list[str]:
    topo = build_topology(levels, nodes)
    return ["/".join(topo.values[leaf]) for leaf in topo.leaves]


@pytest.mark.parametrize(
    ("extra", "takes_part"),
    [
        pytest.param({}, True, id="ready, schedulable, fully labelled"),
        pytest.param({"ready": False}, False, id="not ready"),
        pytest.param({"unschedulable": True}, False, id="unschedulable"),
    ],
)
def test_which_nodes_take_part(extra: dict[str, bool], takes_part: bool) -> None:
    nodes = [node("b1/r1/x1", cpu="1", pods="10", **extra), node("b1/r1/x2", cpu="1", pods="10")]  # type: ignore[arg-type]
    assert ("b1/r1/x1" in leaf_paths(nodes)) is takes_part


def test_a_node_missing_any_level_label_is_ignored() -> None:
    nodes = [
        node("b1/r1/x1", cpu="1", pods="10"),
        NodeInfo(
            "no-host", labels={BLOCK: "b1", RACK: "r1"}, allocatable={"cpu": 1000, "pods": 10}
        ),
        NodeInfo(
            "no-rack", labels={BLOCK: "b1", HOST: "x9"}, allocatable={"cpu": 1000, "pods": 10}
        ),
    ]
    assert leaf_paths(nodes) == ["b1/r1/x1"]


def test_same_rack_name_under_two_blocks_is_two_domains() -> None:
    nodes = cpu_hosts({"b1/r1/x1": "1", "b2/r1/x2": "1"})
    topo = build_topology(THREE_LEVELS, nodes)
    assert [topo.values[d] for d in topo.by_level[1]] == [("b1", "r1"), ("b2", "r1")]
    # A rack-required pod set cannot combine the two r1 racks.
    result = run(THREE_LEVELS, nodes, pod_set(2, CPU1, required=RACK))
    assert result.reason == "allows to fit only 1 out of 2 pod(s)"


def test_nodes_with_the_same_tuple_merge_when_the_lowest_level_is_not_the_hostname() -> None:
    nodes = [
        node("b1/r1", TWO_LEVELS, name="n1", cpu="500m", pods="10"),
        node("b1/r1", TWO_LEVELS, name="n2", cpu="500m", pods="10"),
    ]
    topo = build_topology(TWO_LEVELS, nodes)
    assert len(topo.leaves) == 1
    assert topo.free[topo.leaves[0]] == {"cpu": 1000, "pods": 20}
    # Two half-free nodes hold one 1-CPU pod between them: the approximation Kueue makes.
    assert domains(run(TWO_LEVELS, nodes, pod_set(1, CPU1, required=RACK))) == [("b1/r1", 1)]


def test_each_hostname_is_its_own_leaf() -> None:
    nodes = cpu_hosts({"b1/r1/x1": "1", "b1/r1/x2": "1"})
    assert leaf_paths(nodes) == ["b1/r1/x1", "b1/r1/x2"]
    topo = build_topology(THREE_LEVELS, nodes)
    assert [topo.domain_id(leaf) for leaf in topo.leaves] == ["x1", "x2"]
    assert topo.domain_id(topo.by_level[1][0]) == "b1,r1"


def test_free_capacity_is_allocatable_minus_used() -> None:
    nodes = [node("b1/r1/x1", cpu="4", pods="10", used={"cpu": "1500m", "pods": 2})]
    topo = build_topology(THREE_LEVELS, nodes)
    assert topo.free[topo.leaves[0]] == {"cpu": 2500, "pods": 8}


# Spec 7: levels and values of the assignment.
def test_hostname_lowest_gives_only_the_hostname_level() -> None:
    result = run(THREE_LEVELS, cpu_hosts({"b1/r1/x1": "2"}), pod_set(2, CPU1, required=RACK))
    assert levels_of(result) == (HOST,)
    assert domains(result) == [("x1", 2)]


def test_other_lowest_levels_give_every_level_and_full_values() -> None:
    nodes = [node("b1/r1", TWO_LEVELS, cpu="2", pods="10")]
    result = run(TWO_LEVELS, nodes, pod_set(2, CPU1, required=RACK))
    assert levels_of(result) == TWO_LEVELS
    assert domains(result) == [("b1/r1", 2)]


def test_domains_come_in_topology_path_order_not_hostname_order() -> None:
    nodes = cpu_hosts({"b1/r2/x1": "1", "b1/r1/x3": "1", "b2/r1/x0": "1"})
    result = run(THREE_LEVELS, nodes, pod_set(3, CPU1, unconstrained=True))
    assert domains(result) == [("x3", 1), ("x1", 1), ("x0", 1)]


def test_a_single_hostname_level_topology() -> None:
    nodes = cpu_hosts({"a": "1", "b": "2"}, levels=ONE_LEVEL)
    result = run(ONE_LEVEL, nodes, pod_set(3, CPU1, required=HOST))
    assert result.reason == "allows to fit only 2 out of 3 pod(s)"
    assert domains(run(ONE_LEVEL, nodes, pod_set(3, CPU1, preferred=HOST))) == [("a", 1), ("b", 2)]
