"""TAS spec section 13: the edge cases worth a test, one row each (several are also covered
where their rule lives; these keep the list in one place)."""

from __future__ import annotations

import pytest

from daemon.placement import PodSetRequest
from daemon.placement.model import Algorithm
from tests.daemon.placement.builders import (
    BLOCK,
    GPU,
    RACK,
    THREE_LEVELS,
    TWO_LEVELS,
    cpu_hosts,
    domains,
    node,
    pod_set,
    reason,
    run,
)

CPU1 = {"cpu": "1"}


def test_a_pod_set_with_count_0_gets_an_assignment_with_no_domains() -> None:
    result = run(THREE_LEVELS, cpu_hosts({"b1/r1/x1": "1"}), pod_set(0, CPU1, required=RACK))
    assert result.admitted
    assert result.assignments is not None
    assert result.assignments["main"].domains == ()


def test_node_order_does_not_matter() -> None:
    hosts = {"b1/r1/x1": "2", "b1/r1/x2": "2", "b1/r2/x3": "2", "b2/r1/x4": "2"}
    nodes = cpu_hosts(hosts)
    request = pod_set(5, CPU1, preferred=RACK)
    assert domains(run(THREE_LEVELS, nodes, request)) == domains(
        run(THREE_LEVELS, nodes[::-1], request)
    )


def test_same_rack_name_under_two_blocks_is_two_domains() -> None:
    nodes = cpu_hosts({"b1/r1/x1": "2", "b2/r1/x2": "2"})
    assert (
        reason(run(THREE_LEVELS, nodes, pod_set(3, CPU1, required=RACK)))
        == "allows to fit only 2 out of 3 pod(s)"
    )


def test_multiple_nodes_per_leaf_sum_their_capacity() -> None:
    nodes = [node("b1/r1", TWO_LEVELS, name=f"n{i}", cpu="1", pods="10") for i in range(3)]
    assert domains(run(TWO_LEVELS, nodes, pod_set(3, CPU1, required=RACK))) == [("b1/r1", 3)]


def test_a_request_with_cpu_0_is_limited_by_pods_and_other_resources() -> None:
    nodes = [node("b1/r1/x1", cpu="0", pods="3", resources={GPU: "8"})]
    assert reason(run(THREE_LEVELS, nodes, pod_set(4, {"cpu": 0, GPU: 1}, required=RACK))) == (
        "allows to fit only 3 out of 4 pod(s)"
    )


@pytest.mark.parametrize(
    "allocatable",
    [
        pytest.param({"cpu": "8", "pods": "10"}, id="node lacks the resource"),
        pytest.param({"cpu": "8", "pods": "10", GPU: "0"}, id="resource at 0"),
    ],
)
def test_an_extended_resource_a_node_lacks_fits_no_pod(allocatable: dict[str, str]) -> None:
    nodes = [node("b1/r1/x1", resources=allocatable)]
    assert reason(run(THREE_LEVELS, nodes, pod_set(1, {GPU: 1}, required=RACK))) == (
        f'doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; excluded: resource "{GPU}": 1'
    )


def test_usage_above_allocatable_is_clamped_to_zero() -> None:
    nodes = [
        node("b1/r1/x1", cpu="2", pods="10", used={"cpu": "3"}),
        node("b1/r1/x2", cpu="2", pods="10"),
    ]
    assert domains(run(THREE_LEVELS, nodes, pod_set(2, CPU1, required=RACK))) == [("x2", 2)]


CLIMBING: list[tuple[str, dict[str, str], PodSetRequest, Algorithm, list[tuple[str, int]]]] = [
    (
        "preferred climbs until one domain fits",
        {"b1/r1/x1": "2", "b1/r2/x2": "2", "b2/r1/x3": "1"},
        pod_set(4, CPU1, preferred=RACK),
        "auto",
        [("x1", 2), ("x2", 2)],
    ),
    (
        "at the top it spreads greedily and best-fits the last domain",
        {"b1/r1/x1": "3", "b2/r1/x2": "2", "b3/r1/x3": "1"},
        pod_set(4, CPU1, preferred=RACK),
        "auto",
        [("x1", 3), ("x3", 1)],
    ),
    (
        "unconstrained never climbs and spreads over leaves",
        {"b1/r1/x1": "1", "b2/r1/x2": "1", "b2/r1/x3": "5"},
        pod_set(3, CPU1, unconstrained=True),
        "BestFit",
        [("x3", 3)],
    ),
    (
        "LeastFreeCapacity: 7 pods on 3, 3, 2, 1 places 1, 2, 3, 1",
        {"h/r/a": "3", "h/r/b": "3", "h/r/c": "2", "h/r/d": "1"},
        pod_set(7, CPU1, unconstrained=True),
        "auto",
        [("a", 3), ("b", 1), ("c", 2), ("d", 1)],
    ),
    (
        "ties at equal capacity go to the smaller full path (b1/r1/x3 over b1/r2/x1)",
        {"b1/r1/x3": "1", "b1/r2/x1": "1", "b1/r2/x5": "1"},
        pod_set(1, CPU1, unconstrained=True),
        "LeastFreeCapacity",
        [("x3", 1)],
    ),
]


@pytest.mark.parametrize(
    ("hosts", "request_", "algorithm", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in CLIMBING],
)
def test_search_edge_cases(
    hosts: dict[str, str],
    request_: PodSetRequest,
    algorithm: Algorithm,
    expected: list[tuple[str, int]],
) -> None:
    assert domains(run(THREE_LEVELS, cpu_hosts(hosts), request_, algorithm=algorithm)) == expected


def test_only_nodes_missing_a_level_means_no_domains() -> None:
    nodes = [node("b1/r1", (BLOCK, RACK), cpu="4", pods="10")]
    assert reason(run(THREE_LEVELS, nodes, pod_set(1, CPU1, unconstrained=True))) == (
        "no topology domains at level: kubernetes.io/hostname"
    )
