"""A gang admission cut short: the daemon killed after some of its binds and before the status
that announces them. After the restart the admission is finished from the log, or undone
whole; never left partly bound."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import pytest

from daemon.controllers.gang.reconciler import INTERRUPTED
from events.fold import fold
from events.intents import Bind
from events.objects import Node
from events.schema import Outcome
from tests.daemon.controllers.gang.test_workloads import SERVE, ratio_world
from tests.daemon.controllers.gang_builders import (
    CLUSTER,
    NS,
    RACK,
    binds,
    blocker,
    deletes,
    key,
    member,
    members,
    nodes,
    podgroup,
    status_conditions,
)
from tests.daemon.controllers.world import GangWorld

SIZE = 8


def cut_short(bound: int) -> tuple[GangWorld, dict[str, str]]:
    """A group of `SIZE` admitted by a decision of which only the first `bound` binds landed
    before the daemon died; the restart marks the rest unconfirmed (as the supervisor does).
    Returns the world and the binds the admission decided."""
    world = GangWorld(nodes())
    world.add(podgroup("g", SIZE), *members("g", SIZE))
    decision = world.decide(key("g"))
    assert decision is not None
    assert decision.reason.startswith("Admitted")
    seq = world.log(key("g"), decision)
    assert key("g").split("/", 1)[1] in world.state.admissions
    planned = binds(decision)
    for intent in decision.intents:
        if isinstance(intent, Bind) and bound:
            bound -= 1
            pod = world.pod(intent.name)
            world.observe(msgspec.structs.replace(pod, node_name=intent.node, rv="2"))
    for index in range(len(decision.intents)):
        outcome = Outcome(
            at=world.now, decision=seq, index=index, ok=False, message="cut", unconfirmed=True
        )
        fold(world.state, world.state.seq + 1, outcome)
    assert not world.state.awaiting
    return world, planned


def finish_two(world: GangWorld, _: dict[str, str]) -> None:
    """Two bound members ran to completion while the daemon was down."""
    for name in sorted(world.placed("g"))[:2]:
        world.set_pod(name, phase="Succeeded")


def delete_a_pending_member(world: GangWorld, _: dict[str, str]) -> None:
    world.remove(world.pod(f"g-{SIZE - 1:02d}"))


def replace_a_pending_member(world: GangWorld, _: dict[str, str]) -> None:
    """Deleted and made again under the same name: not the pod the admission placed."""
    name = f"g-{SIZE - 1:02d}"
    world.remove(world.pod(name))
    world.add(msgspec.structs.replace(member(name, "g"), uid="uid-again"))


def remove_a_planned_node(world: GangWorld, planned: dict[str, str]) -> None:
    node = world.state.nodes[f"{CLUSTER}//{planned[f'g-{SIZE - 1:02d}']}"]
    world.remove(node)


def cordon_a_planned_node(world: GangWorld, planned: dict[str, str]) -> None:
    node: Node = world.state.nodes[f"{CLUSTER}//{planned[f'g-{SIZE - 1:02d}']}"]
    world.observe(msgspec.structs.replace(node, unschedulable=True, rv="9"))


def fill_a_planned_node(world: GangWorld, planned: dict[str, str]) -> None:
    world.add(blocker("squatter", planned[f"g-{SIZE - 1:02d}"], 8))


def fill_every_node(world: GangWorld, _: dict[str, str]) -> None:
    for i, node in enumerate(sorted(world.state.nodes.values(), key=lambda n: n.name)):
        world.add(blocker(f"squatter-{i}", node.name, 8))


@dataclass(frozen=True)
class Case:
    bound: int
    meanwhile: Callable[[GangWorld, dict[str, str]], None] | None
    # None: finished with the remaining binds; else the start of the requeue's reason.
    revoked: str | None = None
    # The remaining members placed again (a decided node cannot take its pod any more).
    again: bool = False


CASES = {
    "killed before any bind": Case(0, None),
    "killed after one bind": Case(1, None),
    "killed after half the binds": Case(SIZE // 2, None),
    "killed after every bind, before the status": Case(SIZE, None),
    "members finished while it was down": Case(SIZE // 2, finish_two),
    "a placed member deleted": Case(SIZE // 2, delete_a_pending_member, "g: 7 of minCount 8"),
    "a placed member made again": Case(SIZE // 2, replace_a_pending_member, "g: 7 of minCount 8"),
    "a decided node gone": Case(SIZE // 2, remove_a_planned_node, again=True),
    "a decided node cordoned": Case(SIZE // 2, cordon_a_planned_node, again=True),
    "a decided node filled": Case(SIZE // 2, fill_a_planned_node, again=True),
    "a decided node filled, no member bound yet": Case(0, fill_a_planned_node, "g: node b0-r"),
    "a decided node filled, and no room elsewhere": Case(
        SIZE // 2, fill_every_node, "g: node b0-r"
    ),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_an_admission_cut_short_is_finished_from_the_log_or_undone_whole(case: Case) -> None:
    world, planned = cut_short(case.bound)
    if case.meanwhile is not None:
        case.meanwhile(world, planned)
    before = set(world.placed("g"))
    decision = world.decide(key("g"))
    assert decision is not None
    world.carry_out(decision, world.log(key("g"), decision))
    written = status_conditions(decision, "g")["PodGroupScheduled"]
    if case.again:
        assert written["status"] == "True"
        assert "bind(s) placed again of decision" in decision.reason
        assert set(binds(decision)) == {n for n in planned if n not in before}
        assert deletes(decision) == []
        members = [p for p in world.state.pods.values() if p.pod_group == "g"]
        assert all(p.node_name for p in members), "every member bound"
        assert not world.state.admissions, "seen whole: nothing left to finish"
    elif case.revoked is None:
        assert written["status"] == "True"
        assert "bind(s) left of decision" in decision.reason
        assert binds(decision) == {n: planned[n] for n in planned if n not in before}
        assert deletes(decision) == []
        live = [p for p in world.state.pods.values() if p.phase != "Succeeded"]
        assert all(p.node_name for p in live), "every member bound"
        assert {p.name: p.node_name for p in live} == {
            n: planned[n] for n in planned if n in {p.name for p in live}
        }, "each where the admission put it"
        assert not world.state.admissions, "seen whole: nothing left to finish"
    else:
        assert written["status"] == "False"
        assert written["reason"] == "Unschedulable"
        assert written["message"].startswith(f"{INTERRUPTED} {case.revoked}")
        assert binds(decision) == {}
        live_bound = sorted(n for n in before if world.state.pods.get(f"{CLUSTER}/{NS}/{n}"))
        assert live_bound == [], "what it bound is evicted"
        assert deletes(decision) == sorted(before)
        assert not world.state.admissions
        assert world.state.waiting_gangs[CLUSTER], "requeued"


def test_the_admission_is_in_the_state_from_its_decision_until_the_group_is_seen_whole() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("g", 2), *members("g", 2))
    decision = world.decide(key("g"))
    assert decision is not None
    group_key = f"{CLUSTER}/{NS}/g"
    assert group_key not in world.state.admissions
    seq = world.log(key("g"), decision)
    admission = world.state.admissions[group_key]
    assert admission.decision == seq
    assert admission.binds == {
        f"{CLUSTER}/{NS}/{name}": (f"uid-{name}", node) for name, node in binds(decision).items()
    }
    world.carry_out(decision, seq)
    assert group_key not in world.state.admissions


def test_members_that_succeeded_count_towards_min_count() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("g", 4), *members("g", 3))
    world.add(member("g-done", "g", node="b0-r0-h0", phase="Succeeded"))
    decision = world.run(key("g"))
    assert decision is not None
    assert decision.reason.startswith("Admitted"), decision.reason
    assert len(binds(decision)) == 3


@pytest.mark.parametrize("lose_a_decoder", [False, True], ids=["finished", "undone"])
def test_role_groups_admitted_together_are_finished_or_undone_together(
    lose_a_decoder: bool,
) -> None:
    """A role-ratio Workload admits its role groups in one decision; cut short after the
    prefill binds, both are finished, or (a decoder gone) both are undone."""
    world = ratio_world(prefill=1, decode=3)
    decision = world.decide(SERVE)
    assert decision is not None
    seq = world.log(SERVE, decision)
    planned = binds(decision)
    for intent in decision.intents:
        if isinstance(intent, Bind) and intent.name.startswith("serve-prefill"):
            world.observe(msgspec.structs.replace(world.pod(intent.name), node_name=intent.node))
    for index in range(len(decision.intents)):
        fold(
            world.state,
            world.state.seq + 1,
            Outcome(at=world.now, decision=seq, index=index, ok=False, unconfirmed=True),
        )
    if lose_a_decoder:
        world.remove(world.pod("serve-decode-02"))
    again = world.decide(SERVE)
    assert again is not None
    world.carry_out(again, world.log(SERVE, again))
    prefill = status_conditions(again, "serve-prefill")["PodGroupScheduled"]
    decode = status_conditions(again, "serve-decode")["PodGroupScheduled"]
    if lose_a_decoder:
        assert (prefill["status"], decode["status"]) == ("False", "False")
        assert decode["message"].startswith(
            f"{INTERRUPTED} serve-decode: 2 of minCount 3 member(s) left to finish it"
        )
        assert prefill["message"].startswith(
            f"{INTERRUPTED} serve-decode: 2 of minCount 3 member(s) left to finish it"
        )
        assert deletes(again) == ["serve-prefill-00"]
        assert world.placed("serve-prefill") == world.placed("serve-decode") == {}
    else:
        assert (prefill["status"], decode["status"]) == ("True", "True")
        assert binds(again) == {n: node for n, node in planned.items() if "decode" in n}
    assert not world.state.admissions


def refused(world: GangWorld, group: str, failing: int, *, status: bool = True) -> dict[str, str]:
    """Admit `group`, the API server refusing (409) the last `failing` of its binds and,
    unless `status`, its ``PodGroupScheduled=True``; returns the binds it decided."""
    decision = world.decide(key(group))
    assert decision is not None
    assert decision.reason.startswith("Admitted")
    seq = world.log(key(group), decision)
    planned = binds(decision)
    refuse = set(sorted(planned)[len(planned) - failing :])
    for index, intent in enumerate(decision.intents):
        ok = (
            intent.name not in refuse
            if isinstance(intent, Bind)
            else status or intent.kind != "PodGroup"
        )
        if ok:
            world.apply(intent)
        outcome = Outcome(at=world.now, decision=seq, index=index, ok=ok, code=200 if ok else 409)
        fold(world.state, world.state.seq + 1, outcome)
    assert not world.state.awaiting
    assert len(world.placed(group)) == len(planned) - failing
    return planned


@pytest.mark.parametrize("status", [True, False], ids=["status written", "status refused"])
def test_binds_the_api_server_refused_are_made_again_where_they_were_decided(status: bool) -> None:
    world = GangWorld(nodes())
    world.add(podgroup("g", SIZE), *members("g", SIZE))
    planned = refused(world, "g", 2, status=status)
    again = world.decide(key("g"))
    assert again is not None
    assert "AdmissionResumed: ns/g: 2 bind(s) left of decision" in again.reason
    world.carry_out(again, world.log(key("g"), again))
    assert world.placed("g") == planned
    assert world.condition("g")["status"] == "True"
    assert not world.state.admissions


@pytest.mark.parametrize("status", [True, False], ids=["status written", "status refused"])
def test_refused_binds_whose_room_was_taken_are_placed_again_next_to_the_bound_members(
    status: bool,
) -> None:
    """The refused binds gave their room back; a pod of another kind took it before the
    group's next pass. The members left are placed in the rack of those bound."""
    world = GangWorld(nodes("blocks=1,racks=2,hosts=3,gpus=4"))
    world.add(podgroup("g", 6, topology_key=RACK), *members("g", 6))
    planned = refused(world, "g", 2, status=status)
    taken = {planned[n] for n in planned if n not in world.placed("g")}
    for i, node in enumerate(sorted(taken)):
        world.add(blocker(f"squatter-{i}", node, 4))
    again = world.decide(key("g"))
    assert again is not None
    assert "2 bind(s) placed again of decision" in again.reason, again.reason
    assert deletes(again) == []
    world.carry_out(again, world.log(key("g"), again))
    placed = world.placed("g")
    assert len(placed) == 6
    assert {world.rack_of(node) for node in placed.values()} == {world.rack_of(min(taken))}


@pytest.mark.parametrize("status", [True, False], ids=["status written", "status refused"])
def test_refused_binds_with_no_room_left_evict_the_bound_members_and_requeue(status: bool) -> None:
    world = GangWorld(nodes("blocks=1,racks=2,hosts=3,gpus=4"))
    world.add(podgroup("g", 6, topology_key=RACK), *members("g", 6))
    refused(world, "g", 2, status=status)
    bound = sorted(world.placed("g"))
    rack = {world.rack_of(node) for node in world.placed("g").values()}
    for i, node in enumerate(sorted(world.state.nodes.values(), key=lambda n: n.name)):
        if world.rack_of(node.name) in rack:
            world.add(blocker(f"squatter-{i}", node.name, 4))
    again = world.decide(key("g"))
    assert again is not None
    assert deletes(again) == bound, "never left partly bound"
    written = status_conditions(again, "g")["PodGroupScheduled"]
    assert (written["status"], written["reason"]) == ("False", "Unschedulable")
    assert written["message"].startswith(INTERRUPTED)


def test_an_admission_seen_admitted_before_its_binds_is_kept_until_they_are_seen() -> None:
    world = GangWorld(nodes())
    world.add(podgroup("g", 2), *members("g", 2))
    decision = world.decide(key("g"))
    assert decision is not None
    world.log(key("g"), decision)
    group_key = f"{CLUSTER}/{NS}/g"
    first, second = [i for i in decision.intents if isinstance(i, Bind)]
    for intent in decision.intents:
        if not isinstance(intent, Bind):
            world.apply(intent)
    assert world.condition("g")["status"] == "True"
    assert group_key in world.state.admissions, "its pods are not bound yet"
    world.apply(first)
    assert group_key in world.state.admissions, "one is not bound yet"
    world.apply(second)
    assert group_key not in world.state.admissions
