"""Several pod sets in one request (TAS spec 8): placed in order, each seeing the usage the
earlier ones assumed; all or nothing."""

from __future__ import annotations

from daemon.placement import NodeInfo
from tests.daemon.placement.builders import (
    BLOCK,
    HOST,
    ONE_LEVEL,
    RACK,
    THREE_LEVELS,
    TWO_LEVELS,
    domains,
    node,
    pod_set,
    reason,
    run,
)

CPU1 = {"cpu": "1"}


def multipod_nodes(levels: tuple[str, ...]) -> list[NodeInfo]:
    """Kueue's `multipodNodeset`."""
    small = {"cpu": "10", "memory": "1Gi", "pods": "10"}
    paths = ["b1/r1/x3", "b1/r2/x5", "b1/r2/x1", "b1/r2/x6", "b2/r1/x2"]
    nodes = [
        node("/".join(p.split("/")[: len(levels)]), levels, name=p, resources=small) for p in paths
    ]
    nodes.append(
        node(
            "/".join(["b2", "r2", "x4"][: len(levels)]),
            levels,
            name="b2/r2/x4",
            cpu="20",
            memory="4Gi",
            pods="40",
        )
    )
    return nodes


def test_assumed_pod_usage_counts_against_allocatable_pods() -> None:
    """Kueue: "multiple PodSets account assumed pod usage against allocatable pods"."""
    nodes = [node("x1", ONE_LEVEL, cpu="2", pods="1")]
    one = pod_set(1, CPU1, name="one", required=HOST)
    two = pod_set(1, CPU1, name="two", required=HOST)
    result = run(ONE_LEVEL, nodes, one, two)
    assert (
        reason(result)
        == 'doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; excluded: resource "pods": 1'
    )
    assert result.pod_set == "two"
    assert result.assignments is None
    assert run(ONE_LEVEL, nodes, one).admitted


def test_two_podsets_with_overlapping_domain() -> None:
    nodes = [node(b, (BLOCK,), cpu="2", pods="10") for b in ("b1", "b2", "b3")]
    first = pod_set(3, CPU1, name="podset1", preferred=BLOCK)
    second = pod_set(3, CPU1, name="podset2", preferred=BLOCK)
    result = run((BLOCK,), nodes, first, second)
    assert domains(result, "podset1") == [("b1", 2), ("b2", 1)]
    assert domains(result, "podset2") == [("b2", 1), ("b3", 2)]


def test_rack_required_for_both_with_different_requests() -> None:
    result = run(
        TWO_LEVELS,
        multipod_nodes(TWO_LEVELS),
        pod_set(2, CPU1, name="podset1", required=RACK),
        pod_set(1, {"memory": 1024}, name="podset2", required=RACK),
    )
    assert domains(result, "podset1") == [("b1/r1", 2)]
    assert domains(result, "podset2") == [("b1/r1", 1)]


def test_block_required_for_one_and_unconstrained_for_another() -> None:
    result = run(
        THREE_LEVELS,
        multipod_nodes(THREE_LEVELS),
        pod_set(8, CPU1, name="podset1", required=BLOCK),
        pod_set(2, CPU1, name="podset2", unconstrained=True),
    )
    assert domains(result, "podset1") == [("x2", 8)]
    assert domains(result, "podset2") == [("x2", 2)]


def test_temporary_state_does_not_leak_across_pod_sets() -> None:
    nodes = [
        node("x1", ONE_LEVEL, name="n1", cpu="4", memory="4Gi", pods="10"),
        node("x2", ONE_LEVEL, name="n2", cpu="4", memory="4Gi", pods="10"),
    ]
    requests = {"cpu": "1", "memory": "1000"}
    first = pod_set(1, requests, name="ps1", implied=True)
    second = pod_set(1, requests, name="ps2", implied=True, node_selector={"never": "match"})
    assert domains(run(ONE_LEVEL, nodes, first), "ps1") == [("x1", 1)]
    result = run(ONE_LEVEL, nodes, first, second)
    assert (
        reason(result)
        == "doesn't allow to fit any of 1 pod(s). Total nodes: 2; excluded: nodeSelector: 2"
    )
    assert result.pod_set == "ps2"


def test_first_failing_unit_stops_the_pass_and_names_its_first_pod_set() -> None:
    nodes = [node("b1/r1/x1", cpu="2", pods="10")]
    result = run(
        THREE_LEVELS,
        nodes,
        pod_set(1, CPU1, name="fits", required=HOST),
        pod_set(1, {"cpu": "1"}, name="leader", group="g", required=HOST),
        pod_set(4, {"cpu": "1"}, name="workers", group="g", required=HOST),
        pod_set(1, CPU1, name="never-tried", required=HOST),
    )
    assert result.pod_set == "leader"
    assert reason(result) == "allows to fit only 1 out of 4 pod(s)"


def test_a_group_assumes_both_leader_and_worker_usage() -> None:
    nodes = [node("b1/r1/x1", cpu="4", pods="10"), node("b1/r1/x2", cpu="4", pods="10")]
    result = run(
        THREE_LEVELS,
        nodes,
        pod_set(1, {"cpu": "2"}, name="leader", group="g", required=RACK),
        pod_set(2, {"cpu": "2"}, name="workers", group="g", required=RACK),
        pod_set(2, {"cpu": "1"}, name="after", required=HOST),
    )
    # x1 takes the leader and one worker, x2 one worker: only x2 has room left for "after".
    assert domains(result, "leader") == [("x1", 1)]
    assert domains(result, "workers") == [("x1", 1), ("x2", 1)]
    assert domains(result, "after") == [("x2", 2)]


def test_assignments_keep_request_order() -> None:
    nodes = [node("b1/r1/x1", cpu="8", pods="10")]
    result = run(
        THREE_LEVELS,
        nodes,
        pod_set(1, CPU1, name="zeta", required=HOST),
        pod_set(1, CPU1, name="alpha", required=HOST),
    )
    assert result.assignments is not None
    assert list(result.assignments) == ["zeta", "alpha"]
