"""What the fold keeps for the multi-cluster dispatcher: claims follow the decisions at once
and the watched workload otherwise; a claimed victim going and a copy changing wake the
manager's workload."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace

from daemon.controllers.multicluster.projection import (
    CLAIM,
    FOLD,
    ORIGIN,
    PLACED,
    claims_decided,
    claims_failed,
    decode_claim,
    encode_claim,
)
from events.hooks import Change, Dirty
from events.intents import Delete, Intent, Patch
from events.objects import Job, Pod
from events.schema import Decided, Outcome
from events.state import Claim, Refusal, State
from tests.daemon.controllers.gang_builders import T0, running

REF = "Job/manager/ns/big"
CLAIMED = Claim(
    preemptor=REF,
    rank=(-100, T0, "uid-big"),
    cluster="w2",
    victims=frozenset({"w2/ns/v0", "w2/ns/v1"}),
    room={"b0-r0-h0": {"nvidia.com/gpu": 8, "pods": 1}},
    deadline=T0 + 60_000,
)


def job(annotations: dict[str, str] | None = None, name: str = "big", ns: str = "ns") -> Job:
    return Job(name=name, namespace=ns, uid=f"uid-{name}", rv="1", annotations=annotations or {})


def writes(value: Any, *, ref: str = REF, kind: str = "Job", by: str = REF) -> Decided:
    """A decision of `by` writing `value` as the claim annotation of `ref`."""
    _, cluster, namespace, name = ref.split("/")
    patch = Patch(
        cluster, kind, namespace, name, patch={"metadata": {"annotations": {CLAIM: value}}}
    )
    return Decided(at=T0, reconciler="multicluster", key=by, reason="r", intents=(patch,))


def observe(state: State, obj: Any, *, cluster: str = "manager", gone: bool = False) -> Dirty:
    dirty: Dirty = set()
    key = f"{cluster}/{obj.namespace}/{obj.name}"
    change = Change(cluster, key, obj, None, None if gone else obj, False)
    FOLD.observed[type(obj).__name__](state, change, dirty)
    return dirty


def test_a_claim_round_trips_through_its_annotation() -> None:
    assert decode_claim(encode_claim(CLAIMED)) == CLAIMED
    # Sorted, whatever the process's string hashing: a replay must write it byte for byte.
    assert '"victims":["w2/ns/v0","w2/ns/v1"]' in encode_claim(CLAIMED)
    assert decode_claim("{not json") is None
    assert decode_claim('{"preemptor": 3}') is None


@pytest.mark.parametrize(
    ("decisions", "claims"),
    [
        ([writes(encode_claim(CLAIMED))], {REF: CLAIMED}),
        ([writes(encode_claim(CLAIMED)), writes(None)], {}),
        (
            [writes(encode_claim(CLAIMED)), writes(encode_claim(replace(CLAIMED, evicting=True)))],
            {REF: replace(CLAIMED, evicting=True)},
        ),
        # Another preemptor's decision takes this one's claim off (it took its place).
        ([writes(encode_claim(CLAIMED)), writes(None, by="Job/manager/ns/other")], {}),
        ([writes("garbage")], {}),
        # Not a claim: another annotation, another kind.
        ([writes(encode_claim(CLAIMED), kind="Pod")], {}),
    ],
    ids=["reserved", "released", "evicting", "taken-over", "malformed", "not-a-workload"],
)
def test_claims_follow_the_decisions(decisions: list[Decided], claims: dict[str, Claim]) -> None:
    state = State(now=T0)
    for seq, decision in enumerate(decisions, 1):
        claims_decided(state, seq, decision)
    assert state.claims == claims


@pytest.mark.parametrize(
    ("logged", "annotations", "gone", "claims"),
    [
        # The annotation is for people: the log alone says whether a claim stands.
        ({}, {CLAIM: encode_claim(CLAIMED)}, False, {}),
        ({REF: CLAIMED}, {}, False, {REF: CLAIMED}),
        # A workload that goes takes its claim with it.
        ({REF: CLAIMED}, {CLAIM: encode_claim(CLAIMED)}, True, {}),
    ],
    ids=["annotation-alone", "written-late-or-taken-off-early", "deleted"],
)
def test_only_the_log_and_a_deletion_move_a_claim(
    logged: dict[str, Claim], annotations: dict[str, str], gone: bool, claims: dict[str, Claim]
) -> None:
    state = State(now=T0, claims=dict(logged))
    observe(state, job(annotations), gone=gone)
    assert state.claims == claims


def test_a_copy_wakes_the_manager_workload() -> None:
    state = State(now=T0)
    copy = job({ORIGIN: REF})
    assert observe(state, copy, cluster="w1") == {REF}
    assert observe(state, copy, cluster="w1", gone=True) == {REF}
    assert observe(state, job(), cluster="w1") == set()


def _victim(name: str, **changes: Any) -> Pod:
    return replace(running(name, "b0-r0-h0", 8, 5), namespace="ns", **changes)


@pytest.mark.parametrize(
    ("pod", "gone", "woken"),
    [
        (_victim("v0"), True, {REF}),
        (_victim("v0", phase="Failed"), False, {REF}),
        (_victim("v0", deletion_ts=T0), False, {REF}),
        (_victim("v0"), False, set()),
        (_victim("other"), True, set()),
    ],
    ids=["deleted", "terminal", "terminating", "still-running", "not-a-victim"],
)
def test_a_claimed_victim_going_wakes_its_preemptor(pod: Pod, gone: bool, woken: set[str]) -> None:
    state = State(now=T0, claims={REF: CLAIMED})
    assert observe(state, pod, cluster="w2", gone=gone) == woken


EVICTING = replace(CLAIMED, evicting=True)
OTHER = "Job/manager/ns/other"


def delete(name: str, cluster: str = "w2") -> Delete:
    return Delete(cluster, "Pod", "ns", name, precondition_uid=f"uid-{name}")


def mark(name: str) -> Patch:
    status = {"conditions": [{"type": "DisruptionTarget", "status": "True"}]}
    return Patch("w2", "Pod", "ns", name, patch={"status": status}, subresource="status")


REFUSED = {REF: {"w2/ns/v0": Refusal("403 no", T0)}}


@pytest.mark.parametrize(
    ("intent", "code", "by", "refusals", "woken"),
    [
        (delete("v0"), 403, REF, REFUSED, set()),
        (mark("v1"), 422, REF, {REF: {"w2/ns/v1": Refusal("422 no", T0)}}, set()),
        (delete("v0"), 409, REF, {}, set()),
        (mark("v0"), 404, REF, {}, set()),
        (delete("other"), 403, REF, {}, set()),
        (delete("v0", "w1"), 403, REF, {}, set()),
        (delete("v0"), 403, OTHER, {}, set()),
        (delete("v0", "w1"), 0, OTHER, {}, set()),
        (delete("x"), 0, OTHER, {}, {REF}),
    ],
    ids=[
        "delete-refused", "mark-refused", "conflict-decides-again", "gone-already",
        "not-a-victim", "another-cluster", "another-preemptors-decision",
        "unanswered-elsewhere", "unanswered-in-the-claims-cluster-wakes-it",
    ],
)  # fmt: skip
def test_a_refused_eviction_is_kept_for_its_workload(
    intent: Intent, code: int, by: str, refusals: dict[str, dict[str, Refusal]], woken: set[str]
) -> None:
    state = State(now=T0, claims={REF: EVICTING})
    decision = Decided(at=T0, reconciler="multicluster", key=by, reason="r", intents=(intent,))
    outcome = Outcome(at=T0, decision=1, index=0, ok=False, code=code, message="no")
    dirty: Dirty = set()
    claims_failed(state, decision, intent, outcome, dirty)
    assert state.refusals == refusals
    assert dirty == woken


def _placed(state: State) -> None:
    patch = Patch(
        "manager", "Job", "ns", "big", patch={"metadata": {"annotations": {PLACED: "w1"}}}
    )
    decision = Decided(at=T0, reconciler="multicluster", key=REF, reason="r", intents=(patch,))
    claims_decided(state, 2, decision)


@pytest.mark.parametrize(
    ("then", "kept"),
    [
        (lambda state: claims_decided(state, 2, writes(None)), True),
        (lambda state: claims_decided(state, 2, writes(encode_claim(CLAIMED))), True),
        (_placed, False),
        (lambda state: observe(state, job(), gone=True), False),
    ],
    ids=["aborted", "reserved-afresh", "placed", "workload-deleted"],
)
def test_refusals_last_until_the_workload_is_placed_or_deleted(then: Any, kept: bool) -> None:
    state = State(now=T0, claims={REF: EVICTING}, refusals={REF: dict(REFUSED[REF])})
    then(state)
    assert state.refusals == (REFUSED if kept else {})


def test_the_worker_chosen_is_kept_from_its_decision_until_the_workload_goes() -> None:
    state = State(now=T0)
    _placed(state)
    assert state.placed == {REF: "w1"}
    claims_decided(state, 3, writes(None))
    assert state.placed == {REF: "w1"}, "taking a claim off moves no placement"
    observe(state, job(), gone=True)
    assert state.placed == {}
