"""What the fold keeps for gangs (`gang.projection`): members per PodGroup, the waiting set, and
which keys a change makes dirty."""

from __future__ import annotations

import msgspec
import pytest

from events import fold
from events.state import decode_state, encode_state
from tests.daemon.controllers.gang_builders import (
    CLUSTER,
    NS,
    SCHEDULER,
    T0,
    blocker,
    key,
    member,
    members,
    nodes,
    podgroup,
    workload,
)
from tests.daemon.controllers.world import GangWorld

UNSCHEDULABLE = [
    {
        "type": "PodGroupScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "TopologyPlacementFailed: ...",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
]


def test_members_are_indexed_by_group_until_deleted() -> None:
    world = GangWorld()
    world.add(*members("g", 2), member("other", "h"), member("alone", ""))
    assert world.state.group_members == {
        f"{CLUSTER}/{NS}/g": {f"{CLUSTER}/{NS}/g-00", f"{CLUSTER}/{NS}/g-01"},
        f"{CLUSTER}/{NS}/h": {f"{CLUSTER}/{NS}/other"},
    }
    world.set_pod("g-00", phase="Failed")  # finished pods stay members until deleted
    assert len(world.state.group_members[f"{CLUSTER}/{NS}/g"]) == 2
    world.remove(world.pod("g-00"))
    world.remove(world.pod("other"))
    assert world.state.group_members == {f"{CLUSTER}/{NS}/g": {f"{CLUSTER}/{NS}/g-01"}}


def test_members_are_counted_by_the_scheduler_they_name_until_deleted() -> None:
    world = GangWorld()
    world.add(
        *members("g", 2),
        member("g-other", "g", scheduler="default-scheduler"),
        member("h-0", "h", scheduler="default-scheduler"),
    )
    g, h = f"{CLUSTER}/{NS}/g", f"{CLUSTER}/{NS}/h"
    assert world.state.group_schedulers == {
        g: {SCHEDULER: 2, "default-scheduler": 1},
        h: {"default-scheduler": 1},
    }
    world.set_pod("g-00", phase="Succeeded")  # finished pods still count
    world.remove(world.pod("g-other"))
    world.remove(world.pod("h-0"))
    assert world.state.group_schedulers == {g: {SCHEDULER: 2}}
    restored = decode_state(encode_state(world.state))
    assert restored.group_schedulers == world.state.group_schedulers


def test_a_snapshot_from_before_the_scheduler_counts_gets_them_rebuilt() -> None:
    world = GangWorld()
    world.add(*members("g", 2), member("h-0", "h", scheduler="default-scheduler"))
    raw = msgspec.msgpack.decode(encode_state(world.state))
    del raw["group_schedulers"]
    restored = fold.restored(decode_state(msgspec.msgpack.encode(raw)))
    assert restored.group_schedulers == world.state.group_schedulers != {}


def test_groups_are_indexed_by_the_workload_they_were_made_from_until_deleted() -> None:
    world = GangWorld()
    world.add(
        podgroup("w-a", 1, workload="w", template="a"),
        podgroup("w-b", 1, workload="w", template="b"),
        podgroup("v-a", 1, workload="v", template="a"),
        podgroup("alone", 1),
    )
    assert world.state.workload_groups == {
        f"{CLUSTER}/{NS}/w": {f"{CLUSTER}/{NS}/w-a", f"{CLUSTER}/{NS}/w-b"},
        f"{CLUSTER}/{NS}/v": {f"{CLUSTER}/{NS}/v-a"},
    }
    world.remove(world.group("w-a"))
    world.remove(world.group("v-a"))
    assert world.state.workload_groups == {f"{CLUSTER}/{NS}/w": {f"{CLUSTER}/{NS}/w-b"}}


def test_a_member_change_dirties_its_group_and_the_groups_workload() -> None:
    world = GangWorld()
    world.add(workload("w", ["main"]), podgroup("w-main", 1, workload="w", template="main"))
    dirty = world.observe(member("p", "w-main"), "ADDED")
    assert {key("w-main"), key("w", "Workload")} <= dirty
    dirty = world.observe(podgroup("w-main", 2, workload="w", template="main"))
    assert key("w", "Workload") in dirty


def test_only_groups_marked_unschedulable_wait() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("waiting", 4, conditions=UNSCHEDULABLE), podgroup("fine", 4))
    assert world.state.waiting_gangs == {CLUSTER: [(0, T0, f"{CLUSTER}/{NS}/waiting")]}
    world.observe(podgroup("waiting", 4))  # condition gone
    assert world.state.waiting_gangs == {}


def test_released_room_and_new_nodes_wake_waiting_groups_and_nothing_else_does() -> None:
    world = GangWorld(nodes())
    world.add(
        workload("w", ["main"]),
        podgroup("w-main", 4, workload="w", template="main", conditions=UNSCHEDULABLE),
        *members("w-main", 4),
        blocker("b", "b0-r0-h0", 4),
    )
    woken = {key("w-main"), key("w", "Workload")}
    assert not woken & world.observe(blocker("b2", "b0-r0-h1", 1), "ADDED")
    pod = world.pod("b")
    assert woken <= world.observe(msgspec.structs.replace(pod, phase="Succeeded", rv="2"))
    assert woken <= world.observe(nodes("blocks=1,racks=3,hosts=1,gpus=8")[2], "ADDED")
    node = world.state.nodes[f"{CLUSTER}//b0-r0-h0"]
    assert not woken & world.observe(msgspec.structs.replace(node, ready=False, rv="2"))


def test_the_indexes_survive_a_snapshot() -> None:
    world = GangWorld(nodes())
    world.add(
        podgroup("g", 4, conditions=UNSCHEDULABLE, workload="w"), *members("g", 3), podgroup("h")
    )
    restored = decode_state(encode_state(world.state))
    assert restored.group_members == world.state.group_members
    assert restored.waiting_gangs == world.state.waiting_gangs
    assert (
        restored.workload_groups
        == world.state.workload_groups
        == {f"{CLUSTER}/{NS}/w": {f"{CLUSTER}/{NS}/g"}}
    )


def test_a_snapshot_from_before_the_workload_index_gets_it_rebuilt() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("g", 4, workload="w"), podgroup("h"))
    raw = msgspec.msgpack.decode(encode_state(world.state))
    del raw["workload_groups"]
    restored = fold.restored(decode_state(msgspec.msgpack.encode(raw)))
    assert restored.workload_groups == {f"{CLUSTER}/{NS}/w": {f"{CLUSTER}/{NS}/g"}}


def test_the_queue_is_highest_priority_then_oldest_first_and_forgets_deleted_groups() -> None:
    world = GangWorld(nodes())
    young = msgspec.structs.replace(podgroup("a", 2, conditions=UNSCHEDULABLE), created=T0 + 5)
    old = msgspec.structs.replace(podgroup("b", 2, conditions=UNSCHEDULABLE), created=T0 + 1)
    urgent = msgspec.structs.replace(
        podgroup("c", 2, conditions=UNSCHEDULABLE, priority=100), created=T0 + 9
    )
    lowly = msgspec.structs.replace(
        podgroup("d", 2, conditions=UNSCHEDULABLE, priority=-5), created=T0
    )
    world.add(young, old, urgent, lowly)
    world.observe(msgspec.structs.replace(old, rv="2"))  # still waiting: listed once
    assert world.state.waiting_gangs == {
        CLUSTER: [
            (-100, T0 + 9, f"{CLUSTER}/{NS}/c"),
            (0, T0 + 1, f"{CLUSTER}/{NS}/b"),
            (0, T0 + 5, f"{CLUSTER}/{NS}/a"),
            (5, T0, f"{CLUSTER}/{NS}/d"),
        ]
    }
    world.remove(old)
    world.remove(urgent)
    assert world.state.waiting_gangs == {
        CLUSTER: [(0, T0 + 5, f"{CLUSTER}/{NS}/a"), (5, T0, f"{CLUSTER}/{NS}/d")]
    }


@pytest.mark.parametrize("older", ["gang_waiting", "gang_queue"])
def test_a_snapshot_from_before_the_priority_queue_gets_it_rebuilt(older: str) -> None:
    """Older snapshots kept a ``gang_waiting`` set, then an oldest-first ``gang_queue``;
    either is ignored and the queue is rebuilt from the waiting groups."""
    world = GangWorld(nodes())
    world.add(podgroup("g", 4, conditions=UNSCHEDULABLE), podgroup("h", 4))
    raw = msgspec.msgpack.decode(encode_state(world.state))
    del raw["waiting_gangs"]
    raw[older] = {CLUSTER: [[T0, f"{CLUSTER}/{NS}/g"]]}
    restored = fold.restored(decode_state(msgspec.msgpack.encode(raw)))
    assert restored.waiting_gangs == {CLUSTER: [(0, T0, f"{CLUSTER}/{NS}/g")]}
    assert restored.podgroups == world.state.podgroups


def test_nominated_pods_hold_their_node_until_bound_or_gone() -> None:
    world = GangWorld(nodes())
    pod = msgspec.structs.replace(member("p", "g"), nominated="b0-r0-h1")
    world.add(podgroup("g", 1), pod)
    assert world.state.nominated == {f"{CLUSTER}//b0-r0-h1": {f"{CLUSTER}/{NS}/p"}}
    world.observe(msgspec.structs.replace(pod, node_name="b0-r0-h1", rv="2"))
    assert world.state.nominated == {}
    world.observe(msgspec.structs.replace(pod, rv="3"))
    assert world.state.nominated == {f"{CLUSTER}//b0-r0-h1": {f"{CLUSTER}/{NS}/p"}}
    world.remove(world.pod("p"))
    assert world.state.nominated == {}
