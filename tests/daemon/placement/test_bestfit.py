"""BestFit and LeastFreeCapacity end to end (TAS spec 5, 6 and 12), with rows from Kueue's
`TestFindTopologyAssignments` reproduced on the same node sets (Kueue's "default", "scattered"
and "binary tree" nodes). Kueue's test names end in "; BestFit" even where the pod set is
unconstrained, which its default profile places with LeastFreeCapacity; `auto` does the same."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from daemon.placement import NodeInfo, PodSetRequest, Taint, Toleration
from daemon.placement.model import Algorithm
from tests.daemon.placement.builders import (
    BLOCK,
    GPU,
    HOST,
    ONE_LEVEL,
    RACK,
    THREE_LEVELS,
    TWO_LEVELS,
    cpu_hosts,
    domains,
    kueue_binary_tree_nodes,
    kueue_default_nodes,
    kueue_scattered_nodes,
    node,
    pod_set,
    reason,
    run,
)

Nodes = Callable[[], list[NodeInfo]]
CPU1 = {"cpu": "1"}


def default2() -> list[NodeInfo]:
    return kueue_default_nodes(TWO_LEVELS)


def default3() -> list[NodeInfo]:
    return kueue_default_nodes(THREE_LEVELS)


def three_blocks() -> list[NodeInfo]:
    return [
        node("b1", (BLOCK,), cpu="2", pods="20"),
        node("b2", (BLOCK,), cpu="1", pods="10"),
        node("b3", (BLOCK,), cpu="4", pods="40"),
    ]


def racks_of_six() -> list[NodeInfo]:
    return cpu_hosts(
        {
            "b1/r1/x3": "2",
            "b1/r2/x5": "2",
            "b1/r3/x1": "1",
            "b1/r3/x6": "1",
            "b1/r3/x2": "1",
            "b1/r3/x4": "1",
        }
    )


ADMITTED: list[tuple[str, Sequence[str], Nodes, PodSetRequest, list[tuple[str, int]]]] = [
    (
        "rack required; single pod fits in a rack",
        TWO_LEVELS,
        default2,
        pod_set(1, CPU1, required=RACK),
        [("b1/r1", 1)],
    ),
    (
        "rack required; multiple pods fit in a rack",
        TWO_LEVELS,
        default2,
        pod_set(3, CPU1, required=RACK),
        [("b1/r2", 3)],
    ),
    (
        "rack required; multiple pods fit in some racks",
        TWO_LEVELS,
        default2,
        pod_set(2, CPU1, required=RACK),
        [("b2/r2", 2)],
    ),
    (
        "block required; single pod fits in a block and a single rack",
        TWO_LEVELS,
        default2,
        pod_set(1, CPU1, required=BLOCK),
        [("b2/r1", 1)],
    ),
    (
        "block required; pods fit in a block spread across two racks",
        TWO_LEVELS,
        default2,
        pod_set(4, CPU1, required=BLOCK),
        [("b1/r1", 1), ("b1/r2", 3)],
    ),
    (
        "rack required; single pod requiring memory",
        TWO_LEVELS,
        default2,
        pod_set(4, {"memory": 1024}, required=RACK),
        [("b1/r1", 4)],
    ),
    (
        "rack preferred; but only block can accommodate the workload",
        TWO_LEVELS,
        default2,
        pod_set(4, CPU1, preferred=RACK),
        [("b1/r1", 1), ("b1/r2", 3)],
    ),
    (
        "rack preferred; but only multiple blocks can accommodate the workload",
        TWO_LEVELS,
        default2,
        pod_set(6, CPU1, preferred=RACK),
        [("b1/r1", 1), ("b1/r2", 3), ("b2/r2", 2)],
    ),
    (
        "block preferred; but only multiple blocks can accommodate the workload",
        TWO_LEVELS,
        default2,
        pod_set(6, CPU1, preferred=BLOCK),
        [("b1/r1", 1), ("b1/r2", 3), ("b2/r2", 2)],
    ),
    (
        "block preferred; pods fit in 2 blocks",
        (BLOCK,),
        three_blocks,
        pod_set(5, CPU1, preferred=BLOCK),
        [("b2", 1), ("b3", 4)],
    ),
    (
        "host required; single pod fits in the host",
        THREE_LEVELS,
        default3,
        pod_set(1, CPU1, required=HOST),
        [("x3", 1)],
    ),
    (
        "minimize the number of used racks before optimizing the number of nodes",
        THREE_LEVELS,
        racks_of_six,
        pod_set(4, CPU1, required=BLOCK),
        [("x1", 1), ("x2", 1), ("x4", 1), ("x6", 1)],
    ),
    (
        "choose the node that can accommodate all pods",
        THREE_LEVELS,
        lambda: cpu_hosts({"b1/r1/x3": "2", "b1/r1/x5": "1", "b1/r1/x1": "1"}),
        pod_set(2, CPU1, required=BLOCK),
        [("x3", 2)],
    ),
    (
        "block required; 4 pods fit into one host each",
        THREE_LEVELS,
        kueue_binary_tree_nodes,
        pod_set(4, CPU1, required=BLOCK),
        [("x3", 1), ("x5", 1), ("x1", 1), ("x6", 1)],
    ),
    (
        "unconstrained; 6 pods fit into hosts scattered across the whole datacenter",
        THREE_LEVELS,
        kueue_scattered_nodes,
        pod_set(6, CPU1, unconstrained=True),
        [("x1", 1), ("x3", 1), ("x5", 1), ("x2", 1), ("x6", 2)],
    ),
    (
        "no annotation; implied default to unconstrained",
        THREE_LEVELS,
        kueue_scattered_nodes,
        pod_set(6, CPU1, implied=True),
        [("x1", 1), ("x3", 1), ("x5", 1), ("x2", 1), ("x6", 2)],
    ),
    (
        "unconstrained; a single pod fits into each host",
        THREE_LEVELS,
        default3,
        pod_set(1, CPU1, unconstrained=True),
        [("x3", 1)],
    ),
    (
        "include usage from running non-TAS pods, found free capacity on another node",
        ONE_LEVEL,
        lambda: [
            node("x3", ONE_LEVEL, cpu="1", pods="10", used={"cpu": "600m", "pods": 1}),
            node("x5", ONE_LEVEL, cpu="1", pods="10"),
        ],
        pod_set(1, {"cpu": "600m"}, required=HOST),
        [("x5", 1)],
    ),
    (
        "allow to schedule on node with tolerated taint",
        ONE_LEVEL,
        lambda: [
            node(
                "x3",
                ONE_LEVEL,
                cpu="1",
                pods="10",
                taints=[Taint("example.com/gpu", "NoSchedule", "present")],
            )
        ],
        pod_set(
            1, CPU1, required=HOST, tolerations=(Toleration("example.com/gpu", "Equal", "present"),)
        ),
        [("x3", 1)],
    ),
    (
        "allow to schedule on node which matches node selector",
        ONE_LEVEL,
        lambda: [
            node("x3", ONE_LEVEL, cpu="1", pods="10", labels={"custom-label-1": "value-1"}),
            node("x5", ONE_LEVEL, cpu="1", pods="10", labels={"custom-label-1": "value-2"}),
        ],
        pod_set(1, CPU1, required=HOST, node_selector={"custom-label-1": "value-2"}),
        [("x5", 1)],
    ),
    (
        "taints other than NoSchedule and NoExecute do not exclude",
        ONE_LEVEL,
        lambda: [
            node("x3", ONE_LEVEL, cpu="1", pods="10", taints=[Taint("soft", "PreferNoSchedule")])
        ],
        pod_set(1, CPU1, required=HOST),
        [("x3", 1)],
    ),
]


@pytest.mark.parametrize(
    ("levels", "nodes", "request_", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in ADMITTED],
)
def test_admitted_like_kueue(
    levels: Sequence[str], nodes: Nodes, request_: PodSetRequest, expected: list[tuple[str, int]]
) -> None:
    assert domains(run(levels, nodes(), request_)) == expected


REFUSED: list[tuple[str, Sequence[str], Nodes, PodSetRequest, str]] = [
    (
        "rack required; too many pods to fit in any rack",
        TWO_LEVELS,
        default2,
        pod_set(4, CPU1, required=RACK),
        "allows to fit only 3 out of 4 pod(s)",
    ),
    (
        "block required; single pod which cannot be split",
        TWO_LEVELS,
        default2,
        pod_set(1, {"cpu": "4"}, required=BLOCK),
        'doesn\'t allow to fit any of 1 pod(s). Total nodes: 4; excluded: resource "cpu": 4',
    ),
    (
        "block required; too many pods to fit requested",
        TWO_LEVELS,
        default2,
        pod_set(5, CPU1, required=BLOCK),
        "allows to fit only 4 out of 5 pod(s)",
    ),
    (
        "block preferred; but the workload cannot be accommodated in entire topology",
        TWO_LEVELS,
        default2,
        pod_set(10, CPU1, preferred=BLOCK),
        "allows to fit only 7 out of 10 pod(s)",
    ),
    (
        "only nodes with matching levels are considered; no host label on node",
        THREE_LEVELS,
        lambda: [node("b1/r1", (BLOCK, RACK), cpu="1", pods="10")],
        pod_set(1, CPU1, required=RACK),
        "no topology domains at level: cloud.com/topology-rack",
    ),
    (
        "no assignment as node is not ready",
        ONE_LEVEL,
        lambda: [node("x3", ONE_LEVEL, cpu="1", pods="10", ready=False)],
        pod_set(1, CPU1, required=HOST),
        "no topology domains at level: kubernetes.io/hostname",
    ),
    (
        "no assignment as node is unschedulable",
        ONE_LEVEL,
        lambda: [node("x3", ONE_LEVEL, cpu="1", pods="10", unschedulable=True)],
        pod_set(1, CPU1, required=HOST),
        "no topology domains at level: kubernetes.io/hostname",
    ),
    (
        "include usage from running non-TAS pods, blocked assignment",
        ONE_LEVEL,
        lambda: [
            node("x3", ONE_LEVEL, cpu="1", memory="1Gi", pods="10", used={"cpu": "600m", "pods": 1})
        ],
        pod_set(1, {"cpu": "600m"}, required=HOST),
        'doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; excluded: resource "cpu": 1',
    ),
    (
        "node allocatable capacity completely used by non-TAS pod",
        ONE_LEVEL,
        lambda: [node("x3", ONE_LEVEL, cpu="1", pods="1", used={"cpu": "1", "pods": 1})],
        pod_set(1, {"cpu": "100m"}, required=HOST),
        'doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; excluded: resource "cpu": 1',
    ),
    (
        "include usage from non-TAS pods; pod usage",
        ONE_LEVEL,
        lambda: [node("x3", ONE_LEVEL, pods="10", used={"pods": 2})],
        pod_set(9, {"cpu": 0}, required=HOST),
        "allows to fit only 8 out of 9 pod(s)",
    ),
    (
        "no assignment as node does not have enough allocatable pods",
        ONE_LEVEL,
        lambda: [node("x3", ONE_LEVEL, cpu="1000m", pods="1", used={"cpu": "300m", "pods": 1})],
        pod_set(1, {"cpu": "300m"}, required=HOST),
        'doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; excluded: resource "pods": 1',
    ),
    (
        "resource exclusion picks most restrictive resource, ties alphabetically",
        ONE_LEVEL,
        lambda: [node("dual-shortage", ONE_LEVEL, cpu="500m", pods="10", resources={GPU: 0})],
        pod_set(1, {"cpu": "1", GPU: 1}, required=HOST),
        'doesn\'t allow to fit any of 1 pod(s). Total nodes: 1; excluded: resource "cpu": 1',
    ),
    (
        "skip node which has untolerated taint",
        ONE_LEVEL,
        lambda: [
            node(
                "x3",
                ONE_LEVEL,
                cpu="1",
                pods="10",
                taints=[Taint("example.com/gpu", "NoSchedule", "present")],
            )
        ],
        pod_set(1, CPU1, required=HOST),
        "doesn't allow to fit any of 1 pod(s). Total nodes: 1; excluded: "
        'taint "example.com/gpu=present:NoSchedule": 1',
    ),
    (
        "detailed failure message with exclusion stats",
        ONE_LEVEL,
        lambda: [
            node("x1", ONE_LEVEL, cpu="1", pods="10", taints=[Taint("key", "NoSchedule", "value")]),
            node("x2", ONE_LEVEL, cpu="1", pods="10", labels={"zone": "zone-b"}),
            node("x3", ONE_LEVEL, cpu="2", pods="10", labels={"zone": "zone-b"}),
            node("x4", ONE_LEVEL, cpu="100m", pods="10", labels={"zone": "zone-a"}),
        ],
        pod_set(1, CPU1, required=HOST, node_selector={"zone": "zone-a"}),
        "doesn't allow to fit any of 1 pod(s). Total nodes: 4; excluded: "
        'nodeSelector: 2, resource "cpu": 1, taint "key=value:NoSchedule": 1',
    ),
    (
        "skip node which doesn't match node selector, missing label",
        ONE_LEVEL,
        lambda: [node("x3", ONE_LEVEL, cpu="1", pods="10")],
        pod_set(
            1, {"cpu": "300m"}, required=HOST, node_selector={"custom-label-1": "custom-value-1"}
        ),
        "doesn't allow to fit any of 1 pod(s). Total nodes: 1; excluded: nodeSelector: 1",
    ),
    (
        "a NoExecute taint without value prints as key:effect",
        ONE_LEVEL,
        lambda: [
            node("x3", ONE_LEVEL, cpu="1", pods="10", taints=[Taint("maintenance", "NoExecute")])
        ],
        pod_set(1, CPU1, required=HOST),
        "doesn't allow to fit any of 1 pod(s). Total nodes: 1; excluded: "
        'taint "maintenance:NoExecute": 1',
    ),
]


@pytest.mark.parametrize(
    ("levels", "nodes", "request_", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in REFUSED],
)
def test_refused_with_kueue_reason(
    levels: Sequence[str], nodes: Nodes, request_: PodSetRequest, expected: str
) -> None:
    result = run(levels, nodes(), request_)
    assert reason(result) == expected
    assert result.assignments is None
    assert result.pod_set == "main"


@pytest.mark.parametrize(
    ("toleration", "tolerated"),
    [
        pytest.param(
            Toleration("gpu", "Equal", "yes", "NoSchedule"), True, id="equal key value effect"
        ),
        pytest.param(Toleration("gpu", "Equal", "no"), False, id="equal with other value"),
        pytest.param(Toleration("gpu", "Exists"), True, id="exists on the key"),
        pytest.param(Toleration("", "Exists"), True, id="empty key exists tolerates everything"),
        pytest.param(Toleration("gpu", "Exists", effect="NoExecute"), False, id="other effect"),
        pytest.param(Toleration("cpu", "Exists"), False, id="other key"),
    ],
)
def test_toleration_matching(toleration: Toleration, tolerated: bool) -> None:
    nodes = [node("x1", ONE_LEVEL, cpu="1", pods="10", taints=[Taint("gpu", "NoSchedule", "yes")])]
    result = run(ONE_LEVEL, nodes, pod_set(1, CPU1, required=HOST, tolerations=(toleration,)))
    assert result.admitted is tolerated


def test_taints_are_ignored_when_leaves_are_not_nodes() -> None:
    nodes = [node("b1/r1", TWO_LEVELS, cpu="1", pods="10", taints=[Taint("gpu", "NoSchedule")])]
    assert domains(run(TWO_LEVELS, nodes, pod_set(1, CPU1, required=RACK))) == [("b1/r1", 1)]


# Spec 5: the orders, and section 13's LeastFreeCapacity examples.
ORDERS: list[tuple[str, dict[str, str], PodSetRequest, Algorithm, list[tuple[str, int]]]] = [
    (
        "BestFit takes the roomiest hosts and best-fits the last one",
        {"h/r/a": "3", "h/r/b": "3", "h/r/c": "2", "h/r/d": "1"},
        pod_set(7, CPU1, unconstrained=True),
        "BestFit",
        [("a", 3), ("b", 3), ("d", 1)],
    ),
    (
        "LeastFreeCapacity fills the smallest hosts first",
        {"h/r/a": "3", "h/r/b": "3", "h/r/c": "2", "h/r/d": "1"},
        pod_set(7, CPU1, unconstrained=True),
        "LeastFreeCapacity",
        [("a", 3), ("b", 1), ("c", 2), ("d", 1)],
    ),
    (
        "BestFit slices of 2 on hosts 6,5,4,3,2 (KEP table)",
        {"h/r/h6": "6", "h/r/h5": "5", "h/r/h4": "4", "h/r/h3": "3", "h/r/h2": "2"},
        pod_set(12, CPU1, slices=[(HOST, 2)]),
        "BestFit",
        [("h2", 2), ("h4", 4), ("h6", 6)],
    ),
    (
        "LeastFreeCapacity slices of 2 on hosts 6,5,4,3,2 (KEP table)",
        {"h/r/h6": "6", "h/r/h5": "5", "h/r/h4": "4", "h/r/h3": "3", "h/r/h2": "2"},
        pod_set(10, CPU1, slices=[(HOST, 2)]),
        "auto",
        [("h2", 2), ("h3", 2), ("h4", 4), ("h5", 2)],
    ),
    (
        "equal capacity ties go to the smaller full path, not the smaller hostname",
        {"b1/r1/x3": "1", "b1/r2/x1": "1"},
        pod_set(1, CPU1, unconstrained=True),
        "LeastFreeCapacity",
        [("x3", 1)],
    ),
    (
        "among equal slice counts the least leftover comes first",
        {"b/r/big": "5", "b/r/tight": "4"},
        pod_set(4, CPU1, slices=[(HOST, 2)], required=BLOCK),
        "BestFit",
        [("tight", 4)],
    ),
    (
        "block required; host slices; prioritize more free slice capacity first and then tight fit",
        {"b1/r1/x3": "6", "b1/r1/x5": "5", "b1/r1/x1": "4", "b1/r1/x6": "2"},
        pod_set(12, CPU1, required=BLOCK, slices=[(HOST, 2)]),
        "BestFit",
        [("x1", 4), ("x3", 6), ("x6", 2)],
    ),
]


@pytest.mark.parametrize(
    ("hosts", "request_", "algorithm", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in ORDERS],
)
def test_orders(
    hosts: dict[str, str],
    request_: PodSetRequest,
    algorithm: Algorithm,
    expected: list[tuple[str, int]],
) -> None:
    assert domains(run(THREE_LEVELS, cpu_hosts(hosts), request_, algorithm=algorithm)) == expected


@pytest.mark.parametrize("rotation", range(4), ids=lambda r: f"rotation {r}")
@pytest.mark.parametrize(
    "request_",
    [
        pytest.param(pod_set(3, CPU1, required=BLOCK), id="required"),
        pytest.param(pod_set(3, CPU1, unconstrained=True), id="unconstrained"),
        pytest.param(pod_set(5, CPU1, preferred=RACK), id="preferred"),
    ],
)
def test_stable_tie_break_on_identical_nodes(rotation: int, request_: PodSetRequest) -> None:
    """Node order never matters: every order ends in the unique domain values (spec 5)."""
    paths = ["b1/r1/x1", "b1/r1/x2", "b1/r2/x3", "b2/r1/x4", "b2/r2/x5", "b2/r2/x6"]
    nodes = cpu_hosts(dict.fromkeys(paths, "1"))
    rotated = nodes[rotation:] + nodes[:rotation]
    assert domains(run(THREE_LEVELS, rotated, request_)) == domains(
        run(THREE_LEVELS, list(reversed(nodes)), request_)
    )


PHASES: list[tuple[str, dict[str, str], PodSetRequest, list[tuple[str, int]] | str]] = [
    (
        "required: the tightest single domain wins",
        {"b1/r1/a": "4", "b1/r2/b": "2", "b1/r2/c": "1"},
        pod_set(3, CPU1, required=RACK),
        [("b", 2), ("c", 1)],
    ),
    (
        "required: refused with the best domain's count even when the whole topology fits",
        {"b1/r1/a": "2", "b1/r2/b": "2"},
        pod_set(3, CPU1, required=RACK),
        "allows to fit only 2 out of 3 pod(s)",
    ),
    (
        "preferred: climbs one level at a time and keeps the first that fits",
        {"b1/r1/a": "2", "b1/r2/b": "2", "b2/r1/c": "1", "b2/r2/d": "1"},
        pod_set(3, CPU1, preferred=HOST),
        [("a", 2), ("b", 1)],
    ),
    (
        "preferred: spreads at the top level, last block by best fit",
        {"b1/r1/a": "3", "b2/r1/b": "2", "b3/r1/c": "1"},
        pod_set(4, CPU1, preferred=RACK),
        [("a", 3), ("c", 1)],
    ),
    (
        "unconstrained never climbs: spreads over hosts of different racks",
        {"b1/r1/a": "1", "b1/r2/b": "1", "b1/r2/c": "1"},
        pod_set(2, CPU1, unconstrained=True),
        [("a", 1), ("b", 1)],
    ),
    (
        "pooled descent re-chooses children across the chosen parents",
        {"b1/r1/a1": "3", "b1/r1/a2": "2", "b2/r1/b1": "3", "b2/r1/b2": "2"},
        pod_set(6, CPU1, preferred=BLOCK),
        [("a1", 3), ("b1", 3)],
    ),
    (
        "the nothing-fits message once nothing fits anywhere",
        {"b1/r1/a": "1"},
        pod_set(2, {"cpu": "2"}, preferred=RACK),
        'doesn\'t allow to fit any of 2 pod(s). Total nodes: 1; excluded: resource "cpu": 1',
    ),
]


@pytest.mark.parametrize(
    ("hosts", "request_", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in PHASES],
)
def test_phases(
    hosts: dict[str, str], request_: PodSetRequest, expected: list[tuple[str, int]] | str
) -> None:
    result = run(THREE_LEVELS, cpu_hosts(hosts), request_, algorithm="BestFit")
    if isinstance(expected, str):
        assert reason(result) == expected
    else:
        assert domains(result) == expected
