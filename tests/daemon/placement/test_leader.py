"""Leader + workers groups (TAS spec 9), as rows of Kueue's grouped pod set test cases."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from daemon.placement import NodeInfo, PodSetRequest
from tests.daemon.placement.builders import (
    BLOCK,
    GPU,
    HOST,
    ONE_LEVEL,
    RACK,
    THREE_LEVELS,
    cpu_hosts,
    domains,
    node,
    pod_set,
    reason,
    run,
)

ZONE = "cloud.com/topology-zone"
RACK_HOST = (RACK, HOST)
G = "g"


def leader(requests: dict[str, str | int], **topology: object) -> PodSetRequest:
    return pod_set(1, requests, name="leader", group=G, **topology)  # type: ignore[arg-type]


def workers(count: int, requests: dict[str, str | int], **topology: object) -> PodSetRequest:
    return pod_set(count, requests, name="workers", group=G, **topology)  # type: ignore[arg-type]


def blocks(**capacities: dict[str, str]) -> list[NodeInfo]:
    return [
        node(name, (BLOCK,), pods="10", resources=capacity) for name, capacity in capacities.items()
    ]


def small_and_large() -> list[NodeInfo]:
    return [
        node("b1/small/small-used", cpu="2800m", pods="10", used={"cpu": "2500m", "pods": 1}),
        node("b1/small/small-free", cpu="2800m", pods="10"),
        node("b1/large/large-free", cpu="6", pods="10"),
    ]


def gpu_and_cpu_hosts(levels: Sequence[str], cpu_host: str, gpu_host: str) -> list[NodeInfo]:
    return [
        node(cpu_host, levels, cpu="1", pods="10"),
        node(gpu_host, levels, pods="10", resources={GPU: "1"}),
    ]


ADMITTED: list[
    tuple[
        str,
        Sequence[str],
        list[NodeInfo],
        list[PodSetRequest],
        list[tuple[str, int]],
        list[tuple[str, int]],
    ]
] = [
    (
        "sliced workers; hostname slicing with a lower leader requirement",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x1": "5", "b1/r1/x2": "5"}),
        [
            leader({"cpu": "1"}, required=BLOCK),
            workers(4, {"cpu": "2"}, required=BLOCK, slices=[(HOST, 2)]),
        ],
        [("x1", 1)],
        [("x1", 2), ("x2", 2)],
    ),
    (
        "sliced workers; multi-layer slicing constraints on workers",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x1": "5", "b1/r1/x2": "5", "b1/r2/x3": "5", "b1/r2/x4": "5"}),
        [
            leader({"cpu": "1"}, required=BLOCK),
            workers(8, {"cpu": "2"}, required=BLOCK, slices=[(RACK, 4), (HOST, 2)]),
        ],
        [("x1", 1)],
        [("x1", 2), ("x2", 2), ("x3", 2), ("x4", 2)],
    ),
    (
        "two podsets with the same group",
        (BLOCK,),
        blocks(
            b1={"cpu": "2", GPU: "2", "memory": "2Gi"},
            b2={"cpu": "5", GPU: "4"},
            b3={"cpu": "2", GPU: "2"},
        ),
        [leader({"cpu": "1"}, required=BLOCK), workers(4, {"cpu": "1", GPU: 1}, required=BLOCK)],
        [("b2", 1)],
        [("b2", 4)],
    ),
    (
        "preserves worker capacity when placing leader",
        RACK_HOST,
        cpu_hosts({"r1/h1": "2", "r1/h2": "4", "r1/h3": "3"}, levels=RACK_HOST),
        [leader({"cpu": "1"}, required=RACK), workers(4, {"cpu": "2"}, required=RACK)],
        [("h3", 1)],
        [("h1", 1), ("h2", 2), ("h3", 1)],
    ),
    (
        "sliced grouped podsets preserve worker capacity when placing leader",
        RACK_HOST,
        cpu_hosts({"r1/h1": "2", "r1/h2": "4", "r1/h3": "3"}, levels=RACK_HOST),
        [
            leader({"cpu": "1"}, required=RACK),
            workers(8, {"cpu": "1"}, required=RACK, slices=[(HOST, 2)]),
        ],
        [("h3", 1)],
        [("h1", 2), ("h2", 4), ("h3", 2)],
    ),
    (
        "preferred grouped podsets preserve capacity across domains",
        ONE_LEVEL,
        cpu_hosts({"h1": "8", "h2": "3"}, levels=ONE_LEVEL),
        [leader({"cpu": "1"}, preferred=HOST), workers(5, {"cpu": "2"}, preferred=HOST)],
        [("h2", 1)],
        [("h1", 4), ("h2", 1)],
    ),
    (
        "unconstrained grouped podsets spread leader and worker across domains",
        ONE_LEVEL,
        gpu_and_cpu_hosts(ONE_LEVEL, "h1", "h2"),
        # Equal counts: the first listed pod set is the workers, the second the leader.
        [
            pod_set(1, {"cpu": "1"}, name="leader", group=G, unconstrained=True),
            pod_set(1, {GPU: 1}, name="workers", group=G, unconstrained=True),
        ],
        [("h1", 1)],
        [("h2", 1)],
    ),
    (
        "grouped podsets preserve the leader below the slice level",
        RACK_HOST,
        gpu_and_cpu_hosts(RACK_HOST, "r1/leader-host", "r1/worker-host"),
        [
            pod_set(1, {"cpu": "1"}, name="leader", group=G, required=RACK, slices=[(RACK, 1)]),
            pod_set(1, {GPU: 1}, name="workers", group=G, required=RACK, slices=[(RACK, 1)]),
        ],
        [("leader-host", 1)],
        [("worker-host", 1)],
    ),
    (
        "domains that can tightly fit leader and workers",
        (BLOCK,),
        blocks(b1={"cpu": "2", GPU: "2"}, b2={"cpu": "8", GPU: "8"}, b3={"cpu": "2", GPU: "2"}),
        [leader({"cpu": "1"}, required=BLOCK), workers(4, {"cpu": "1", GPU: 2}, required=BLOCK)],
        [("b2", 1)],
        [("b2", 4)],
    ),
    (
        "skips a domain where only workers fit without the leader",
        THREE_LEVELS,
        small_and_large(),
        [leader({"cpu": "2500m"}, required=RACK), workers(1, {"cpu": "2500m"}, required=RACK)],
        [("large-free", 1)],
        [("large-free", 1)],
    ),
    (
        "skips a domain where mixed-size workers only fit without the leader",
        THREE_LEVELS,
        small_and_large(),
        [leader({"cpu": "2500m"}, required=RACK), workers(2, {"cpu": "500m"}, required=RACK)],
        [("large-free", 1)],
        [("large-free", 2)],
    ),
    (
        "keeps a tight domain when leader and workers fit together",
        THREE_LEVELS,
        small_and_large(),
        [leader({"cpu": "1"}, required=RACK), workers(1, {"cpu": "1"}, required=RACK)],
        [("small-free", 1)],
        [("small-free", 1)],
    ),
    (
        "optimizes the domain for both leader and workers",
        (BLOCK,),
        blocks(b1={"cpu": "11", GPU: "8"}, b2={"cpu": "4", GPU: "4"}),
        [leader({"cpu": "1"}, required=BLOCK), workers(4, {"cpu": "1", GPU: 1}, required=BLOCK)],
        [("b1", 1)],
        [("b1", 4)],
    ),
    (
        "BestFit: podset group workers spread across hosts",
        THREE_LEVELS,
        [
            node("b1/r1/x1", cpu="20", pods="10", resources={GPU: "4"}),
            node("b1/r1/x2", cpu="20", pods="10", resources={GPU: "2"}),
            node("b1/r1/x3", cpu="20", pods="10", resources={GPU: "2"}),
            node("b1/r1/x4", cpu="20", pods="10", resources={GPU: "2"}),
        ],
        [
            leader({"cpu": "1"}, preferred=BLOCK),
            workers(6, {"cpu": "1", GPU: 1}, preferred=BLOCK, slices=[(HOST, 2)]),
        ],
        [("x1", 1)],
        [("x1", 4), ("x2", 2)],
    ),
    (
        "two podsets with the same group - multiple hosts",
        THREE_LEVELS,
        [
            node("b1/r1/x3", cpu="2", pods="10", resources={GPU: "1"}),
            node("b1/r1/x5", cpu="2", pods="10", resources={GPU: "1"}),
            node("b1/r1/x1", cpu="2", pods="10", resources={GPU: "1"}),
            node("b2/r4/x6", cpu="1", pods="10", resources={GPU: "1"}),
            node("b2/r5/x2", cpu="2", pods="10", resources={GPU: "1"}),
            node("b2/r6/x4", cpu="2", pods="10", resources={GPU: "1"}),
        ],
        [leader({"cpu": "2"}, required=BLOCK), workers(2, {"cpu": "1", GPU: 1}, required=BLOCK)],
        [("x1", 1)],
        [("x3", 1), ("x5", 1)],
    ),
    (
        "same resources and nodes in the same rack",
        THREE_LEVELS,
        [
            node(path, cpu="1", pods="10", resources={GPU: "1"})
            for path in (
                "b1/r1/x3",
                "b1/r1/x5",
                "b1/r2/x1",
                "b1/r2/x6",
                "b2/r3/x2",
                "b2/r3/x4",
                "b2/r4/x7",
                "b2/r4/x8",
            )
        ],
        [
            leader({"cpu": "1", GPU: 1}, required=BLOCK),
            workers(2, {"cpu": "1", GPU: 1}, required=BLOCK),
        ],
        [("x3", 1)],
        [("x5", 1), ("x1", 1)],
    ),
    (
        "optimize the last domain for LWS using BestFit",
        (ZONE, RACK, HOST),
        [
            node("dom1/rack1/dom1-node", (ZONE, RACK, HOST), cpu="10", memory="10Gi", pods="10"),
            node("dom2/rack2/dom2-node", (ZONE, RACK, HOST), cpu="6", memory="10Gi", pods="10"),
        ],
        [
            leader({"cpu": "1", "memory": "1Gi"}, required=ZONE, slices=[(RACK, 1)]),
            workers(5, {"cpu": "1", "memory": "1Gi"}, required=ZONE, slices=[(RACK, 1)]),
        ],
        [("dom2-node", 1)],
        [("dom2-node", 5)],
    ),
    (
        "the leader may be listed after the workers",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x1": "5", "b1/r1/x2": "5"}),
        [
            workers(4, {"cpu": "2"}, required=BLOCK, slices=[(HOST, 2)]),
            leader({"cpu": "1"}, required=BLOCK),
        ],
        [("x1", 1)],
        [("x1", 2), ("x2", 2)],
    ),
]


@pytest.mark.parametrize(
    ("levels", "nodes", "pod_sets", "leader_domains", "worker_domains"),
    [pytest.param(*row[1:], id=row[0]) for row in ADMITTED],
)
def test_leader_and_workers(
    levels: Sequence[str],
    nodes: list[NodeInfo],
    pod_sets: list[PodSetRequest],
    leader_domains: list[tuple[str, int]],
    worker_domains: list[tuple[str, int]],
) -> None:
    result = run(levels, nodes, *pod_sets)
    assert domains(result, "leader") == leader_domains
    assert domains(result, "workers") == worker_domains


REFUSED: list[tuple[str, Sequence[str], list[NodeInfo], list[PodSetRequest], str]] = [
    (
        "same group - no fit: the message counts worker pods and ignores the leader",
        (BLOCK,),
        blocks(b1={"cpu": "1", GPU: "0"}, b2={"cpu": "4", GPU: "4"}),
        [leader({"cpu": "1"}, required=BLOCK), workers(4, {"cpu": "1", GPU: 1}, required=BLOCK)],
        "allows to fit only 4 out of 4 pod(s). Total nodes: 2; excluded: "
        'resource "example.com/gpu": 1',
    ),
    (
        "same group - leader does not fit anywhere",
        (BLOCK,),
        blocks(b1={"cpu": "4", GPU: "4"}, b2={"cpu": "4", GPU: "4"}),
        [leader({"cpu": "10"}, required=BLOCK), workers(4, {"cpu": "1", GPU: 1}, required=BLOCK)],
        "allows to fit only 4 out of 4 pod(s)",
    ),
    (
        "spreading at the top level without any leader-capable domain reports leaders placed",
        (BLOCK,),
        blocks(b1={"cpu": "2"}, b2={"cpu": "2"}),
        [leader({"cpu": "3"}, preferred=BLOCK), workers(3, {"cpu": "1"}, preferred=BLOCK)],
        "doesn't allow to fit any of 3 pod(s)",
    ),
]


@pytest.mark.parametrize(
    ("levels", "nodes", "pod_sets", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in REFUSED],
)
def test_group_refused(
    levels: Sequence[str], nodes: list[NodeInfo], pod_sets: list[PodSetRequest], expected: str
) -> None:
    result = run(levels, nodes, *pod_sets)
    assert reason(result) == expected
    assert result.pod_set == pod_sets[0].name


def test_leader_pod_counts_once_on_a_shared_leaf() -> None:
    """The leader's leaf may hold workers too; the leader's pod takes its room first."""
    nodes = cpu_hosts({"b1/r1/x1": "3"})
    result = run(
        THREE_LEVELS,
        nodes,
        leader({"cpu": "1"}, required=HOST),
        workers(2, {"cpu": "1"}, required=HOST),
    )
    assert domains(result, "leader") == [("x1", 1)]
    assert domains(result, "workers") == [("x1", 2)]
    too_many = run(
        THREE_LEVELS,
        nodes,
        leader({"cpu": "1"}, required=HOST),
        workers(3, {"cpu": "1"}, required=HOST),
    )
    assert reason(too_many) == "allows to fit only 3 out of 3 pod(s)"
