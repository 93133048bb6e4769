"""Composite groups (KEP-6012): the child groups of a CompositePodGroup admitted together, the
set inside one domain of its level and each group inside one of its own; the leader groups
bound first while the workers' room is held for them."""

from __future__ import annotations

import msgspec

from events.intents import Patch
from tests.daemon.controllers.gang_builders import (
    BLOCK,
    CLUSTER,
    RACK,
    binds,
    blocker,
    composite,
    composite_workload,
    key,
    members,
    nodes,
    podgroup,
)
from tests.daemon.controllers.world import GangWorld

# 2 blocks × 2 racks × 2 hosts × 8 GPUs: 16 GPUs a rack, 32 a block.
TOPOLOGY = "blocks=2,racks=2,hosts=2,gpus=8"
WORKLOAD = key("w", "Workload")


def tree_world(
    *, leader: bool = True, worker_pods: int = 2, taken: tuple[str, ...] = ("b0-r0-h0", "b0-r0-h1")
) -> GangWorld:
    """A set of a leader group (1 pod of 4 GPUs) and two worker groups (2 pods of 4 GPUs each),
    each group inside one rack, the set inside one block; the `taken` hosts are full (rack 0 of
    block 0 by default, so that block 0 has 16 GPUs free and block 1 32)."""
    world = GangWorld(nodes(TOPOLOGY))
    world.add(*(blocker(f"b-{host}", host, 8) for host in taken))
    templates = ["leader", "workers"] if leader else ["main", "workers"]
    world.add(composite_workload("w", templates), composite("w-a0", 3, "w", BLOCK))
    head = templates[0]
    world.add(
        podgroup("lead", 1, workload="w", template=head, parent="w-a0", topology_key=RACK),
        *members("lead", 1, gpus=4),
    )
    for i in range(2):
        name = f"work{i}"
        world.add(
            podgroup(name, 2, workload="w", template="workers", parent="w-a0", topology_key=RACK),
            *members(name, worker_pods, gpus=4),
        )
    return world


def test_the_whole_set_goes_into_one_block_and_the_leader_first() -> None:
    world = tree_world()
    first = world.run(WORKLOAD)
    bound = binds(first)
    assert set(bound) == {"lead-00"}, "only the leader is bound first"
    assert world.state.nodes[f"{CLUSTER}//{bound['lead-00']}"].labels[BLOCK] == "b1"
    held = {p.name: p.nominated for p in world.state.pods.values() if p.nominated}
    assert set(held) == {"work0-00", "work0-01", "work1-00", "work1-01"}
    assert {world.state.nodes[f"{CLUSTER}//{n}"].labels[BLOCK] for n in held.values()} == {"b1"}
    assert world.condition("work0")["message"].startswith("WaitingForLeader:")
    assert first is not None
    assert first.reason.startswith("Admitted: CompositePodGroup w-a0: 3 group(s), 5 pod(s)")

    leader = world.pod("lead-00")
    world.observe(msgspec.structs.replace(leader, phase="Running", rv="9"))
    second = world.run(WORKLOAD)
    placed = binds(second)
    assert set(placed) == {"work0-00", "work0-01", "work1-00", "work1-01"}
    for group in ("work0", "work1"):
        racks = {world.rack_of(n) for p, n in placed.items() if p.startswith(group)}
        assert len(racks) == 1, f"{group} inside one rack"
    blocks = {world.state.nodes[f"{CLUSTER}//{n}"].labels[BLOCK] for n in placed.values()}
    assert blocks == {"b1"}


def test_without_a_leader_the_set_is_bound_in_one_decision() -> None:
    world = tree_world(leader=False)
    decision = world.run(WORKLOAD)
    assert len(binds(decision)) == 5


def test_a_set_missing_a_groups_pods_binds_nothing() -> None:
    world = tree_world(worker_pods=1)
    decision = world.run(WORKLOAD)
    assert not binds(decision)
    assert decision.reason.startswith(
        "NotEnoughMembers: waiting for minGroupCount 3 group(s) of CompositePodGroup w-a0"
    )
    # Logged, not written: no group had a condition to correct.
    assert not [i for i in decision.intents if isinstance(i, Patch)]
    assert world.condition("lead") == {}


def test_a_set_no_block_holds_binds_nothing_and_says_why() -> None:
    full = ("b0-r0-h0", "b0-r0-h1", "b0-r1-h0", "b0-r1-h1", "b1-r0-h0", "b1-r1-h0")
    world = tree_world(taken=full)  # block 0 full, block 1 half: 16 GPUs free, 20 wanted
    decision = world.run(WORKLOAD)
    assert not binds(decision)
    message = world.condition("work1")["message"]
    assert message == (
        "CompositeUnschedulable: CompositePodGroup w-a0: no cloud.provider.com/topology-block "
        "has room for its 3 group(s)"
    )


def test_the_groups_wait_for_their_composite() -> None:
    world = GangWorld(nodes(TOPOLOGY))
    world.add(
        composite_workload("w", ["a"]),
        podgroup("g", 1, workload="w", template="a", parent="w-a0"),
        *members("g", 1),
    )
    decision = world.run(WORKLOAD)
    assert decision is not None
    assert decision.reason == "WaitingForParent: CompositePodGroup ns/w-a0 not seen"
    assert not binds(decision)
