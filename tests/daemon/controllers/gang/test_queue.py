"""Which waiting gangs a released room wakes: the cluster's queue key, expanded once per pass
into its waiting groups, highest priority then oldest first, as many as the free room can
hold."""

from __future__ import annotations

import msgspec
import pytest

from daemon.controllers.gang.projection import QUEUE
from daemon.controllers.gang.reconciler import QUEUE_LOOKAHEAD
from daemon.controllers.runner import released
from tests.daemon.controllers.gang_builders import (
    CLUSTER,
    REC,
    SECOND,
    T0,
    binds,
    blocker,
    key,
    members,
    nodes,
    podgroup,
    workload,
)
from tests.daemon.controllers.world import GangWorld

WAITING = [
    {
        "type": "PodGroupScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": "TopologyPlacementFailed: ...",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
]
QUEUE_KEY = f"{QUEUE}/{CLUSTER}"


def waiting_world(
    free: int, groups: list[tuple[str, int, int]], priorities: dict[str, int] | None = None
) -> GangWorld:
    """One host of 8 GPUs with `free` of them free; `groups` are (name, pods of one GPU, age
    order) waiting for room, at the priorities named (else 0)."""
    world = GangWorld(nodes("blocks=1,racks=1,hosts=1,gpus=8"))
    if free < 8:
        world.add(blocker("taken", "b0-r0-h0", 8 - free))
    for name, pods, order in groups:
        priority = (priorities or {}).get(name)
        group = podgroup(name, pods, conditions=WAITING, priority=priority)
        world.add(msgspec.structs.replace(group, created=T0 + order * SECOND), *members(name, pods))
    return world


@pytest.mark.parametrize(
    ("free", "groups", "expected"),
    [
        # Oldest first, as many as the room holds.
        (4, [("a", 2, 0), ("b", 2, 1), ("c", 2, 2)], ["a", "b"]),
        # Age, not name, orders the queue, and the groups are released in its order.
        (4, [("a", 2, 2), ("b", 2, 1), ("c", 2, 0)], ["c", "b"]),
        # A group the room cannot hold is passed over; a later smaller one still gets it.
        (3, [("big", 4, 0), ("small", 2, 1), ("next", 2, 2)], ["small"]),
        # No room at all: nothing is woken.
        (0, [("a", 1, 0)], []),
        # Everything fits.
        (8, [("a", 4, 0), ("b", 4, 1)], ["a", "b"]),
    ],
)
def test_the_queue_releases_the_oldest_groups_the_room_can_hold(
    free: int, groups: list[tuple[str, int, int]], expected: list[str]
) -> None:
    world = waiting_world(free, groups)
    assert REC.release(world.state, QUEUE_KEY) == [key(name) for name in expected]


@pytest.mark.parametrize(
    ("free", "priorities", "expected"),
    [
        # The room goes to the highest priority that fits, not to the oldest.
        (4, {"young": 10}, ["young"]),
        (4, {"old": 10}, ["old"]),
        # A higher priority the room cannot hold is passed over.
        (2, {"young": 10}, ["old"]),
        # Equal priorities: oldest first.
        (4, {"old": 10, "young": 10}, ["old"]),
    ],
)
def test_the_queue_releases_by_priority_then_age(
    free: int, priorities: dict[str, int], expected: list[str]
) -> None:
    young_size = 4 if free == 2 else 3
    world = waiting_world(free, [("old", 2, 0), ("young", young_size, 1)], priorities)
    assert REC.release(world.state, QUEUE_KEY) == [key(name) for name in expected]


@pytest.mark.parametrize("decided_by", ["PodGroup", "Workload"])
def test_a_group_whose_binds_are_in_flight_is_passed_over_and_not_charged_twice(
    decided_by: str,
) -> None:
    world = waiting_world(4, [("a", 2, 0), ("b", 2, 1), ("c", 2, 2)])
    if decided_by == "Workload":
        # a made from Workload w; the binds below stand for a decision of w's (what a
        # Workload coordinating its groups decides).
        group = world.state.podgroups[f"{CLUSTER}/ns/a"]
        world.observe(
            msgspec.structs.replace(
                podgroup("a", 2, workload="w", conditions=WAITING), created=group.created, rv="2"
            )
        )
        world.add(workload("w", ["a"]))
    decision = world.decide(key("a"))
    assert decision is not None
    assert len(binds(decision)) == 2
    # Decided, not yet carried out: its binds take room.
    world.log(key("w", "Workload") if decided_by == "Workload" else key("a"), decision)
    # a's two GPUs are taken by its in-flight binds; the two left are b's, the older one.
    assert REC.release(world.state, QUEUE_KEY) == [key("b")]


def test_a_group_waiting_for_members_is_not_released_for_room() -> None:
    world = GangWorld(nodes("blocks=1,racks=1,hosts=1,gpus=8"))
    world.add(podgroup("g", 4, conditions=WAITING))  # no member yet
    assert REC.release(world.state, QUEUE_KEY) == []


def test_the_queue_stops_looking_after_a_run_of_groups_the_room_cannot_hold() -> None:
    too_big = [(f"big{i:03d}", 4, i) for i in range(QUEUE_LOOKAHEAD + 1)]
    world = waiting_world(2, [*too_big, ("small", 1, len(too_big))])
    assert REC.release(world.state, QUEUE_KEY) == []
    shorter = waiting_world(2, [*too_big[:-1], ("small", 1, len(too_big))])
    assert REC.release(shorter.state, QUEUE_KEY) == [key("small")]


def test_a_pod_finishing_marks_the_queue_and_the_runner_releases_from_it() -> None:
    world = waiting_world(0, [("a", 2, 0)])
    world.dirty.clear()
    world.observe(msgspec.structs.replace(world.pod("taken"), phase="Succeeded", rv="2"))
    dirty = world.dirty
    assert QUEUE_KEY in dirty
    assert key("a") in released(world.state, [REC], dirty).keys
    assert QUEUE_KEY not in released(world.state, [REC], dirty).keys


def test_a_cluster_without_waiting_groups_marks_no_queue() -> None:
    world = GangWorld(nodes("blocks=1,racks=1,hosts=1,gpus=8"))
    world.add(blocker("taken", "b0-r0-h0", 4))
    world.dirty.clear()
    world.remove(world.pod("taken"))
    assert QUEUE_KEY not in world.dirty


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        # Nothing changed: the remembered read is the read.
        ("none", ["a"]),
        # A third member needs more than the two free GPUs.
        ("member added", []),
        # A member replaced by a bigger one (a new object for the same key).
        ("member resized", []),
        # The PodGroup replaced: its minCount raised to what is there.
        ("group changed", ["a"]),
        # A member gone: one pod needs less and still fits.
        ("member removed", ["a"]),
    ],
)
def test_a_waiting_group_remembered_between_passes_is_read_again_once_it_changes(
    change: str, expected: list[str]
) -> None:
    world = waiting_world(2, [("a", 2, 0)])
    assert set(released(world.state, [world.rec], {QUEUE_KEY}, world.cycle()).keys) == {key("a")}
    if change == "member added":
        world.add(*members("a", 3)[2:])
    elif change == "member resized":
        world.observe(members("a", 2, gpus=2)[1])
    elif change == "group changed":
        group = world.state.podgroups[f"{CLUSTER}/ns/a"]
        world.observe(msgspec.structs.replace(group, rv="2"))
    elif change == "member removed":
        world.remove(members("a", 2)[1])
    assert set(released(world.state, [world.rec], {QUEUE_KEY}, world.cycle()).keys) == {
        key(n) for n in expected
    }
