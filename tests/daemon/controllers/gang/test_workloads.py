"""Coordinated Workloads: leader before workers, and role ratios admitted in whole units."""

from __future__ import annotations

from collections import Counter

import pytest

from daemon.controllers.gang import ratios
from daemon.controllers.gang.reconciler import GangReconciler
from daemon.controllers.gang.spec import (
    ROLE_RATIO,
    ROLE_RATIO_TOPOLOGY,
    GangSpecError,
)
from daemon.controllers.labels import LEADER_TEMPLATE
from tests.daemon.controllers.gang_builders import (
    BLOCK,
    RACK,
    SECOND,
    binds,
    blocker,
    deletes,
    key,
    member,
    members,
    nodes,
    podgroup,
    status_conditions,
    workload,
)
from tests.daemon.controllers.world import GangWorld

WL = key("job", "Workload")


def leader_world(*, rack: bool = False) -> GangWorld:
    world = GangWorld(nodes("blocks=1,racks=2,hosts=2,gpus=8"), rec=GangReconciler())
    level = RACK if rack else None
    world.add(
        workload("job", ["leader", "workers"]),
        podgroup("job-leader", 1, workload="job", template="leader", topology_key=level),
        podgroup("job-workers", 4, workload="job", template="workers", topology_key=level),
        member("job-leader-0", "job-leader"),
        *members("job-workers", 4),
    )
    return world


def test_the_leader_is_bound_first_and_workers_only_once_it_runs() -> None:
    world = leader_world()
    assert world.decide(key("job-leader")) is None, "the Workload's key decides"
    first = world.run(WL)
    assert first is not None
    assert set(binds(first)) == {"job-leader-0"}
    assert world.condition("job-workers")["message"].startswith("WaitingForLeader")
    assert "job-leader: Admitted" in first.reason
    assert "job-workers: Unschedulable: WaitingForLeader" in first.reason

    # Bound but still Pending: workers keep waiting.
    assert binds(world.run(WL)) == {}
    world.set_pod("job-leader-0", phase="Running")
    second = world.run(WL)
    assert second is not None
    assert set(binds(second)) == {f"job-workers-{i:02d}" for i in range(4)}
    assert world.condition("job-workers")["status"] == "True"


def test_member_changes_of_either_group_dirty_the_workload() -> None:
    world = leader_world()
    dirty = world.observe(member("job-workers-09", "job-workers"), "ADDED")
    assert WL in dirty
    dirty = world.observe(member("job-leader-0", "job-leader", phase="Running"))
    assert WL in dirty


def test_workers_that_require_the_leaders_level_join_its_rack() -> None:
    world = leader_world(rack=True)
    # Rack r0 has the most room, so without the rule workers could land anywhere.
    world.add(blocker("fill-r1", "b0-r1-h0", 4))
    world.run(WL)
    leader_rack = world.rack_of(world.placed("job-leader")["job-leader-0"])
    world.set_pod("job-leader-0", phase="Running")
    world.run(WL)
    worker_racks = {world.rack_of(n) for n in world.placed("job-workers").values()}
    assert worker_racks == {leader_rack}


def test_losing_the_leader_restarts_the_whole_job() -> None:
    world = leader_world()
    world.run(WL)
    world.set_pod("job-leader-0", phase="Running")
    world.run(WL)
    world.set_pod("job-leader-0", phase="Failed")
    restart = world.run(WL)
    assert restart is not None
    assert restart.reason.startswith("LeaderLost: leader group job-leader has 0 of minCount 1")
    assert deletes(restart) == [f"job-workers-{i:02d}" for i in range(4)]
    for group in ("job-leader", "job-workers"):
        condition = world.condition(group)
        assert (condition["status"], condition["reason"]) == ("False", "LeaderLost")
    # The controller recreates the pods: leader first again.
    world.add(member("job-leader-1", "job-leader"), *members("job-workers", 4, prefix="w2"))
    again = world.run(WL)
    assert again is not None
    assert set(binds(again)) == {"job-leader-1"}


def test_a_leader_that_times_out_takes_the_workers_with_it() -> None:
    world = GangWorld(nodes(), rec=GangReconciler(ready_timeout_ms=10 * SECOND))
    world.add(
        workload("job", ["driver", "workers"], {LEADER_TEMPLATE: "driver"}),
        podgroup("job-driver", 1, workload="job", template="driver"),
        podgroup("job-workers", 2, workload="job", template="workers"),
        member("job-driver-0", "job-driver"),
        *members("job-workers", 2),
    )
    world.run(WL)
    world.advance(10 * SECOND)
    decision = world.run(WL)
    assert decision is not None
    assert deletes(decision) == ["job-driver-0", "job-workers-00", "job-workers-01"]
    assert world.condition("job-driver")["reason"] == "PodsReadyTimeout"


def test_a_workload_without_a_leader_template_leaves_its_groups_to_themselves() -> None:
    world = GangWorld(nodes())
    world.add(
        workload("plain", ["main"]),
        podgroup("plain-main", 2, workload="plain", template="main"),
        *members("plain-main", 2),
    )
    assert world.decide(key("plain", "Workload")) is None
    decision = world.decide(key("plain-main"))
    assert decision is not None
    assert len(binds(decision)) == 2


def test_a_group_whose_workload_is_not_seen_yet_waits_for_it() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("early", 1, workload="later"), member("early-0", "early"))
    decision = world.decide(key("early"))
    assert decision is not None
    assert decision.reason.startswith("WaitingForWorkload")
    assert decision.intents == ()
    assert decision.requeue_at is not None


# -- role ratios ----------------------------------------------------------------------------


def ratio_world(prefill: int, decode: int, *, gpus: int = 4, extra: str = "") -> GangWorld:
    """Racks of 2 hosts × 8 GPUs (16 per rack); a unit of 1 prefill + 3 decode at `gpus`
    GPUs each takes 4 × gpus."""
    world = GangWorld(nodes("blocks=2,racks=2,hosts=2,gpus=8"), rec=GangReconciler())
    notes = {ROLE_RATIO: "prefill=1,decode=3"}
    if extra:
        notes[ROLE_RATIO_TOPOLOGY] = extra
    world.add(
        workload("serve", ["prefill", "decode"], notes),
        podgroup("serve-prefill", 1, workload="serve", template="prefill"),
        podgroup("serve-decode", 3, workload="serve", template="decode"),
        *members("serve-prefill", prefill, gpus=gpus),
        *members("serve-decode", decode, gpus=gpus),
    )
    return world


SERVE = key("serve", "Workload")


def units_by_rack(world: GangWorld) -> dict[str, Counter[str]]:
    found: dict[str, Counter[str]] = {}
    for group in ("serve-prefill", "serve-decode"):
        for node in world.placed(group).values():
            found.setdefault(world.rack_of(node), Counter())[group] += 1
    return found


def test_only_whole_units_are_admitted_each_inside_one_rack() -> None:
    world = ratio_world(prefill=3, decode=7)  # two whole units; 1 prefill and 1 decode left
    decision = world.run(SERVE)
    assert decision is not None
    assert decision.reason == (f"Admitted: 2 unit(s) of prefill=1,decode=3, each within one {RACK}")
    assert len(binds(decision)) == 8
    per_rack = units_by_rack(world)
    assert len(per_rack) == 2
    for counts in per_rack.values():
        assert counts == Counter({"serve-prefill": 1, "serve-decode": 3})
    for group in ("serve-prefill", "serve-decode"):
        assert world.condition(group)["status"] == "True"


def test_members_that_form_no_whole_unit_wait() -> None:
    world = ratio_world(prefill=1, decode=2)
    decision = world.run(SERVE)
    assert decision is not None
    assert binds(decision) == {}
    assert decision.reason == (
        "NotEnoughMembers: waiting for 1 whole unit(s) of prefill=1,decode=3"
    )
    # Logged, not written: no group had a condition to correct.
    assert decision.intents == ()
    assert world.condition("serve-decode") == {}


def test_units_that_fit_only_across_racks_are_not_admitted() -> None:
    # 16 GPUs per rack, a unit needs 16: with 4 taken in every rack no unit fits anywhere,
    # though the cluster has 48 free.
    world = ratio_world(prefill=1, decode=3)
    for rack in ("b0-r0", "b0-r1", "b1-r0", "b1-r1"):
        world.add(blocker(f"fill-{rack}", f"{rack}-h0", 4))
    decision = world.run(SERVE)
    assert decision is not None
    assert binds(decision) == {}
    message = world.condition("serve-prefill")["message"]
    assert message == (
        f"RatioUnitsUnschedulable: only 0 of 1 unit(s) of prefill=1,decode=3 fit, each "
        f"within one {RACK}"
    )
    assert decision.reason == f"Unschedulable: {message}"
    # Capacity freed in one rack wakes the Workload, and the unit lands there.
    dirty = world.remove(world.pod("fill-b1-r0"))
    assert SERVE in dirty
    admitted = world.run(SERVE)
    assert admitted is not None
    assert len(binds(admitted)) == 4
    assert list(units_by_rack(world)) == ["b1-r0"]


def test_later_whole_units_are_added_and_partial_ones_wait() -> None:
    world = ratio_world(prefill=1, decode=3, gpus=1)
    world.run(SERVE)
    world.add(member("serve-prefill-x", "serve-prefill", gpus=1))
    waiting = world.run(SERVE)
    assert waiting is not None
    assert binds(waiting) == {}
    world.add(*members("serve-decode", 3, prefix="serve-decode-x", gpus=1))
    more = world.run(SERVE)
    assert more is not None
    assert len(binds(more)) == 4


def test_a_wider_required_level_keeps_all_units_in_one_domain() -> None:
    world = GangWorld(nodes("blocks=2,racks=3,hosts=2,gpus=8"), rec=GangReconciler())
    world.add(
        workload("serve", ["prefill", "decode"], {ROLE_RATIO: "prefill=1,decode=3"}),
        podgroup("serve-prefill", 2, workload="serve", template="prefill", topology_key=BLOCK),
        podgroup("serve-decode", 6, workload="serve", template="decode"),
        *members("serve-prefill", 2, gpus=4),
        *members("serve-decode", 6, gpus=4),
        # Block b1 keeps room for two units only: the tightest block that holds both.
        blocker("fill", "b1-r2-h0", 1),
    )
    decision = world.run(SERVE)
    assert decision is not None
    assert len(binds(decision)) == 8
    blocks = {
        world.state.nodes[f"c1//{node}"].labels[BLOCK]
        for group in ("serve-prefill", "serve-decode")
        for node in world.placed(group).values()
    }
    assert blocks == {"b1"}
    assert len(units_by_rack(world)) == 2


def test_the_unit_level_can_be_chosen_per_workload() -> None:
    world = ratio_world(prefill=1, decode=3, gpus=4, extra=BLOCK)
    for rack in ("b0-r0", "b0-r1", "b1-r0", "b1-r1"):
        world.add(blocker(f"fill-{rack}", f"{rack}-h0", 4))
    decision = world.run(SERVE)  # no rack holds a unit, but a block does
    assert decision is not None
    assert len(binds(decision)) == 4
    assert decision.reason.endswith(f"each within one {BLOCK}")


def test_a_ratio_naming_a_missing_template_is_an_error_on_the_groups() -> None:
    world = GangWorld(nodes(), rec=GangReconciler())
    world.add(
        workload("serve", ["prefill", "decode"], {ROLE_RATIO: "prefill=1,decoder=3"}),
        podgroup("serve-prefill", 1, workload="serve", template="prefill"),
        member("serve-prefill-0", "serve-prefill"),
    )
    decision = world.run(SERVE)
    assert decision is not None
    written = status_conditions(decision, "serve-prefill")["PodGroupScheduled"]
    assert written["reason"] == "SchedulerError"
    assert "no podGroupTemplate named decoder" in written["message"]


def test_ratio_units_are_evicted_together_when_one_role_is_late() -> None:
    world = ratio_world(prefill=1, decode=3, gpus=1)
    world.rec = GangReconciler(ready_timeout_ms=10 * SECOND)
    world.run(SERVE)
    world.set_pod("serve-prefill-00", phase="Running", conditions={"Ready": "True"})
    world.run(SERVE)
    world.advance(10 * SECOND)
    decision = world.run(SERVE)
    assert decision is not None
    assert len(deletes(decision)) == 4
    for group in ("serve-prefill", "serve-decode"):
        assert world.group(group).annotations["kbatchd.dev/evictions"] == "1"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("prefill", "invalid entry 'prefill'"),
        ("prefill=0,decode=3", "count must be an integer from 1"),
        ("prefill=1,prefill=2", "appears twice"),
        ("=1", "invalid entry"),
    ],
)
def test_malformed_ratios_name_the_entry(text: str, error: str) -> None:
    with pytest.raises(GangSpecError, match=error):
        ratios.parse_ratio(text, "annotation")


def test_ratios_parse_in_written_order() -> None:
    assert ratios.parse_ratio(" prefill = 1 , decode=3", "a") == (
        ratios.Role("prefill", 1),
        ratios.Role("decode", 3),
    )


def test_a_one_role_ratio_that_does_not_fit_says_why_once() -> None:
    world = GangWorld(nodes("blocks=1,racks=2,hosts=2,gpus=8"), rec=GangReconciler())
    world.add(
        workload("solo", ["main", "other"], {ROLE_RATIO: "main=2"}),
        podgroup("solo-main", 2, workload="solo", template="main"),
        *members("solo-main", 2, gpus=16),
    )
    decision = world.run(key("solo", "Workload"))
    assert decision is not None
    assert binds(decision) == {}
    assert decision.reason == (
        f"Unschedulable: RatioUnitsUnschedulable: only 0 of 1 unit(s) of main=2 fit, each "
        f"within one {RACK}"
    )


def test_an_overcommitted_node_does_not_hide_room_on_its_neighbours() -> None:
    # Pods of another scheduler hold 16 GPUs on an 8-GPU node in every rack (allocatable
    # shrank under them): that node has no room, but it takes none from the other node of
    # its rack, where a 4-GPU unit fits.
    world = ratio_world(prefill=1, decode=3, gpus=1)
    for rack in ("b0-r0", "b0-r1", "b1-r0", "b1-r1"):
        world.add(blocker(f"over-{rack}", f"{rack}-h0", 16))
    decision = world.run(SERVE)
    assert decision is not None
    assert decision.reason == f"Admitted: 1 unit(s) of prefill=1,decode=3, each within one {RACK}"
    assert {node.split("-h")[1] for node in world.placed("serve-decode").values()} == {"1"}
