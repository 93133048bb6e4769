"""Expectations as `fold` keeps them: a decision's intents are expected until the watch shows
them (or they fail, or the TTL passes), and the deciding key awaits them meanwhile."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import pytest
from msgspec.structs import replace

from events.expectations import TTL_MS, rv_reached
from events.fold import fold
from events.intents import Bind, Create, Delete, Intent, Patch
from events.objects import Pod
from events.schema import Change, Decided, Event, Outcome, Tick
from events.state import Expectation, State, empty_state
from tests.events.builders import make_pod, observed

KEY = "Job/c1/ns/j1"
OTHER_KEY = "Job/c1/ns/j2"
REF = "Pod/c1/ns/p1"

POD = make_pod("p1")  # uid "uid-ns-p1", rv "1", unbound
CREATE = Create("c1", "Pod", "ns", "p1", body={"spec": {"containers": []}})
DELETE = Delete("c1", "Pod", "ns", "p1", precondition_uid=POD.uid)
BIND = Bind("c1", "Pod", "ns", "p1", node="n1", uid=POD.uid)
PATCH = Patch("c1", "Pod", "ns", "p1", patch={"metadata": {"labels": {"a": "b"}}})


def pod(**changes: object) -> Pod:
    """POD with some fields changed."""
    return replace(POD, **changes)


def seen(obj: Pod, change: Change = "MODIFIED", *, at: int = 0, cluster: str = "c1") -> Event:
    return observed(obj, change=change, at=at, cluster=cluster)


def gone(obj: Pod = POD) -> Event:
    return observed(obj, change="DELETED")


@dataclass(frozen=True)
class Decide:
    """A step: `key` decides `intents`; the seq it gets is what later `Reply` steps answer."""

    intents: tuple[Intent, ...]
    key: str = KEY
    at: int = 0


@dataclass(frozen=True)
class Reply:
    """A step: the actuator's outcome for intent `index` of the newest `Decide` step."""

    ok: bool = True
    rv: str = ""
    uid: str = ""
    index: int = 0
    at: int = 0


Step = Event | Decide | Reply


class Player:
    """Folds steps one at a time (seq 1, 2, ...), checking after each that `awaiting` counts
    exactly the keys of `expected`, and never zero or less."""

    def __init__(self) -> None:
        self.state = empty_state()
        self.seqs: list[int] = []  # the seq of every Decide step, in order
        self.dirty: list[set[str]] = []  # the dirty set of each step

    def step(self, step: Step) -> None:
        seq = self.state.seq + 1
        event: Event
        if isinstance(step, Decide):
            event = Decided(
                at=step.at, reconciler="r", key=step.key, reason="go", intents=step.intents
            )
            self.seqs.append(seq)
        elif isinstance(step, Reply):
            event = Outcome(
                at=step.at,
                decision=self.seqs[-1],
                index=step.index,
                ok=step.ok,
                resource_version=step.rv,
                uid=step.uid,
            )
        else:
            event = step
        dirty: set[str] = set()
        fold(self.state, seq, event, dirty)
        self.dirty.append(dirty)
        assert_counts_exact(self.state)


def play(steps: Sequence[Step]) -> Player:
    player = Player()
    for step in steps:
        player.step(step)
    return player


def assert_counts_exact(state: State) -> None:
    assert state.awaiting == dict(Counter(e.key for e in state.expected.values()))
    assumed: dict[str, dict[str, int]] = {}
    for ref, e in state.expected.items():
        if e.node and e.requests:
            charged = assumed.setdefault(f"{ref.split('/')[1]}//{e.node}", {})
            for name, amount in {**e.requests, "pods": 1}.items():
                charged[name] = charged.get(name, 0) + amount
    assert state.assumed == assumed
    assert all(count > 0 for count in state.awaiting.values())


# ---------------------------------------------------------------------------------------------
# A decision sets expectations


def test_decision_expects_every_intent_and_its_key_awaits_them() -> None:
    intents = (
        Create("c1", "Pod", "ns", "p1"),
        Patch("c1", "Job", "ns", "j1", patch={"status": {}}, subresource="status"),
        Delete("c1", "Pod", "ns", "p2", precondition_uid="uid-p2"),
        Bind("c1", "Pod", "ns", "p3", node="n1"),
    )
    played = play([Tick(at=5), Decide(intents, at=7)])
    assert played.state.expected == {
        "Pod/c1/ns/p1": Expectation(2, KEY, "create", since=7),
        "Job/c1/ns/j1": Expectation(2, KEY, "patch", since=7),
        "Pod/c1/ns/p2": Expectation(2, KEY, "delete", since=7),
        "Pod/c1/ns/p3": Expectation(2, KEY, "bind", since=7, node="n1"),
    }
    assert played.state.awaiting == {KEY: 4}


def test_decision_without_intents_expects_nothing() -> None:
    played = play([Decide(())])
    assert (played.state.expected, played.state.awaiting) == ({}, {})


def test_keys_await_separately() -> None:
    played = play(
        [
            Decide((CREATE, replace(CREATE, name="p2"))),
            Decide((replace(CREATE, name="p3"),), key=OTHER_KEY),
        ]
    )
    assert played.state.awaiting == {KEY: 2, OTHER_KEY: 1}


# ---------------------------------------------------------------------------------------------
# What clears each op. `waiting[i]` is whether REF is still expected after step i.

T, F = True, False

CLEARING = [
    # create: any object of that name appears
    pytest.param(
        [Decide((CREATE,)), Reply(rv="2"), seen(pod(rv="2"), "ADDED")],
        [T, T, F],
        id="create-observed-after-ok",
    ),
    pytest.param(
        [Decide((CREATE,)), seen(pod(rv="2"), "ADDED"), Reply(rv="2")],
        [T, F, F],
        id="create-observed-before-outcome",
    ),
    pytest.param(
        [seen(POD, "ADDED"), Decide((CREATE,)), Reply()],
        [F, T, F],
        id="create-already-in-state-cleared-by-ok",
    ),
    pytest.param([Decide((CREATE,)), Reply(rv="2")], [T, T], id="create-ok-not-yet-observed"),
    pytest.param(
        [Decide((CREATE,)), seen(make_pod("p2"), "ADDED")], [T, T], id="create-other-name"
    ),
    pytest.param(
        [Decide((CREATE,)), seen(make_pod("p1", namespace="other"), "ADDED")],
        [T, T],
        id="create-other-namespace",
    ),
    pytest.param(
        [Decide((CREATE,)), seen(POD, "ADDED", cluster="c2")], [T, T], id="create-other-cluster"
    ),
    pytest.param([Decide((CREATE,)), gone()], [T, T], id="create-deleted-is-not-created"),
    pytest.param([Decide((CREATE,)), Reply(ok=False)], [T, F], id="create-failed"),
    # delete: gone, terminating, or another object (uid) under the name
    pytest.param(
        [seen(POD), Decide((DELETE,)), Reply(), gone()], [F, T, T, F], id="delete-gone-after-ok"
    ),
    pytest.param(
        [seen(POD), Decide((DELETE,)), Reply(), seen(pod(rv="2", deletion_ts=9))],
        [F, T, T, F],
        id="delete-terminating-after-ok",
    ),
    pytest.param(
        [seen(POD), Decide((DELETE,)), gone(), Reply()],
        [F, T, F, F],
        id="delete-gone-before-outcome",
    ),
    pytest.param(
        [seen(POD), Decide((DELETE,)), seen(pod(rv="2", deletion_ts=9)), Reply()],
        [F, T, F, F],
        id="delete-terminating-before-outcome",
    ),
    pytest.param(
        [seen(POD), Decide((DELETE,)), Reply(uid=POD.uid), seen(pod(rv="3", uid="uid-new"))],
        [F, T, T, F],
        id="delete-uid-differs-from-outcome",
    ),
    pytest.param(
        [seen(POD), Decide((DELETE,)), Reply(uid=POD.uid), seen(pod(rv="2"))],
        [F, T, T, T],
        id="delete-same-uid-modified",
    ),
    pytest.param([Decide((DELETE,)), Reply()], [T, F], id="delete-already-gone-in-state"),
    pytest.param([seen(POD), Decide((DELETE,)), Reply(ok=False)], [F, T, F], id="delete-failed"),
    # bind: the pod shows a node
    pytest.param(
        [seen(POD), Decide((BIND,)), Reply(rv="2"), seen(pod(rv="2", node_name="n1"))],
        [F, T, T, F],
        id="bind-bound-after-ok",
    ),
    pytest.param(
        [seen(POD), Decide((BIND,)), seen(pod(rv="2", node_name="n1")), Reply(rv="2")],
        [F, T, F, F],
        id="bind-bound-before-outcome",
    ),
    pytest.param(
        [seen(POD), Decide((BIND,)), Reply(rv="2"), seen(pod(rv="2", phase="Failed"))],
        [F, T, T, T],
        id="bind-modified-unbound",
    ),
    pytest.param([seen(POD), Decide((BIND,)), Reply()], [F, T, T], id="bind-ok-not-yet-observed"),
    pytest.param([seen(POD), Decide((BIND,)), gone()], [F, T, F], id="bind-pod-gone"),
    pytest.param([seen(POD), Decide((BIND,)), Reply(ok=False)], [F, T, F], id="bind-failed"),
    # patch: an ok outcome, and the state at (or past) the resourceVersion it returned
    pytest.param(
        [seen(POD), Decide((PATCH,)), Reply(rv="5"), seen(pod(rv="4")), seen(pod(rv="5"))],
        [F, T, T, T, F],
        id="patch-numeric-older-then-equal",
    ),
    pytest.param(
        [seen(POD), Decide((PATCH,)), Reply(rv="5"), seen(pod(rv="12"))],
        [F, T, T, F],
        id="patch-numeric-newer-not-lexicographic",
    ),
    pytest.param(
        [seen(POD), Decide((PATCH,)), seen(pod(rv="5")), Reply(rv="5")],
        [F, T, T, F],
        id="patch-observed-before-outcome-equal",
    ),
    pytest.param(
        [seen(POD), Decide((PATCH,)), seen(pod(rv="7")), Reply(rv="5")],
        [F, T, T, F],
        id="patch-observed-before-outcome-newer",
    ),
    pytest.param(
        [seen(POD), Decide((PATCH,)), seen(pod(rv="3")), Reply(rv="5")],
        [F, T, T, T],
        id="patch-observed-before-outcome-older",
    ),
    pytest.param(
        [seen(POD), Decide((PATCH,)), seen(pod(rv="9")), seen(pod(rv="10"))],
        [F, T, T, T],
        id="patch-observations-without-outcome",
    ),
    pytest.param(
        [
            seen(pod(rv="a1")),
            Decide((PATCH,)),
            Reply(rv="b7"),
            seen(pod(rv="c9")),
            seen(pod(rv="b7")),
        ],
        [F, T, T, T, F],
        id="patch-opaque-only-equal",
    ),
    pytest.param(
        [seen(pod(rv="a1")), Decide((PATCH,)), seen(pod(rv="b7")), Reply(rv="b7")],
        [F, T, T, F],
        id="patch-opaque-observed-before-outcome",
    ),
    pytest.param([seen(POD), Decide((PATCH,)), Reply(rv="")], [F, T, F], id="patch-ok-without-rv"),
    pytest.param([seen(POD), Decide((PATCH,)), gone()], [F, T, F], id="patch-object-gone"),
    pytest.param([seen(POD), Decide((PATCH,)), Reply(ok=False)], [F, T, F], id="patch-failed"),
]


@pytest.mark.parametrize(("steps", "waiting"), CLEARING)
def test_what_clears_an_expectation(steps: list[Step], waiting: list[bool]) -> None:
    assert len(steps) == len(waiting)
    played = Player()
    for step, expected in zip(steps, waiting, strict=True):
        was = REF in played.state.expected
        played.step(step)
        now_waiting = REF in played.state.expected
        assert now_waiting == expected, f"after {step!r}"
        if was and not now_waiting:
            assert KEY not in played.state.awaiting
        if now_waiting:
            assert played.state.awaiting == {KEY: 1}


@pytest.mark.parametrize(
    ("steps", "dirty"),
    [
        pytest.param(
            [Decide((CREATE,)), seen(POD, "ADDED")], {REF, KEY}, id="cleared-by-observation"
        ),
        pytest.param(
            [Decide((CREATE,)), seen(make_pod("p2"), "ADDED")],
            {"Pod/c1/ns/p2"},
            id="unrelated-observation",
        ),
        pytest.param(
            [seen(POD), Decide((PATCH,)), seen(pod(rv="5"))], {REF}, id="observed-not-cleared"
        ),
        pytest.param([Decide((CREATE,)), Tick(at=TTL_MS)], {KEY}, id="cleared-by-ttl"),
        pytest.param([Decide((CREATE,)), Tick(at=TTL_MS - 1)], set(), id="tick-before-ttl"),
    ],
)
def test_a_cleared_expectation_makes_its_key_dirty(steps: list[Step], dirty: set[str]) -> None:
    assert play(steps).dirty[-1] == dirty


# ---------------------------------------------------------------------------------------------
# TTL, in event time


@pytest.mark.parametrize(
    ("steps", "waiting"),
    [
        pytest.param([Tick(at=1000 + TTL_MS - 1)], True, id="just-before"),
        pytest.param([Tick(at=1000 + TTL_MS)], False, id="at-ttl"),
        pytest.param([Tick(at=1000 + 10 * TTL_MS)], False, id="long-after"),
        pytest.param(
            [seen(make_pod("p9"), "ADDED", at=1000 + TTL_MS)], True, id="only-a-tick-expires"
        ),
        pytest.param(
            [seen(make_pod("p9"), "ADDED", at=1000 + TTL_MS), Tick(at=5)],
            False,
            id="tick-uses-folded-now",
        ),
        pytest.param(
            [Reply(rv="9", at=1000 + TTL_MS - 1), Tick(at=1000 + TTL_MS)],
            False,
            id="done-but-unobserved-expires",
        ),
    ],
)
def test_ttl_expiry(steps: list[Step], waiting: bool) -> None:
    played = play([seen(POD), Decide((PATCH,), at=1000), *steps])
    assert (REF in played.state.expected) is waiting
    assert (KEY in played.state.awaiting) is waiting


def test_ttl_counts_from_each_decision() -> None:
    played = play(
        [
            Decide((CREATE,), at=0),
            Decide((replace(CREATE, name="p2"),), at=100),
            Decide((replace(CREATE, name="p3"),), key=OTHER_KEY, at=200),
            Tick(at=TTL_MS + 100),
        ]
    )
    assert set(played.state.expected) == {"Pod/c1/ns/p3"}
    assert played.state.awaiting == {OTHER_KEY: 1}
    assert played.dirty[-1] == {KEY}


CREATE_P2 = replace(CREATE, name="p2")
CREATE_P3 = replace(CREATE, name="p3")


@pytest.mark.parametrize(
    ("forget_oldest", "steps", "left"),
    [
        # The oldest seen before its TTL: the next-oldest expires at its own TTL, not sooner.
        pytest.param(
            False,
            [seen(POD, "ADDED", at=150), Tick(at=TTL_MS + 99)],
            {"Pod/c1/ns/p2", "Pod/c1/ns/p3"},
            id="oldest-seen",
        ),
        pytest.param(
            False,
            [seen(POD, "ADDED", at=150), Tick(at=TTL_MS + 99), Tick(at=TTL_MS + 100)],
            {"Pod/c1/ns/p3"},
            id="next-oldest-at-its-ttl",
        ),
        pytest.param(
            False,
            [Tick(at=TTL_MS), Tick(at=TTL_MS + 199), Tick(at=TTL_MS + 200)],
            set(),
            id="one-by-one",
        ),
        # Everything expired, then a new decision: its own TTL counts.
        pytest.param(
            False,
            [
                Tick(at=TTL_MS + 200),
                Decide((CREATE,), at=TTL_MS + 300),
                Tick(at=2 * TTL_MS + 299),
            ],
            {REF},
            id="new-after-empty",
        ),
        # A state that does not know its oldest expectation (a snapshot from before it was
        # kept) looks through them all.
        pytest.param(True, [Tick(at=TTL_MS + 100)], {"Pod/c1/ns/p3"}, id="unknown-oldest"),
    ],
)
def test_a_tick_expires_exactly_the_expectations_past_their_ttl(
    forget_oldest: bool, steps: list[Step], left: set[str]
) -> None:
    played = play(
        [Decide((CREATE,), at=0), Decide((CREATE_P2,), at=100), Decide((CREATE_P3,), at=200)]
    )
    if forget_oldest:
        played.state.expected_since = 0
    for step in steps:
        played.step(step)
    assert set(played.state.expected) == left


# ---------------------------------------------------------------------------------------------
# A newer decision on the same ref replaces the older expectation


def test_newer_decision_of_another_key_takes_the_ref_over() -> None:
    played = play(
        [seen(POD), Decide((DELETE, replace(DELETE, name="p2"))), Decide((PATCH,), key=OTHER_KEY)]
    )
    first, second = played.seqs
    assert played.state.expected[REF] == Expectation(second, OTHER_KEY, "patch", since=0)
    assert played.state.expected["Pod/c1/ns/p2"].decision == first
    assert played.state.awaiting == {KEY: 1, OTHER_KEY: 1}


def test_outcome_of_the_replaced_decision_does_not_settle_the_newer_one() -> None:
    played = play([seen(POD), Decide((DELETE,)), Decide((PATCH,), key=OTHER_KEY)])
    first, second = played.seqs
    fold(played.state, 10, Outcome(at=0, decision=first, index=0, ok=False))
    assert played.state.expected[REF].decision == second
    assert played.state.awaiting == {OTHER_KEY: 1}
    fold(played.state, 11, Outcome(at=0, decision=second, index=0, ok=False))
    assert (played.state.expected, played.state.awaiting) == ({}, {})


def test_newer_decision_of_the_same_key_keeps_one_count_per_ref() -> None:
    played = play(
        [
            seen(POD),
            Decide((CREATE, replace(CREATE, name="p2"))),
            Decide((DELETE,)),
            Decide((PATCH, PATCH)),
        ]
    )
    assert played.state.expected[REF].op == "patch"
    assert played.state.expected[REF].decision == played.seqs[-1]
    assert played.state.awaiting == {KEY: 2}


def test_replacement_releases_the_older_key_entirely() -> None:
    played = play([Decide((CREATE,)), Decide((BIND,), key=OTHER_KEY)])
    assert played.state.awaiting == {OTHER_KEY: 1}


# ---------------------------------------------------------------------------------------------
# awaiting counts down and vanishes at zero; stray events never push it below


P2 = make_pod("p2")
P3 = make_pod("p3")
THREE = (CREATE, replace(CREATE, name="p2"), replace(BIND, name="p3"))


@pytest.mark.parametrize(
    ("steps", "awaiting"),
    [
        pytest.param([], [], id="none"),
        pytest.param([seen(POD, "ADDED")], [{KEY: 2}], id="one-observed"),
        pytest.param(
            [seen(POD, "ADDED"), seen(P2, "ADDED"), seen(replace(P3, node_name="n1"))],
            [{KEY: 2}, {KEY: 1}, {}],
            id="all-observed",
        ),
        pytest.param(
            [Reply(ok=False, index=i) for i in range(3)],
            [{KEY: 2}, {KEY: 1}, {}],
            id="all-failed",
        ),
        pytest.param(
            [seen(POD, "ADDED"), seen(POD), Reply(index=0), Reply(ok=False, index=0)],
            [{KEY: 2}] * 4,
            id="repeats-of-a-cleared-ref",
        ),
        pytest.param(
            [Reply(ok=False, index=1), Tick(at=TTL_MS), Tick(at=2 * TTL_MS), seen(POD, "ADDED")],
            [{KEY: 2}, {}, {}, {}],
            id="expired-then-observed",
        ),
    ],
)
def test_awaiting_counts_down_to_absent(steps: list[Step], awaiting: list[dict[str, int]]) -> None:
    played = play([seen(P3, "ADDED"), Decide(THREE)])
    assert played.state.awaiting == {KEY: 3}
    for step, expected in zip(steps, awaiting, strict=True):
        played.step(step)
        assert played.state.awaiting == expected


# ---------------------------------------------------------------------------------------------
# Outcomes that match no intent are ignored


@pytest.mark.parametrize(
    ("decision", "index"),
    [
        pytest.param(2, 1, id="index-past-end"),
        pytest.param(2, 99, id="index-far-past-end"),
        pytest.param(2, -1, id="negative-index"),
        pytest.param(99, 0, id="unknown-decision"),
        pytest.param(1, 0, id="not-a-decision-seq"),
    ],
)
def test_outcome_matching_no_intent_is_ignored(decision: int, index: int) -> None:
    played = play([seen(POD), Decide((DELETE,))])
    assert played.seqs == [2]
    before = (dict(played.state.expected), dict(played.state.awaiting))
    dirty: set[str] = set()
    # A failure would clear the expectation at once if it were taken as this intent's.
    fold(played.state, 3, Outcome(at=0, decision=decision, index=index, ok=False), dirty)
    assert (played.state.expected, played.state.awaiting) == before
    assert played.state.expected[REF] == Expectation(2, KEY, "delete", since=0)
    assert list(played.state.inflight) == [2]
    assert dirty == set()


# ---------------------------------------------------------------------------------------------
# rv_reached


@pytest.mark.parametrize(
    ("current", "wanted", "reached"),
    [
        pytest.param("5", "5", True, id="numeric-equal"),
        pytest.param("6", "5", True, id="numeric-newer"),
        pytest.param("4", "5", False, id="numeric-older"),
        pytest.param("10", "9", True, id="numeric-not-lexicographic-newer"),
        pytest.param("9", "10", False, id="numeric-not-lexicographic-older"),
        pytest.param("007", "7", True, id="numeric-leading-zeros"),
        pytest.param("abc", "abc", True, id="opaque-equal"),
        pytest.param("abd", "abc", False, id="opaque-unordered-1"),
        pytest.param("abc", "abd", False, id="opaque-unordered-2"),
        pytest.param("6", "a5", False, id="numeric-vs-opaque"),
        pytest.param("a6", "5", False, id="opaque-vs-numeric"),
        pytest.param("-1", "-2", False, id="signed-is-opaque"),
        pytest.param("5", "", True, id="nothing-wanted"),
        pytest.param("", "", True, id="both-empty"),
        pytest.param("", "5", False, id="current-empty"),
        pytest.param("²", "1", False, id="superscript-digit-is-opaque"),
        pytest.param("3", "²", False, id="superscript-digit-wanted"),
    ],
)
def test_rv_reached(current: str, wanted: str, reached: bool) -> None:
    assert rv_reached(current, wanted) is reached


def test_odd_resource_version_does_not_break_the_fold() -> None:
    played = play([seen(POD), Decide((PATCH,)), Reply(rv="5"), seen(pod(rv="²"))])
    assert REF in played.state.expected


# ---------------------------------------------------------------------------------------------
# A bind takes room on its node until the watch shows the pod bound (kube-scheduler's assume)

GPU_POD = make_pod("p1", requests={"nvidia.com/gpu": 2})
CHARGED = {"c1//n1": {"nvidia.com/gpu": 2, "pods": 1}}


@pytest.mark.parametrize(
    ("steps", "assumed"),
    [
        ([seen(GPU_POD, "ADDED"), Decide((BIND,))], CHARGED),
        ([seen(GPU_POD, "ADDED"), Decide((BIND,)), Reply(ok=True)], CHARGED),
        ([seen(GPU_POD, "ADDED"), Decide((BIND,)), Reply(ok=False)], {}),
        ([seen(GPU_POD, "ADDED"), Decide((BIND,)), seen(replace(GPU_POD, node_name="n1"))], {}),
        ([seen(GPU_POD, "ADDED"), Decide((BIND,)), gone(GPU_POD)], {}),
        ([seen(GPU_POD, "ADDED"), Decide((BIND,)), Decide((DELETE,))], {}),
        # A pod the state does not hold, or one already bound, charges nothing.
        ([Decide((BIND,))], {}),
        ([seen(replace(GPU_POD, node_name="n2"), "ADDED"), Decide((BIND,))], {}),
        # Past the TTL the charge goes with the expectation.
        ([seen(GPU_POD, "ADDED"), Decide((BIND,)), Tick(at=TTL_MS)], {}),
    ],
    ids=[
        "decided",
        "carried-out-not-yet-watched",
        "failed",
        "watched-bound",
        "pod-gone",
        "replaced-by-a-delete",
        "unknown-pod",
        "already-bound",
        "expired",
    ],
)
def test_a_decided_bind_charges_its_node_until_the_watch_shows_it(
    steps: list[Step], assumed: dict[str, dict[str, int]]
) -> None:
    assert play(steps).state.assumed == assumed


# A preemption's nomination holds the room the same way, until the watch shows the patch.

NOMINATE = Patch(
    "c1", "Pod", "ns", "p1", patch={"status": {"nominatedNodeName": "n1"}}, subresource="status"
)
NOMINATED = replace(GPU_POD, nominated="n1", rv="2")


@pytest.mark.parametrize(
    ("steps", "assumed"),
    [
        ([seen(GPU_POD, "ADDED"), Decide((NOMINATE,))], CHARGED),
        ([seen(GPU_POD, "ADDED"), Decide((NOMINATE,)), Reply(ok=True, rv="2")], CHARGED),
        ([seen(GPU_POD, "ADDED"), Decide((NOMINATE,)), Reply(ok=False)], {}),
        (
            [seen(GPU_POD, "ADDED"), Decide((NOMINATE,)), Reply(ok=True, rv="2"), seen(NOMINATED)],
            {},
        ),
        ([seen(GPU_POD, "ADDED"), Decide((NOMINATE,)), gone(GPU_POD)], {}),
        # Not a nomination: a patch of the pod's labels, or of another status field.
        ([seen(GPU_POD, "ADDED"), Decide((PATCH,))], {}),
        (
            [
                seen(GPU_POD, "ADDED"),
                Decide((replace(NOMINATE, patch={"status": {"conditions": []}}),)),
            ],
            {},
        ),
        # Letting a nomination go (null) claims nothing.
        (
            [
                seen(NOMINATED, "ADDED"),
                Decide((replace(NOMINATE, patch={"status": {"nominatedNodeName": None}}),)),
            ],
            {},
        ),
    ],
    ids=[
        "decided",
        "carried-out-not-yet-watched",
        "failed",
        "watched",
        "pod-gone",
        "labels",
        "other-status",
        "cleared",
    ],
)
def test_a_decided_nomination_charges_its_node_until_the_watch_shows_it(
    steps: list[Step], assumed: dict[str, dict[str, int]]
) -> None:
    assert play(steps).state.assumed == assumed
