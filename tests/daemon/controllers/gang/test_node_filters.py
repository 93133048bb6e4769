"""Members' nodeSelector and tolerations: a gang goes only to nodes its pods would accept."""

from __future__ import annotations

import msgspec
import pytest

from events.objects import Node, NodeSelectorRequirement, Pod, Taint, Toleration
from tests.daemon.controllers.gang_builders import RACK, binds, key, members, nodes, podgroup
from tests.daemon.controllers.world import GangWorld

GPU_TAINT = Taint("nvidia.com/gpu", "NoSchedule", "present")


def cluster(*, pool_b_tainted: bool = False) -> list[Node]:
    """Two racks of two 8-GPU hosts; rack b0-r0 is pool a, rack b0-r1 pool b."""
    found = []
    for node in nodes():
        pool = "a" if node.labels[RACK] == "b0-r0" else "b"
        taints = (GPU_TAINT,) if pool_b_tainted and pool == "b" else ()
        found.append(
            msgspec.structs.replace(node, labels={**node.labels, "pool": pool}, taints=taints)
        )
    return found


def group(
    count: int, *, selector: dict[str, str] | None = None, tolerate: bool = False
) -> list[Pod]:
    tolerations = (Toleration("nvidia.com/gpu", "Exists", "", "NoSchedule"),) if tolerate else ()
    return [
        msgspec.structs.replace(p, node_selector=selector or {}, tolerations=tolerations)
        for p in members("g", count)
    ]


@pytest.mark.parametrize(
    ("tainted", "selector", "tolerate", "count", "racks"),
    [
        # nodeSelector: only pool b, though pool a would fit the gang too.
        (False, {"pool": "b"}, False, 8, {"b0-r1"}),
        (False, {"pool": "a"}, False, 16, {"b0-r0"}),
        # A taint the members do not tolerate keeps them out of pool b...
        (True, None, False, 16, {"b0-r0"}),
        # ...and a toleration lets them in.
        (True, {"pool": "b"}, True, 16, {"b0-r1"}),
    ],
)
def test_members_land_only_on_nodes_they_accept(
    tainted: bool, selector: dict[str, str] | None, tolerate: bool, count: int, racks: set[str]
) -> None:
    world = GangWorld(cluster(pool_b_tainted=tainted))
    world.add(podgroup("g", count), *group(count, selector=selector, tolerate=tolerate))
    decision = world.run(key("g"))
    assert decision is not None
    assert len(binds(decision)) == count
    assert {world.rack_of(node) for node in world.placed("g").values()} <= racks


@pytest.mark.parametrize(
    ("tainted", "selector", "count", "reason"),
    [
        # 16 GPUs in pool a, 17 asked: placement says how many fit.
        (False, {"pool": "a"}, 17, "TopologyPlacementFailed"),
        # The only nodes the selector names are tainted and not tolerated.
        (True, {"pool": "b"}, 2, "TopologyPlacementFailed"),
        # No node carries the label at all.
        (False, {"pool": "c"}, 1, "TopologyPlacementFailed"),
    ],
)
def test_a_gang_no_accepted_node_can_hold_binds_nothing(
    tainted: bool, selector: dict[str, str], count: int, reason: str
) -> None:
    world = GangWorld(cluster(pool_b_tainted=tainted))
    world.add(podgroup("g", count), *group(count, selector=selector))
    decision = world.run(key("g"))
    assert decision is not None
    assert binds(decision) == {}
    assert world.condition("g")["message"].startswith(f"{reason}: ")


def test_required_node_affinity_confines_the_gang() -> None:
    world = GangWorld(cluster())
    terms = ((NodeSelectorRequirement("pool", "In", ("b",)),),)
    pods = [msgspec.structs.replace(p, node_affinity=terms) for p in members("g", 8)]
    world.add(podgroup("g", 8), *pods)
    decision = world.run(key("g"))
    assert decision is not None
    assert len(binds(decision)) == 8
    assert {world.rack_of(node) for node in world.placed("g").values()} == {"b0-r1"}


def test_required_node_affinity_no_node_satisfies_binds_nothing() -> None:
    world = GangWorld(cluster())
    terms = ((NodeSelectorRequirement("pool", "NotIn", ("a", "b")),),)
    pods = [msgspec.structs.replace(p, node_affinity=terms) for p in members("g", 2)]
    world.add(podgroup("g", 2), *pods)
    decision = world.run(key("g"))
    assert decision is not None
    assert binds(decision) == {}
    message = world.condition("g")["message"]
    assert message.startswith("TopologyPlacementFailed: ")
    assert "nodeSelector: 4" in message
