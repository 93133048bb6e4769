"""Gang admission of a single PodGroup: quorum, room, topology levels, slices, retries."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import msgspec
import pytest

from daemon.controllers.base import Decision
from daemon.controllers.gang.reconciler import GangReconciler, retry_at
from daemon.controllers.gang.spec import KUEUE_PREFERRED, KUEUE_SLICE_REQUIRED, KUEUE_SLICE_SIZE
from events.fold import fold
from events.intents import Bind, Patch
from events.schema import Outcome
from tests.daemon.controllers.builders import condition
from tests.daemon.controllers.gang_builders import (
    CLUSTER,
    HOST,
    RACK,
    SECOND,
    T0,
    binds,
    blocker,
    key,
    member,
    members,
    nodes,
    podgroup,
    status_conditions,
)
from tests.daemon.controllers.world import GangWorld

SCHEDULED = "PodGroupScheduled"


def blocked_world(per_rack: int = 4) -> GangWorld:
    """Two racks of 2 hosts × 8 GPUs; `per_rack` GPUs of each rack already taken by default-
    scheduler pods (on host 0 of each rack)."""
    world = GangWorld(nodes())
    world.add(
        blocker("block-r0", "b0-r0-h0", per_rack),
        blocker("block-r1", "b0-r1-h0", per_rack),
    )
    return world


SHORT = "NotEnoughMembers: waiting for minCount 4 member pod(s)"
NO_ROOM = "InsufficientRoom: no 4 GPUs free"


@pytest.mark.parametrize(
    ("had", "written", "patches"),
    [
        # Upstream's PreEnqueue holds the pods of a group short of members and writes nothing.
        (None, None, 0),
        # A condition the group has would tell an old story: it is replaced.
        (("False", "Unschedulable", NO_ROOM), SHORT, 1),
        (("False", "Unschedulable", SHORT), SHORT, 0),
    ],
)
def test_a_group_with_fewer_members_than_min_count_binds_nothing(
    had: tuple[str, str, str] | None, written: str | None, patches: int
) -> None:
    conditions = None if had is None else [condition("PodGroupScheduled", *had)]
    world = GangWorld(nodes())
    world.add(podgroup("g", 4, conditions=conditions), *members("g", 3))
    decision = world.run(key("g"))
    assert decision is not None
    assert binds(decision) == {}
    assert decision.reason == SHORT
    assert len([i for i in decision.intents if isinstance(i, Patch)]) == patches
    scheduled = world.condition("g")
    if written is None:
        assert scheduled == {}
    else:
        assert (scheduled["status"], scheduled["reason"]) == ("False", "Unschedulable")
        assert scheduled["message"] == written
    # The same verdict again writes nothing.
    again = world.decide(key("g"))
    assert again is not None
    assert again.intents == ()
    # The fourth member is what the group waited for: it is admitted at once.
    world.add(*members("g", 4)[3:])
    assert len(binds(world.run(key("g")))) == 4


def test_gated_members_do_not_count_and_other_schedulers_pods_are_not_ours() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("g", 2), member("g-0", "g"), member("g-1", "g", gates=("hold",)))
    decision = world.decide(key("g"))
    assert decision is not None
    assert decision.reason == "NotEnoughMembers: waiting for minCount 2 member pod(s)"
    world.add(podgroup("theirs", 1), member("t-0", "theirs", scheduler="default-scheduler"))
    assert world.decide(key("theirs")) is None


def test_a_group_that_fits_is_bound_whole_with_a_scheduled_condition() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("g", 4), *members("g", 4, gpus=2))
    decision = world.decide(key("g"))
    assert decision is not None
    assert decision.reason.startswith("Admitted: ns/g: 4 pod(s) bound to")
    assert len(binds(decision)) == 4
    kinds = [type(i).__name__ for i in decision.intents]
    assert kinds == ["Bind"] * 4 + ["Patch"], "binds go before the status that announces them"
    written = status_conditions(decision, "g")
    assert written[SCHEDULED]["status"] == "True"
    assert written[SCHEDULED]["reason"] == "Scheduled"
    assert written[SCHEDULED]["lastTransitionTime"] == "2026-01-01T00:00:00Z"
    assert written["PodsReady"]["reason"] == "WaitForStart"
    assert decision.requeue_at == T0 + 60 * SECOND  # the ready deadline
    for intent in decision.intents:
        if isinstance(intent, Bind):
            assert intent.uid == f"uid-{intent.name}"
            assert intent.cluster == CLUSTER
        else:
            assert isinstance(intent, Patch)
            assert intent.patch_type == "strategic"


def test_not_enough_room_binds_nothing_and_says_why() -> None:
    world = GangWorld(nodes())  # 32 GPUs on 4 hosts
    world.add(podgroup("big", 10), *members("big", 10, gpus=3))  # 30 GPUs, 2 pods a host
    decision = world.run(key("big"))
    assert decision is not None
    assert binds(decision) == {}
    message = world.condition("big")["message"]
    assert message.startswith("TopologyPlacementFailed: unconstrained: ")
    assert "8 out of 10" in message
    assert decision.reason == f"Unschedulable: {message}"


def test_a_demand_above_the_whole_clusters_free_room_is_not_placed() -> None:
    world = GangWorld(nodes())  # 32 GPUs
    world.add(podgroup("big", 40), *members("big", 40))
    decision = world.run(key("big"))
    assert decision is not None
    assert binds(decision) == {}
    message = world.condition("big")["message"]
    assert (
        message
        == "InsufficientRoom: 40 pod(s) request nvidia.com/gpu 40 (32 free) in the whole cluster"
    )
    assert decision.reason == f"Unschedulable: {message}"


def test_a_group_waiting_for_room_keeps_its_message_while_the_cluster_stays_short() -> None:
    world = blocked_world()
    world.add(podgroup("g", 16, topology_key=RACK), *members("g", 16))
    world.run(key("g"))
    first = world.condition("g")["message"]
    assert first.startswith("InsufficientRoom: 16 pod(s)")
    # More of the cluster taken: too little left anywhere, but the status is not rewritten.
    for host in ("b0-r0-h1", "b0-r1-h1"):
        world.add(blocker(f"more-{host}", host, 5))  # 14 GPUs left of the 16 it needs
    world.advance(SECOND)
    decision = world.run(key("g"))
    assert decision is not None
    assert decision.intents == ()
    assert decision.reason == f"Unschedulable: {first}"


def test_room_in_no_single_rack_under_a_required_rack_level() -> None:
    world = blocked_world()
    world.add(podgroup("g", 16, topology_key=RACK), *members("g", 16))
    decision = world.run(key("g"))
    assert decision is not None
    assert binds(decision) == {}
    assert world.condition("g")["message"] == (
        f"InsufficientRoom: 16 pod(s) request nvidia.com/gpu 16 (12 free) in any one {RACK}"
    )
    assert world.placed("g") == {}


def test_room_in_a_rack_in_sum_but_not_node_by_node() -> None:
    world = blocked_world()  # 12 GPUs free in each rack: 4 on one host, 8 on the other
    world.add(podgroup("g", 4, topology_key=RACK), *members("g", 4, gpus=3))
    decision = world.run(key("g"))
    assert decision is not None
    assert binds(decision) == {}
    assert world.condition("g")["message"] == (
        f"TopologyPlacementFailed: required {RACK}: allows to fit only 3 out of 4 pod(s)"
    )


def test_capacity_freed_wakes_the_waiting_group_and_it_lands_in_one_rack() -> None:
    world = blocked_world()
    world.add(podgroup("g", 16, topology_key=RACK), *members("g", 16))
    world.run(key("g"))
    assert world.state.waiting_gangs == {CLUSTER: [(0, T0, f"{CLUSTER}/ns/g")]}
    dirty = world.remove(world.pod("block-r1"))
    assert key("g") in dirty, "a pod releasing room dirties the waiting gang"
    decision = world.run(key("g"))
    assert decision is not None
    assert len(binds(decision)) == 16
    assert {world.rack_of(node) for node in world.placed("g").values()} == {"b0-r1"}
    assert world.condition("g")["status"] == "True"
    assert CLUSTER not in world.state.waiting_gangs, "an admitted group no longer waits"


def test_a_pod_binding_elsewhere_does_not_wake_waiting_gangs() -> None:
    world = blocked_world()
    world.add(podgroup("g", 16, topology_key=RACK), *members("g", 16))
    world.run(key("g"))
    dirty = world.observe(blocker("more", "b0-r0-h1", 1), "ADDED")
    assert key("g") not in dirty


def test_preferred_level_falls_back_upwards_to_the_block() -> None:
    world = blocked_world()
    world.add(
        podgroup("g", 16),
        *members("g", 16, annotations={KUEUE_PREFERRED: RACK}),
    )
    decision = world.run(key("g"))
    assert decision is not None
    assert len(binds(decision)) == 16
    racks = Counter(world.rack_of(n) for n in world.placed("g").values())
    assert sum(racks.values()) == 16
    assert len(racks) == 2


def test_a_slice_size_that_does_not_divide_the_members_is_an_error_not_a_wait() -> None:
    world = GangWorld(nodes())
    notes = {KUEUE_SLICE_REQUIRED: HOST, KUEUE_SLICE_SIZE: "3"}
    world.add(podgroup("g", 8), *members("g", 8, annotations=notes))
    decision = world.run(key("g"))
    assert decision is not None
    assert binds(decision) == {}
    condition = world.condition("g")
    assert condition["reason"] == "SchedulerError"
    assert condition["message"] == "InvalidSpec: count: 8 is not a multiple of the slice size 3"
    assert decision.requeue_at is None, "a malformed request is not retried on a timer"


def test_whole_slices_must_fit_in_their_domain_even_when_pods_would() -> None:
    # 12 GPUs free per rack, 24 in the block: 24 pods fit, but three slices of 8 do not (a
    # rack holds one slice of 8, with 4 left over).
    world = blocked_world()
    notes = {KUEUE_SLICE_REQUIRED: RACK, KUEUE_SLICE_SIZE: "8"}
    world.add(podgroup("g", 24), *members("g", 24, annotations=notes))
    decision = world.run(key("g"))
    assert decision is not None
    assert binds(decision) == {}
    assert "allows to fit only 2 out of 3 slice(s)" in world.condition("g")["message"]
    notes = {KUEUE_SLICE_REQUIRED: RACK, KUEUE_SLICE_SIZE: "4"}
    world.add(podgroup("h", 16), *members("h", 16, annotations=notes))
    decision = world.run(key("h"))
    assert decision is not None
    assert len(binds(decision)) == 16
    per_rack = Counter(world.rack_of(n) for n in world.placed("h").values())
    assert all(count % 4 == 0 for count in per_rack.values())


def test_a_constraint_on_a_label_outside_the_configured_levels_still_places() -> None:
    zoned = [
        msgspec.structs.replace(n, labels={**n.labels, "zone": "z1" if "r1" in n.name else "z0"})
        for n in nodes()
    ]
    world = GangWorld(zoned)
    world.add(podgroup("g", 12, topology_key="zone"), *members("g", 12))
    decision = world.run(key("g"))
    assert decision is not None
    assert len(binds(decision)) == 12
    zones = {
        world.state.nodes[f"{CLUSTER}//{n}"].labels["zone"] for n in world.placed("g").values()
    }
    assert len(zones) == 1


def test_unschedulable_groups_are_requeued_on_an_aligned_exponential_schedule() -> None:
    world = blocked_world()
    world.add(podgroup("g", 16, topology_key=RACK), *members("g", 16))
    first = world.run(key("g"))
    assert first is not None
    assert first.requeue_at == T0 + 1 * SECOND
    world.advance(1500)
    again = world.decide(key("g"))
    assert again is not None
    assert again.requeue_at == T0 + 3 * SECOND
    world.advance(200 * SECOND)
    later = world.decide(key("g"))
    assert later is not None
    assert later.requeue_at is not None
    assert later.requeue_at - world.now <= 60 * SECOND
    assert retry_at(0, 0, 1000, 60_000) == 1000
    assert retry_at(0, 1000, 1000, 60_000) == 3000
    assert retry_at(0, 10**9, 1000, 60_000) - 10**9 <= 60_000


def test_members_arriving_after_admission_join_the_groups_rack() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("g", 4, topology_key=RACK), *members("g", 4))
    world.run(key("g"))
    rack = {world.rack_of(n) for n in world.placed("g").values()}
    assert len(rack) == 1
    world.add(member("g-late", "g"))
    decision = world.run(key("g"))
    assert decision is not None
    assert decision.reason == "Extended: 1 more member(s) bound"
    assert world.rack_of(world.placed("g")["g-late"]) in rack


def test_bindings_already_made_are_kept_and_the_rest_join_them() -> None:
    # A restart between binds and status: two members are bound, two are not.
    world = GangWorld(nodes())
    world.add(
        podgroup("g", 4, topology_key=RACK),
        member("g-0", "g", node="b0-r1-h1"),
        member("g-1", "g", node="b0-r1-h1"),
        member("g-2", "g"),
        member("g-3", "g"),
    )
    decision = world.run(key("g"))
    assert decision is not None
    assert set(binds(decision)) == {"g-2", "g-3"}
    assert {world.rack_of(n) for n in world.placed("g").values()} == {"b0-r1"}


def test_two_groups_decided_from_one_state_never_share_the_same_room() -> None:
    world = GangWorld(nodes("blocks=1,racks=1,hosts=2,gpus=8"))
    world.add(podgroup("a", 10), *members("a", 10), podgroup("b", 10), *members("b", 10))
    first = world.decide(key("a"))
    second = world.decide(key("b"))  # same state: the first admission is remembered
    assert first is not None
    assert len(binds(first)) == 10
    assert second is not None
    assert binds(second) == {}
    assert second.reason.startswith("Unschedulable: InsufficientRoom: 10 pod(s)")


def test_bindings_in_flight_count_as_taken() -> None:
    world = GangWorld(nodes("blocks=1,racks=1,hosts=2,gpus=8"))
    world.add(podgroup("a", 10), *members("a", 10), podgroup("b", 10), *members("b", 10))
    decision = world.decide(key("a"))
    assert decision is not None
    world.log(key("a"), decision)  # logged, not yet carried out
    fresh = GangReconciler(ready_timeout_ms=None)
    other = fresh.decide(world.state, key("b"), world.now)
    assert other is not None
    assert binds(other) == {}


def _carried_out(world: GangWorld, decision: Decision) -> None:
    """Log `decision` and fold a successful outcome of each intent: the watch lags."""
    seq = world.log(key("a"), decision)
    for index in range(len(decision.intents)):
        fold(
            world.state,
            world.state.seq + 1,
            Outcome(at=world.now, decision=seq, index=index, ok=True),
        )


def test_a_bind_carried_out_but_not_yet_watched_still_takes_its_room() -> None:
    world = GangWorld(nodes("blocks=1,racks=1,hosts=2,gpus=8"))
    world.add(podgroup("a", 10), *members("a", 10), podgroup("b", 10), *members("b", 10))
    decision = world.decide(key("a"))
    assert decision is not None
    _carried_out(world, decision)
    other = GangReconciler(ready_timeout_ms=None).decide(world.state, key("b"), world.now)
    assert other is not None
    assert binds(other) == {}
    assert other.reason.startswith("Unschedulable: InsufficientRoom: 10 pod(s)")


def test_decisions_do_not_depend_on_the_order_objects_were_seen() -> None:
    def build(seed: int) -> dict[str, str]:
        objects = [*nodes("blocks=2,racks=2,hosts=2,gpus=8"), podgroup("g", 20)]
        objects += members("g", 20, annotations={KUEUE_PREFERRED: RACK})
        objects += [blocker("x", "b0-r0-h0", 3), blocker("y", "b1-r1-h1", 5)]
        random.Random(seed).shuffle(objects)
        world = GangWorld(objects, rec=GangReconciler())
        return binds(world.decide(key("g")))

    first = build(0)
    assert len(first) == 20
    for seed in range(1, 6):
        assert build(seed) == first


def test_pods_naming_the_group_with_another_scheduler_block_it() -> None:
    world = GangWorld(nodes())
    world.add(
        podgroup("g", 2),
        member("g-0", "g"),
        member("g-1", "g", scheduler="default-scheduler"),
    )
    decision = world.run(key("g"))
    assert decision is not None
    assert binds(decision) == {}
    assert world.condition("g")["message"].startswith("SchedulerNameMismatch: pods g-1")


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"schedulingPolicy": {}}, "spec.schedulingPolicy"),
        ({"schedulingPolicy": {"gang": {"minCount": 0}}}, "spec.schedulingPolicy.gang.minCount"),
        (
            {
                "schedulingPolicy": {"basic": {}},
                "schedulingConstraints": {"topology": [{"key": "a"}, {"key": "b"}]},
            },
            "spec.schedulingConstraints.topology",
        ),
    ],
)
def test_a_malformed_podgroup_is_reported_naming_the_field(
    spec: dict[str, Any], field: str
) -> None:
    group = podgroup("g", 1)
    world = GangWorld(nodes())
    world.add(msgspec.structs.replace(group, spec=spec), member("g-0", "g"))
    decision = world.run(key("g"))
    assert decision is not None
    assert binds(decision) == {}
    condition = world.condition("g")
    assert condition["reason"] == "SchedulerError"
    assert field in condition["message"]
    again = world.decide(key("g"))
    assert again is not None
    assert again.intents == (), "the same error is not written again"


def test_room_taken_earlier_in_the_pass_shows_in_every_tree_of_the_pass() -> None:
    # The second group places on another tree (its constraint label is not a configured
    # level), built after the first admission: it must see that room as taken too.
    zoned = [
        msgspec.structs.replace(n, labels={**n.labels, "zone": "z0"})
        for n in nodes("blocks=1,racks=1,hosts=2,gpus=8")
    ]
    world = GangWorld(zoned)
    world.add(podgroup("a", 10), *members("a", 10))
    world.add(podgroup("b", 6, topology_key="zone"), *members("b", 6, gpus=2))
    first = world.decide(key("a"))
    second = world.decide(key("b"))  # 12 of the 6 free GPUs: too much in sum
    assert first is not None
    assert len(binds(first)) == 10
    assert binds(second) == {}
    assert "nvidia.com/gpu 12 (6 free)" in second.reason
