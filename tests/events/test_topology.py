"""The topology tree: which nodes take part, capacity and usage per domain, kept incrementally.

Scenarios are sequences of node and pod changes applied to a `Topology` the way the fold
applies them (node keys ``cluster//name``, pod keys ``cluster/namespace/name``); each states
the complete expected capacity, usage, membership and per-node usage afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass

import msgspec
import pytest
from msgspec.structs import replace

from events.objects import Node, Pod, object_key
from events.state import State, decode_state, encode_state
from events.topology import Topology, charge_of
from tests.events.builders import BLOCK, GPU, HOST, RACK, make_node, make_pod

Amounts = dict[str, int]

A: Amounts = {"cpu": 4000, "pods": 10}  # the allocatable of most nodes here
BIG: Amounts = {"cpu": 8000, GPU: 8, "pods": 20}
REQ: Amounts = {"cpu": 1000}  # what most pods here request
P: Amounts = {"cpu": 1000, "pods": 1}  # what such a pod is charged


def times(amounts: Amounts, k: int) -> Amounts:
    return {name: value * k for name, value in amounts.items()}


def plus(*parts: Amounts) -> Amounts:
    total: Amounts = {}
    for part in parts:
        for name, value in part.items():
            total[name] = total.get(name, 0) + value
    return {name: value for name, value in total.items() if value}


@dataclass(frozen=True)
class NodeUp:
    node: Node
    cluster: str = "c1"


@dataclass(frozen=True)
class NodeGone:
    name: str
    cluster: str = "c1"


@dataclass(frozen=True)
class PodUp:
    pod: Pod
    cluster: str = "c1"


@dataclass(frozen=True)
class PodGone:
    name: str
    namespace: str = "ns"
    cluster: str = "c1"


Step = NodeUp | NodeGone | PodUp | PodGone


def apply(topology: Topology, steps: list[Step]) -> Topology:
    pods: dict[str, Pod] = {}  # what the fold's pod table would hold: each pod's last version
    for step in steps:
        if isinstance(step, NodeUp):
            key = object_key(step.cluster, "", step.node.name)
            topology.set_node(step.cluster, key, step.node)
        elif isinstance(step, NodeGone):
            topology.set_node(step.cluster, object_key(step.cluster, "", step.name), None)
        elif isinstance(step, PodUp):
            key = object_key(step.cluster, step.pod.namespace, step.pod.name)
            topology.charge_pod(step.cluster, key, pods.get(key), step.pod)
            pods[key] = step.pod
        else:
            key = object_key(step.cluster, step.namespace, step.name)
            topology.charge_pod(step.cluster, key, pods.pop(key, None), None)
    return topology


def assert_canonical(topology: Topology) -> None:
    """Equal usage has one representation: no zero amounts, no empty maps, no zero counts, and
    a leaf's usage only in its nodes' `node_used`."""
    for table in (topology.capacity, topology.used, topology.node_used):
        for amounts in table.values():
            assert amounts
            assert all(amounts.values())
    assert all(count > 0 for count in topology.members.values())
    assert set(topology.paths) == set(topology.node_capacity)
    leaves: dict[str, set[str]] = {}
    for node_key, node_path in topology.paths.items():
        leaves.setdefault(node_path[-1], set()).add(node_key)
    assert topology.leaf_nodes == leaves
    assert not set(topology.used) & set(leaves)


def path(cluster: str, *values: str) -> list[str]:
    """The domain ids from the widest level down to the leaf."""
    return [f"{cluster}/{','.join(values[: i + 1])}" for i in range(len(values))]


def on(domains: list[str], amounts: Amounts) -> dict[str, Amounts]:
    return {domain: dict(amounts) for domain in domains}


def node(name: str, **kwargs: object) -> NodeUp:
    cluster = str(kwargs.pop("cluster", "c1"))
    kwargs.setdefault("allocatable", A)
    return NodeUp(make_node(name, **kwargs), cluster)  # type: ignore[arg-type]


def pod(name: str, node_name: str = "", **kwargs: object) -> PodUp:
    cluster = str(kwargs.pop("cluster", "c1"))
    kwargs.setdefault("requests", REQ)
    kwargs.setdefault("phase", "Running" if node_name else "Pending")
    return PodUp(make_pod(name, node=node_name, **kwargs), cluster)  # type: ignore[arg-type]


B1, R1 = "c1/b1", "c1/b1,r1"
L1, L2, L3 = "c1/b1,r1,n1", "c1/b1,r1,n2", "c1/b1,r1,n3"
N1, N2 = "c1//n1", "c1//n2"


@dataclass(frozen=True)
class Expect:
    capacity: dict[str, Amounts]
    used: dict[str, Amounts]
    members: dict[str, int]
    node_used: dict[str, Amounts]


NOTHING = Expect({}, {}, {}, {})

SCENARIOS = [
    pytest.param(
        [node("n1"), node("n2")],
        Expect(
            capacity={B1: times(A, 2), R1: times(A, 2), L1: A, L2: A},
            used={},
            members={B1: 2, R1: 2, L1: 1, L2: 1},
            node_used={},
        ),
        id="two-nodes-one-rack",
    ),
    pytest.param(
        [node("n1"), node("n2", rack="r2"), node("n3", block="b2", rack="r1", allocatable=BIG)],
        Expect(
            capacity={
                B1: times(A, 2),
                R1: A,
                L1: A,
                "c1/b1,r2": A,
                "c1/b1,r2,n2": A,
                "c1/b2": BIG,
                "c1/b2,r1": BIG,
                "c1/b2,r1,n3": BIG,
            },
            used={},
            members={
                B1: 2,
                R1: 1,
                L1: 1,
                "c1/b1,r2": 1,
                "c1/b1,r2,n2": 1,
                "c1/b2": 1,
                "c1/b2,r1": 1,
                "c1/b2,r1,n3": 1,
            },
            node_used={},
        ),
        id="racks-and-blocks-same-rack-name-in-two-blocks",
    ),
    pytest.param(
        [node("n1"), node("n2"), pod("p1", "n1"), pod("p2", "n2"), pod("p3", "n2")],
        Expect(
            capacity={B1: times(A, 2), R1: times(A, 2), L1: A, L2: A},
            used={B1: times(P, 3), R1: times(P, 3), L1: P, L2: times(P, 2)},
            members={B1: 2, R1: 2, L1: 1, L2: 1},
            node_used={N1: P, N2: times(P, 2)},
        ),
        id="pods-charge-requests-plus-one-pod",
    ),
    pytest.param(
        [node("n1"), node("n2"), pod("p1", "n1"), node("n1", ready=False)],
        Expect(
            capacity={B1: A, R1: A, L2: A},
            used={},
            members={B1: 1, R1: 1, L2: 1},
            node_used={N1: P},
        ),
        id="not-ready-removes-capacity-and-usage",
    ),
    pytest.param(
        [
            node("n1"),
            node("n2"),
            pod("p1", "n1"),
            node("n1", ready=False),
            node("n1", ready=True),
        ],
        Expect(
            capacity={B1: times(A, 2), R1: times(A, 2), L1: A, L2: A},
            used={B1: P, R1: P, L1: P},
            members={B1: 2, R1: 2, L1: 1, L2: 1},
            node_used={N1: P},
        ),
        id="ready-again-restores-capacity-and-usage",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1"), node("n1", ready=False), pod("p2", "n1"), node("n1")],
        Expect(
            capacity={B1: A, R1: A, L1: A},
            used=on([B1, R1, L1], times(P, 2)),
            members={B1: 1, R1: 1, L1: 1},
            node_used={N1: times(P, 2)},
        ),
        id="pods-bound-while-not-ready-arrive-with-node",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1"), node("n1", unschedulable=True)],
        Expect({}, {}, {}, {N1: P}),
        id="cordon-removes-node",
    ),
    pytest.param(
        [pod("p1", "n1"), pod("p2", "n1", phase="Pending")],
        Expect({}, {}, {}, {N1: times(P, 2)}),
        id="pods-on-unknown-node-charged-to-node-used",
    ),
    pytest.param(
        [pod("p1", "n1"), node("n2"), node("n1")],
        Expect(
            capacity={B1: times(A, 2), R1: times(A, 2), L1: A, L2: A},
            used={B1: P, R1: P, L1: P},
            members={B1: 2, R1: 2, L1: 1, L2: 1},
            node_used={N1: P},
        ),
        id="node-joining-later-brings-its-usage",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1"), pod("p1", "n1", phase="Succeeded")],
        Expect(on([B1, R1, L1], A), {}, {B1: 1, R1: 1, L1: 1}, {}),
        id="succeeded-frees",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1"), pod("p1", "n1", phase="Failed")],
        Expect(on([B1, R1, L1], A), {}, {B1: 1, R1: 1, L1: 1}, {}),
        id="failed-frees",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1"), PodGone("p1")],
        Expect(on([B1, R1, L1], A), {}, {B1: 1, R1: 1, L1: 1}, {}),
        id="deleted-frees",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1", deletion_ts=5)],
        Expect(on([B1, R1, L1], A), on([B1, R1, L1], P), {B1: 1, R1: 1, L1: 1}, {N1: P}),
        id="terminating-pod-still-holds",
    ),
    pytest.param(
        [node("n1"), node("n2"), pod("p1", "n1"), PodGone("p1"), pod("p1", "n2")],
        Expect(
            capacity={B1: times(A, 2), R1: times(A, 2), L1: A, L2: A},
            used={B1: P, R1: P, L2: P},
            members={B1: 2, R1: 2, L1: 1, L2: 1},
            node_used={N2: P},
        ),
        id="recreated-on-another-node",
    ),
    pytest.param(
        [node("n1"), pod("p1"), pod("p2", phase="Pending")],
        Expect(on([B1, R1, L1], A), {}, {B1: 1, R1: 1, L1: 1}, {}),
        id="unbound-pods-not-charged",
    ),
    pytest.param(
        [node("n1"), pod("p1"), pod("p1", "n1", phase="Pending")],
        Expect(on([B1, R1, L1], A), on([B1, R1, L1], P), {B1: 1, R1: 1, L1: 1}, {N1: P}),
        id="binding-charges-pending-but-bound",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1"), pod("p1", "n1", requests={"cpu": 2500, "memory": 64})],
        Expect(
            on([B1, R1, L1], A),
            on([B1, R1, L1], {"cpu": 2500, "memory": 64, "pods": 1}),
            {B1: 1, R1: 1, L1: 1},
            {N1: {"cpu": 2500, "memory": 64, "pods": 1}},
        ),
        id="requests-resize",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1", requests={"cpu": 1000, GPU: 0})],
        Expect(on([B1, R1, L1], A), on([B1, R1, L1], P), {B1: 1, R1: 1, L1: 1}, {N1: P}),
        id="zero-request-not-stored",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1", requests={"cpu": 1000, GPU: 0}), PodGone("p1")],
        Expect(on([B1, R1, L1], A), {}, {B1: 1, R1: 1, L1: 1}, {}),
        id="zero-request-pod-leaves-cleanly",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1", requests={})],
        Expect(
            on([B1, R1, L1], A),
            on([B1, R1, L1], {"pods": 1}),
            {B1: 1, R1: 1, L1: 1},
            {N1: {"pods": 1}},
        ),
        id="best-effort-pod-takes-one-pod",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1"), node("n1", allocatable=BIG)],
        Expect(on([B1, R1, L1], BIG), on([B1, R1, L1], P), {B1: 1, R1: 1, L1: 1}, {N1: P}),
        id="allocatable-change",
    ),
    pytest.param(
        [node("n1", allocatable={"cpu": 4000, GPU: 0, "hugepages-1Gi": 0, "pods": 10})],
        Expect(on([B1, R1, L1], A), {}, {B1: 1, R1: 1, L1: 1}, {}),
        id="zero-allocatable-not-stored",
    ),
    pytest.param(
        [node("n1"), node("n2"), pod("p1", "n1"), node("n1", rack="r2")],
        Expect(
            capacity={
                B1: times(A, 2),
                R1: A,
                L2: A,
                "c1/b1,r2": A,
                "c1/b1,r2,n1": A,
            },
            used=on([B1, "c1/b1,r2", "c1/b1,r2,n1"], P),
            members={B1: 2, R1: 1, L2: 1, "c1/b1,r2": 1, "c1/b1,r2,n1": 1},
            node_used={N1: P},
        ),
        id="relabel-moves-capacity-and-usage",
    ),
    pytest.param(
        [node("n1"), pod("p1", "n1"), NodeGone("n1")],
        Expect({}, {}, {}, {N1: P}),
        id="node-deleted-pods-still-charged-to-it",
    ),
    pytest.param(
        [node("n1"), node("n1", deletion_ts=1234)],
        NOTHING,
        id="deleting-node-leaves",
    ),
    pytest.param(
        [node("n1", allocatable={"cpu": 4000, "pods": 1}), pod("p1", "n1"), pod("p2", "n1")],
        Expect(
            on([B1, R1, L1], {"cpu": 4000, "pods": 1}),
            on([B1, R1, L1], times(P, 2)),
            {B1: 1, R1: 1, L1: 1},
            {N1: times(P, 2)},
        ),
        id="overcommit-is-recorded",
    ),
    pytest.param(
        [node("n1", cluster="c1"), node("n1", cluster="c2"), pod("p1", "n1", cluster="c2")],
        Expect(
            capacity={**on(path("c1", "b1", "r1", "n1"), A), **on(path("c2", "b1", "r1", "n1"), A)},
            used=on(path("c2", "b1", "r1", "n1"), P),
            members={d: 1 for d in path("c1", "b1", "r1", "n1") + path("c2", "b1", "r1", "n1")},
            node_used={"c2//n1": P},
        ),
        id="two-clusters-same-names-do-not-mix",
    ),
    pytest.param(
        [
            node("n1"),
            node("n2", rack="r2"),
            node("n3", block="b2"),
            pod("p1", "n1"),
            pod("p2", "n2"),
            pod("p3", "n9"),
            pod("p4", "n1", cluster="c2"),
            pod("p5"),
            node("n2", ready=False),
            pod("p1", "n1", phase="Succeeded"),
            PodGone("p2"),
            PodGone("p3"),
            PodGone("p4", cluster="c2"),
            PodGone("p5"),
            PodGone("p1"),
            NodeGone("n1"),
            NodeGone("n2"),
            NodeGone("n3"),
        ],
        NOTHING,
        id="everything-gone-leaves-nothing",
    ),
]


@pytest.mark.parametrize(("steps", "expect"), SCENARIOS)
def test_scenario(steps: list[Step], expect: Expect) -> None:
    topology = apply(Topology(), steps)
    assert topology.capacity == expect.capacity
    assert topology.domain_usage() == expect.used
    for domain in {*expect.used, *expect.capacity}:
        assert topology.used_of(domain) == expect.used.get(domain, {})
    assert topology.members == expect.members
    assert topology.node_used == expect.node_used
    assert_canonical(topology)
    if expect == NOTHING:
        assert (topology.paths, topology.node_capacity, topology.node_pods) == ({}, {}, {})


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"ready": False}, id="not-ready"),
        pytest.param({"unschedulable": True}, id="unschedulable"),
        pytest.param({"deletion_ts": 1}, id="deleting"),
        pytest.param({"block": None}, id="no-block-label"),
        pytest.param({"rack": None}, id="no-rack-label"),
        pytest.param({"host": None}, id="no-hostname-label"),
        pytest.param({"labels": {}}, id="no-labels"),
    ],
)
def test_node_that_does_not_take_part(change: dict[str, object]) -> None:
    topology = Topology()
    n1 = make_node("n1", **change)  # type: ignore[arg-type]
    assert topology.path_for("c1", n1) is None
    assert topology.set_node("c1", N1, n1) is False
    assert (topology.capacity, topology.members, topology.paths) == ({}, {}, {})
    assert topology.leaf_of(N1) is None


def test_path_for_participating_node() -> None:
    topology = Topology()
    assert topology.path_for("c1", make_node("n1", block="b3", rack="r7")) == (
        "c1/b3",
        "c1/b3,r7",
        "c1/b3,r7,n1",
    )


@pytest.mark.parametrize(
    ("levels", "steps", "capacity", "members"),
    [
        pytest.param(
            (RACK, HOST),
            [node("n1", block=None), node("n2", block=None), node("n3", rack=None)],
            {"c1/r1": times(A, 2), "c1/r1,n1": A, "c1/r1,n2": A},
            {"c1/r1": 2, "c1/r1,n1": 1, "c1/r1,n2": 1},
            id="rack-and-hostname",
        ),
        pytest.param(
            (BLOCK, RACK),
            [node("n1"), node("n2"), node("n3", rack="r2"), node("n4", rack=None)],
            {B1: times(A, 3), R1: times(A, 2), "c1/b1,r2": A},
            {B1: 3, R1: 2, "c1/b1,r2": 1},
            id="rack-lowest-merges-hosts-into-one-leaf",
        ),
        pytest.param(
            (HOST,),
            [node("n1", block=None, rack=None), node("n2")],
            {"c1/n1": A, "c1/n2": A},
            {"c1/n1": 1, "c1/n2": 1},
            id="hostname-only",
        ),
    ],
)
def test_custom_levels(
    levels: tuple[str, ...],
    steps: list[Step],
    capacity: dict[str, Amounts],
    members: dict[str, int],
) -> None:
    topology = apply(Topology(levels=levels), steps)
    assert topology.capacity == capacity
    assert topology.members == members
    assert_canonical(topology)


def test_custom_levels_charge_pods_to_merged_leaf() -> None:
    topology = apply(
        Topology(levels=(BLOCK, RACK)),
        [node("n1"), node("n2"), pod("p1", "n1"), pod("p2", "n2")],
    )
    assert topology.domain_usage() == {B1: times(P, 2), R1: times(P, 2)}
    assert topology.used == {B1: times(P, 2)}  # the leaf's usage is its nodes'
    assert topology.free(R1) == plus(times(A, 2), times(P, -2))
    assert_canonical(topology)


@pytest.mark.parametrize(
    ("domain", "free"),
    [
        pytest.param(B1, {"cpu": 5000, "pods": 17}, id="block"),
        pytest.param(L1, {"cpu": 1000, "pods": 7}, id="leaf-with-usage"),
        pytest.param(L2, A, id="leaf-without-usage"),
        pytest.param("c1/b9", {}, id="unknown-domain"),
        pytest.param("c2/b1", {}, id="other-cluster"),
    ],
)
def test_free(domain: str, free: Amounts) -> None:
    topology = apply(
        Topology(),
        [
            node("n1"),
            node("n2"),
            pod("p1", "n1", requests={"cpu": 3000}),
            pod("p2", "n1", requests={}),
            pod("p3", "n1", requests={}),
        ],
    )
    assert topology.free(domain) == free


def test_free_is_negative_when_overcommitted() -> None:
    topology = apply(Topology(), [node("n1"), pod("p1", "n1", requests={"cpu": 5000, GPU: 1})])
    assert topology.free(L1) == {"cpu": -1000, "pods": 9, GPU: -1}


def test_free_returns_a_copy() -> None:
    topology = apply(Topology(), [node("n1")])
    topology.free(L1)["cpu"] = 0
    assert topology.capacity[L1] == A


def test_queries() -> None:
    topology = apply(
        Topology(),
        [node("n1"), node("n2", rack="r2"), node("n3", block="b2"), node("n4", ready=False)],
    )
    assert topology.leaf_of(N1) == L1
    assert topology.leaf_of("c1//n4") is None
    assert topology.leaf_of("c1//missing") is None
    assert topology.domains_at(0) == ["c1/b1", "c1/b2"]
    assert topology.domains_at(1) == ["c1/b1,r1", "c1/b1,r2", "c1/b2,r1"]
    assert topology.domains_at(2) == ["c1/b1,r1,n1", "c1/b1,r2,n2", "c1/b2,r1,n3"]


@pytest.mark.parametrize(
    ("before", "after", "moved"),
    [
        pytest.param(None, make_node("n1"), True, id="join"),
        pytest.param(make_node("n1"), make_node("n1", rv="2"), False, id="same-path-and-capacity"),
        pytest.param(make_node("n1"), make_node("n1", allocatable=BIG), True, id="capacity"),
        pytest.param(make_node("n1"), make_node("n1", rack="r2"), True, id="relabel"),
        pytest.param(make_node("n1"), make_node("n1", ready=False), True, id="leave"),
        pytest.param(make_node("n1"), None, True, id="delete"),
        pytest.param(None, make_node("n1", ready=False), False, id="never-took-part"),
        pytest.param(make_node("n1", ready=False), None, False, id="delete-non-member"),
    ],
)
def test_set_node_reports_moves(before: Node | None, after: Node | None, moved: bool) -> None:
    topology = Topology()
    topology.set_node("c1", N1, before)
    assert topology.set_node("c1", N1, after) is moved


@pytest.mark.parametrize(
    ("before", "after", "moved"),
    [
        pytest.param(None, make_pod("p", node="n1"), True, id="bind"),
        pytest.param(make_pod("p", node="n1"), make_pod("p", node="n1", rv="2"), False, id="same"),
        pytest.param(
            make_pod("p", node="n1"),
            make_pod("p", node="n1", phase="Running"),
            False,
            id="pending-to-running",
        ),
        pytest.param(
            make_pod("p", node="n1"), make_pod("p", node="n1", phase="Failed"), True, id="fail"
        ),
        pytest.param(make_pod("p"), make_pod("p", rv="2"), False, id="unbound-stays-unbound"),
        pytest.param(make_pod("p", node="n1"), None, True, id="delete"),
        pytest.param(None, make_pod("p"), False, id="create-unbound"),
        pytest.param(make_pod("p", node="n1", phase="Failed"), None, False, id="delete-finished"),
        pytest.param(make_pod("p", node="n1"), make_pod("p", node="n2"), True, id="other-node"),
        pytest.param(
            make_pod("p", node="n1", requests={"cpu": 1}),
            make_pod("p", node="n1", requests={"cpu": 2}),
            True,
            id="resize",
        ),
        pytest.param(
            make_pod("p", node="n1", phase="Failed"),
            make_pod("p", node="n1", phase="Succeeded"),
            False,
            id="finished-stays-finished",
        ),
    ],
)
def test_charge_pod_reports_moves(before: Pod | None, after: Pod | None, moved: bool) -> None:
    topology = Topology()
    topology.charge_pod("c1", "c1/ns/p", None, before)
    assert topology.charge_pod("c1", "c1/ns/p", before, after) is moved


@pytest.mark.parametrize(
    ("phase", "node_name", "deletion_ts", "charged"),
    [
        pytest.param("Pending", "", None, False, id="pending-unbound"),
        pytest.param("Pending", "n1", None, True, id="pending-bound"),
        pytest.param("Running", "n1", None, True, id="running"),
        pytest.param("Unknown", "n1", None, True, id="unknown-phase"),
        pytest.param("Running", "n1", 99, True, id="terminating"),
        pytest.param("Succeeded", "n1", None, False, id="succeeded"),
        pytest.param("Failed", "n1", None, False, id="failed"),
    ],
)
def test_which_pods_are_charged(
    phase: str, node_name: str, deletion_ts: int | None, charged: bool
) -> None:
    topology = Topology()
    p = make_pod("p", node=node_name, phase=phase, requests=REQ, deletion_ts=deletion_ts)
    topology.charge_pod("c1", "c1/ns/p", None, p)
    assert charge_of("c1", p) == ((N1, REQ) if charged else None)
    assert topology.node_pods == ({N1: {"c1/ns/p"}} if charged else {})
    assert topology.node_used == ({N1: P} if charged else {})


@pytest.mark.parametrize(
    "levels",
    [pytest.param((BLOCK, RACK, HOST), id="hosts"), pytest.param((BLOCK, RACK), id="racks")],
)
def test_snapshot_that_kept_leaf_usage_in_used_loads(levels: tuple[str, ...]) -> None:
    """Snapshots written before leaves stopped having their own `used` entry (and before
    `leaf_nodes`, and with a `charges` table) load into the current representation, equal to
    a fresh fold."""
    steps: list[Step] = [node("n1"), node("n2"), node("n3", rack="r2"), pod("p1", "n1")]
    steps += [pod("p2", "n2"), pod("p3", "n3", requests={GPU: 2})]
    topology = apply(Topology(levels=levels), steps)
    old = replace(topology, used=topology.domain_usage(), leaf_nodes={})
    assert old.used != topology.used
    # They also held each bound pod's Charge, [node key, requests].
    body = msgspec.msgpack.decode(encode_state(State(topology=old)))
    body["topology"]["charges"] = {"c1/ns/p1": [N1, REQ], "c1/ns/p2": [N2, REQ]}
    loaded = decode_state(msgspec.msgpack.encode(body)).topology
    assert loaded == topology
    assert_canonical(loaded)
