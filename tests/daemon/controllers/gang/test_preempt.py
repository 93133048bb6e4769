"""Gang preemption (KEP-5710): the victim order, the reverse pass, disruption modes, and the
reconciler's two decisions (mark, then delete) with the room held for the preemptor."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from daemon.controllers.gang.preempt import Unit, group_unit, importance, pod_unit, reprieve
from daemon.controllers.gang.spec import GangSpecError, evicted_whole
from events.intents import Patch
from events.state import Claim
from tests.daemon.controllers.gang_builders import (
    CLUSTER,
    GPU,
    NS,
    RACK,
    T0,
    binds,
    deletes,
    key,
    member,
    members,
    nodes,
    podgroup,
    running,
    status_conditions,
)
from tests.daemon.controllers.world import GangWorld

SCHEDULED = "PodGroupScheduled"
DISRUPTION = "DisruptionTarget"


def unit(name: str, priority: int, pods: int = 1, *, grouped: bool = False, at: int = 0) -> Unit:
    found = tuple(running(f"{name}-{i}", "n", 1, priority) for i in range(pods))
    return Unit(name=name, priority=priority, grouped=grouped, pods=found, started=T0 + at)


# -- the pure part ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("units", "most_important_first"),
    [
        ([unit("low", 1), unit("high", 9)], ["high", "low"]),
        ([unit("plain", 5), unit("grouped", 5, grouped=True)], ["grouped", "plain"]),
        ([unit("young", 5, at=9), unit("old", 5, at=1)], ["old", "young"]),
        ([unit("small", 5, 2, grouped=True), unit("big", 5, 4, grouped=True)], ["big", "small"]),
        (
            [unit("g-young", 5, 3, grouped=True, at=9), unit("g-old", 5, 3, grouped=True, at=1)],
            ["g-old", "g-young"],
        ),
    ],
)
def test_the_importance_order(units: list[Unit], most_important_first: list[str]) -> None:
    assert [u.name for u in sorted(units, key=importance)] == most_important_first


@pytest.mark.parametrize(
    ("mode", "whole"),
    [
        (None, False),
        ({"single": {}}, False),
        ({"all": {}}, True),
        ("Pod", False),
        ("PodGroup", True),
    ],
)
def test_disruption_modes_of_both_versions(mode: Any, whole: bool) -> None:
    spec = {} if mode is None else {"disruptionMode": mode}
    assert evicted_whole(spec, "g") is whole


@pytest.mark.parametrize("mode", ["All", {"every": {}}, {"single": {}, "all": {}}, 3])
def test_an_unknown_disruption_mode_is_named(mode: Any) -> None:
    with pytest.raises(GangSpecError, match=r"g: spec.disruptionMode: expected"):
        evicted_whole({"disruptionMode": mode}, "g")


def _on(node: str, name: str, gpus: int, priority: int) -> Unit:
    return pod_unit(running(name, node, gpus, priority))


@pytest.mark.parametrize(
    ("candidates", "slack", "victims"),
    [
        # Off the gang's nodes: spared without a check.
        ([_on("far", "a", 8, 1)], {"n1": {GPU: 0}}, []),
        # On its node, no room left: a victim.
        ([_on("n1", "a", 8, 1)], {"n1": {GPU: 4}}, ["Pod ns/a"]),
        # Room for one of two: the more important (higher priority) is spared.
        ([_on("n1", "lo", 4, 1), _on("n1", "hi", 4, 2)], {"n1": {GPU: 4}}, ["Pod ns/lo"]),
        # Victims come out least important first.
        (
            [_on("n1", "b", 4, 2), _on("n1", "a", 4, 1), _on("n1", "c", 4, 3)],
            {"n1": {GPU: 4}},
            ["Pod ns/a", "Pod ns/b"],
        ),
        # A group is put back whole or not at all: one of its pods lacks room.
        (
            [
                group_unit(
                    f"{CLUSTER}/{NS}/g",
                    1,
                    [running("g-0", "n1", 4, 1, "g"), running("g-1", "n2", 4, 1, "g")],
                )
            ],
            {"n1": {GPU: 4}, "n2": {GPU: 0}},
            ["PodGroup ns/g"],
        ),
    ],
)
def test_the_reverse_pass(
    candidates: list[Unit], slack: dict[str, dict[str, int]], victims: list[str]
) -> None:
    found, spared = reprieve(candidates, slack)
    assert [u.name for u in found] == victims
    assert len(found) + len(spared) == len(candidates)


# -- the reconciler -----------------------------------------------------------------------------


def full_world(priorities: dict[str, int], **group: Any) -> GangWorld:
    """Two racks of two 8-GPU hosts, every host taken by one plain pod of the priority named
    for it, and a waiting gang ``hi`` of two 8-GPU members that wants one rack."""
    world = GangWorld(nodes())
    world.add(*(running(f"on-{n}", n, 8, p) for n, p in priorities.items()))
    spec: dict[str, Any] = {"priority": 100, "topology_key": RACK, **group}
    world.add(podgroup("hi", 2, **spec), *members("hi", 2, gpus=8))
    return world


PRIORITIES = {"b0-r0-h0": 1, "b0-r0-h1": 2, "b0-r1-h0": 3, "b0-r1-h1": 50}


def _pod_patches(decision: Any) -> dict[str, dict[str, Any]]:
    return {
        i.name: i.patch["status"]
        for i in decision.intents
        if isinstance(i, Patch) and i.kind == "Pod" and isinstance(i.patch, dict)
    }


def test_a_gang_preempts_the_lightest_rack_and_spares_the_rest() -> None:
    world = full_world(PRIORITIES)
    decision = world.decide(key("hi"))
    assert decision is not None
    assert not binds(decision)
    assert not deletes(decision)
    patches = _pod_patches(decision)
    marked = {n for n, s in patches.items() if "conditions" in s}
    assert marked == {"on-b0-r0-h0", "on-b0-r0-h1"}, "rack 0 weighs 3, rack 1 weighs 53"
    condition = patches["on-b0-r0-h0"]["conditions"][0]
    assert (condition["type"], condition["reason"]) == ("DisruptionTarget", "PreemptionByScheduler")
    assert condition["message"] == (
        "kbatchd: preempting to accommodate a higher priority podgroup ns/hi"
    )
    nominated = {n: s["nominatedNodeName"] for n, s in patches.items() if "nominatedNodeName" in s}
    assert {world.rack_of(node) for node in nominated.values()} == {"b0-r0"}
    assert set(nominated) == {"hi-00", "hi-01"}
    written = status_conditions(decision, "hi")[SCHEDULED]
    assert (written["status"], written["reason"]) == ("False", "Unschedulable")
    assert written["message"].startswith("WaitingForPreemption:")
    assert decision.reason.startswith(
        "Preempting: ns/hi (priority 100) evicts 2 victim(s), 2 pod(s)"
    )
    assert "2 lower-priority unit(s) spared" in decision.reason


def test_then_it_deletes_the_marked_victims_and_is_bound_once_they_are_gone() -> None:
    world = full_world(PRIORITIES)
    world.run(key("hi"))
    second = world.run(key("hi"))
    assert deletes(second) == ["on-b0-r0-h0", "on-b0-r0-h1"]
    assert second is not None
    assert second.reason.startswith("WaitingForPreemption:")
    third = world.run(key("hi"))
    assert set(binds(third).values()) == {"b0-r0-h0", "b0-r0-h1"}
    assert world.condition("hi")["status"] == "True"
    assert f"{CLUSTER}/{NS}/on-b0-r1-h1" in world.state.pods, "spared"


def test_no_third_gang_takes_the_room_a_preemption_freed() -> None:
    world = full_world(PRIORITIES)
    world.run(key("hi"))
    world.run(key("hi"))  # the victims are deleted; the kubelet stops them at once
    world.add(podgroup("third", 2), *members("third", 2, gpus=8))
    third = world.run(key("third"))
    assert third is not None
    assert not binds(third), "the freed rack is held for hi"
    assert set(binds(world.run(key("hi"))).values()) == {"b0-r0-h0", "b0-r0-h1"}


@pytest.mark.parametrize(
    ("group", "why"),
    [
        ({"priority": 1}, "nothing of lower priority than 1 makes room"),
        ({"preemption": "Never"}, "preemptionPolicy Never"),
    ],
)
def test_no_preemption(group: dict[str, Any], why: str) -> None:
    world = full_world({n: 1 for n in PRIORITIES}, **group)
    decision = world.decide(key("hi"))
    assert decision is not None
    assert not _pod_patches(decision), why
    assert status_conditions(decision, "hi")[SCHEDULED]["message"].startswith(
        ("TopologyPlacementFailed", "InsufficientRoom")
    )


def _whole_victim() -> GangWorld:
    """``lo`` (admitted, evicted whole) holds rack 0 and one host of rack 1; ``hi`` needs
    one whole rack."""
    world = GangWorld(nodes())
    lo = podgroup("lo", 3, disruption={"all": {}}, priority=5)
    lo_pods = [
        running("lo-0", "b0-r0-h0", 8, 5, "lo"),
        running("lo-1", "b0-r0-h1", 8, 5, "lo"),
        running("lo-2", "b0-r1-h0", 8, 5, "lo"),
    ]
    admitted = [{"type": SCHEDULED, "status": "True", "reason": "Scheduled", "message": ""}]
    lo = msgspec.structs.replace(lo, status={"conditions": admitted})
    world.add(lo, *lo_pods, running("plain", "b0-r1-h1", 8, 50))
    world.add(podgroup("hi", 2, priority=100, topology_key=RACK), *members("hi", 2, gpus=8))
    return world


def _requeued(world: GangWorld) -> None:
    requeued = world.condition("lo")
    assert (requeued["status"], requeued["reason"]) == ("False", "Unschedulable")
    assert requeued["message"].startswith("Preempted:")
    assert f"{CLUSTER}/{NS}/lo" in {k for *_, k in world.state.waiting_gangs[CLUSTER]}


def test_a_group_that_is_disrupted_whole_is_evicted_whole_and_requeued_by_its_preemptor() -> None:
    world = _whole_victim()
    decision = world.run(key("hi"))
    assert decision is not None
    marked = {n for n, s in _pod_patches(decision).items() if "conditions" in s}
    assert marked == {"lo-0", "lo-1", "lo-2"}, "all of lo, though rack 0 is enough"
    assert status_conditions(decision, "lo")[SCHEDULED]["status"] == "False"
    _requeued(world)
    assert world.decide(key("lo")).reason.startswith("Preempted: waiting for 3 evicted member(s)")


def test_a_victim_whose_members_are_gone_before_its_own_pass_stays_requeued() -> None:
    """The marks and the deletes folded before the victim is decided: with no member left
    it has no decision of its own, so only its preemptor can have requeued it."""
    world = _whole_victim()
    world.run(key("hi"))
    assert deletes(world.run(key("hi"))) == ["lo-0", "lo-1", "lo-2"]
    assert not world.state.group_members.get(f"{CLUSTER}/{NS}/lo")
    assert world.decide(key("lo")) is None
    _requeued(world)


def test_a_pod_of_a_single_mode_group_goes_alone() -> None:
    world = GangWorld(nodes("blocks=1,racks=1,hosts=2,gpus=8"))
    lo = podgroup("lo", 1, priority=5)
    world.add(
        lo,
        running("lo-0", "b0-r0-h0", 8, 5, "lo"),
        running("lo-1", "b0-r0-h1", 8, 5, "lo"),
        podgroup("hi", 1, priority=100),
        member("hi-00", "hi", gpus=8),
    )
    decision = world.decide(key("hi"))
    marked = {n for n, s in _pod_patches(decision).items() if "conditions" in s}
    assert len(marked) == 1


def test_a_preemption_cut_short_after_some_marks_is_finished_where_it_began() -> None:
    """A restart after 3 of a whole group's 8 pods were marked and the preemptor's pods were
    nominated to its rack: the room held for the preemptor is its own, so the rest of the
    group is marked (not the heavier rack's pods)."""
    world = GangWorld(nodes())
    admitted = [{"type": SCHEDULED, "status": "True", "reason": "Scheduled", "message": ""}]
    lo = podgroup("lo", 8, disruption={"all": {}}, priority=10)
    lo_pods = []
    for i in range(8):
        pod = running(f"lo-{i}", f"b0-r0-h{i % 2}", 2, 10, "lo")
        if i < 3:
            pod = msgspec.structs.replace(pod, conditions={**pod.conditions, DISRUPTION: "True"})
        lo_pods.append(pod)
    world.add(msgspec.structs.replace(lo, status={"conditions": admitted}), *lo_pods)
    world.add(running("mid-0", "b0-r1-h0", 8, 500), running("mid-1", "b0-r1-h1", 8, 500))
    his = [
        msgspec.structs.replace(p, nominated=f"b0-r0-h{i % 2}")
        for i, p in enumerate(members("hi", 8, gpus=2))
    ]
    world.add(podgroup("hi", 8, priority=1000, topology_key=RACK), *his)
    decision = world.decide(key("hi"))
    marked = {n for n, s in _pod_patches(decision).items() if "conditions" in s}
    assert marked == {f"lo-{i}" for i in range(3, 8)}


def _two_preemptors() -> GangWorld:
    """Each rack held by a low group evicted whole (rack 0's the lighter: priority 5 against
    10), and two gangs of priority 100 waiting for a rack each."""
    world = GangWorld(nodes())
    admitted = [{"type": SCHEDULED, "status": "True", "reason": "Scheduled", "message": ""}]
    for lo, rack, priority in (("lo0", "b0-r0", 5), ("lo1", "b0-r1", 10)):
        group = podgroup(lo, 2, disruption={"all": {}}, priority=priority)
        world.add(
            msgspec.structs.replace(group, status={"conditions": admitted}),
            *(running(f"{lo}-{h}", f"{rack}-h{h}", 8, priority, lo) for h in range(2)),
        )
    for hi in ("hi1", "hi2"):
        world.add(podgroup(hi, 2, priority=100, topology_key=RACK), *members(hi, 2, gpus=8))
    return world


@pytest.mark.parametrize(
    "between",
    ["one cycle", "the first decision logged, its patches not yet watched"],
)
def test_two_preemptors_never_claim_one_victim(between: str) -> None:
    world = _two_preemptors()
    first = world.decide(key("hi1"))
    assert first is not None
    if between != "one cycle":
        world.log(key("hi1"), first)
    second = world.decide(key("hi2"))
    assert second is not None
    claims = []
    for decision in (first, second):
        patches = _pod_patches(decision)
        marked = {n for n, s in patches.items() if "conditions" in s}
        racks = {
            world.rack_of(s["nominatedNodeName"])
            for s in patches.values()
            if "nominatedNodeName" in s
        }
        claims.append((marked, racks))
    assert claims == [({"lo0-0", "lo0-1"}, {"b0-r0"}), ({"lo1-0", "lo1-1"}, {"b0-r1"})]


def test_a_preemptor_deletes_only_the_victims_it_marked_room_on() -> None:
    world = _two_preemptors()
    world.run(key("hi1"))
    world.run(key("hi2"))
    assert deletes(world.decide(key("hi1"))) == ["lo0-0", "lo0-1"]


def test_room_a_cross_cluster_preemption_holds_is_taken_by_no_gang() -> None:
    """A claim of the multi-cluster dispatcher holds rack 0 for a workload not yet here: a
    gang that would fit there goes to rack 1, and one that fits only there waits."""
    world = GangWorld(nodes())
    room = {h: {GPU: 8, "pods": 1} for h in ("b0-r0-h0", "b0-r0-h1")}
    world.state.claims = {
        "Job/m/ns/big": Claim(
            "Job/m/ns/big", (-100, T0, "uid-big"), CLUSTER, frozenset(), room, T0 + 60_000
        )
    }
    world.add(running("on-r1", "b0-r1-h0", 8, 1))
    world.add(podgroup("small", 1, topology_key=RACK), *members("small", 1, gpus=8))
    assert set(binds(world.run(key("small"))).values()) == {"b0-r1-h1"}
    world.add(podgroup("pair", 2, topology_key=RACK), *members("pair", 2, gpus=8))
    assert not binds(world.run(key("pair")))
