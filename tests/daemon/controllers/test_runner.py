"""`daemon.controllers.runner`: which keys may decide, and which decisions become events."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from daemon.controllers.base import Decision, Reconciler
from daemon.controllers.runner import Verdict, decide, decide_all, may_decide
from events.fold import fold
from events.intents import Create, Intent, Patch
from events.schema import Decided, Outcome, Tick
from events.state import State, empty_state
from tests.events.builders import make_pod, observed

JOB = "Job/c1/ns/j1"
JOB2 = "Job/c1/ns/j2"
POD = "Pod/c1/ns/p1"
NODE = "Node/c1//n1"
CREATE_P1 = Create("c1", "Pod", "ns", "p1")
PATCH_J1 = Patch("c1", "Job", "ns", "j1", patch={"status": {"active": 1}}, subresource="status")

Calls = list[tuple[str, str, int]]


class Scripted:
    """A fake reconciler that answers from a table (None for keys not in it) and records each
    call as (its name, key, now) in a journal it may share with others."""

    def __init__(
        self,
        name: str,
        kinds: frozenset[str],
        answers: Mapping[str, Decision],
        journal: Calls | None = None,
    ) -> None:
        self.name = name
        self.kinds = kinds
        self.answers = answers
        self.journal: Calls = [] if journal is None else journal

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        self.journal.append((self.name, key, now))
        return self.answers.get(key)


class Constant:
    """A fake reconciler with the same verdict on every key of its kinds."""

    def __init__(self, name: str, kinds: frozenset[str], decision: Decision | None) -> None:
        self._name = name
        self._kinds = kinds
        self._decision = decision

    @property
    def name(self) -> str:
        return self._name

    @property
    def kinds(self) -> frozenset[str]:
        return self._kinds

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        return self._decision


def state_at(now: int, *events: Decided | Tick) -> State:
    state = empty_state()
    fold(state, 1, Tick(at=now))
    for seq, event in enumerate(events, start=2):
        fold(state, seq, event)
    return state


def logged(
    key: str, reason: str, reconciler: str = "r", intents: tuple[Intent, ...] = ()
) -> Decided:
    return Decided(at=0, reconciler=reconciler, key=key, reason=reason, intents=intents)


# ---------------------------------------------------------------------------------------------
# may_decide


@pytest.mark.parametrize(
    ("awaiting", "key", "may"),
    [
        pytest.param({}, JOB, True, id="nothing-awaited"),
        pytest.param({JOB: 1}, JOB, False, id="key-awaits-one"),
        pytest.param({JOB: 3}, JOB, False, id="key-awaits-several"),
        pytest.param({JOB2: 1}, JOB, True, id="another-key-awaits"),
        pytest.param({POD: 1}, JOB, True, id="a-pod-key-awaits"),
    ],
)
def test_may_decide(awaiting: dict[str, int], key: str, may: bool) -> None:
    state = empty_state()
    state.awaiting = dict(awaiting)
    assert may_decide(state, key) is may


def test_may_decide_follows_the_fold() -> None:
    state = state_at(0, logged(JOB, "create", intents=(CREATE_P1,)))
    assert not may_decide(state, JOB)
    fold(state, 9, observed(make_pod("p1")))
    assert may_decide(state, JOB)


# ---------------------------------------------------------------------------------------------
# decide


@pytest.mark.parametrize(
    ("history", "decision", "logs"),
    [
        pytest.param([], Decision("Waiting"), True, id="first-reason"),
        pytest.param([], Decision(""), True, id="first-reason-empty"),
        pytest.param([logged(JOB, "Waiting")], Decision("Waiting"), False, id="same-reason"),
        pytest.param(
            [logged(JOB, "Waiting")],
            Decision("Waiting", requeue_at=50),
            False,
            id="same-reason-with-requeue",
        ),
        pytest.param([logged(JOB, "Waiting")], Decision("Admitted"), True, id="reason-changed"),
        pytest.param(
            [logged(JOB, "Waiting"), logged(JOB, "Admitted")],
            Decision("Waiting"),
            True,
            id="reason-changed-back",
        ),
        pytest.param(
            [logged(JOB, "Waiting")],
            Decision("Waiting", (PATCH_J1,)),
            True,
            id="same-reason-with-intents",
        ),
        pytest.param(
            [logged(JOB, "Waiting", intents=(PATCH_J1,))],
            Decision("Waiting", (PATCH_J1,)),
            True,
            id="same-reason-same-intents",
        ),
        pytest.param(
            [logged(JOB, "Waiting", reconciler="other")],
            Decision("Waiting"),
            True,
            id="same-reason-of-another-reconciler",
        ),
        pytest.param(
            [logged(JOB2, "Waiting")], Decision("Waiting"), True, id="same-reason-of-another-key"
        ),
    ],
)
def test_decide_logs_only_what_is_new(
    history: list[Decided], decision: Decision, logs: bool
) -> None:
    state = state_at(1234, *history)
    reconciler = Scripted("r", frozenset({"Job"}), {JOB: decision})
    event, returned = decide(state, reconciler, JOB)
    assert returned == decision
    assert reconciler.journal == [("r", JOB, 1234)]
    if logs:
        assert event == Decided(
            at=1234, reconciler="r", key=JOB, reason=decision.reason, intents=decision.intents
        )
    else:
        assert event is None


def test_decide_with_nothing_to_say() -> None:
    state = state_at(5, logged(JOB, "Waiting"))
    assert decide(state, Constant("r", frozenset({"Job"}), None), JOB) == (None, None)


def test_decide_passes_the_folded_time_and_stamps_it() -> None:
    state = state_at(700, Tick(at=900), Tick(at=800))
    assert state.now == 900
    reconciler = Scripted("r", frozenset({"Job"}), {JOB: Decision("Go", (CREATE_P1,))})
    event, _ = decide(state, reconciler, JOB)
    assert reconciler.journal == [("r", JOB, 900)]
    assert event is not None
    assert event.at == 900


def test_decide_consults_the_reason_the_fold_recorded() -> None:
    state = state_at(0)
    reconciler = Constant("r", frozenset({"Job"}), Decision("Waiting"))
    first, _ = decide(state, reconciler, JOB)
    assert first is not None
    assert decide(state, reconciler, JOB)[0] is not None  # nothing folded yet
    fold(state, 10, first)
    assert state.reasons == {f"r {JOB}": "Waiting"}
    assert decide(state, reconciler, JOB)[0] is None


# ---------------------------------------------------------------------------------------------
# decide_all


def test_decide_all_visits_sorted_keys_and_reconcilers_in_order() -> None:
    journal: Calls = []
    first = Scripted("first", frozenset({"Job", "Pod"}), {}, journal)
    second = Scripted("second", frozenset({"Job"}), {}, journal)
    third = Scripted("third", frozenset({"Pod", "Node"}), {}, journal)
    state = state_at(42)
    keys = {POD, JOB2, NODE, JOB, "Workload/c1/ns/w"}
    assert decide_all(state, [first, second, third], keys) == []
    assert journal == [
        ("first", JOB, 42),
        ("second", JOB, 42),
        ("first", JOB2, 42),
        ("second", JOB2, 42),
        ("third", NODE, 42),
        ("first", POD, 42),
        ("third", POD, 42),
    ]


def test_decide_all_kind_is_the_first_segment_of_the_key() -> None:
    journal: Calls = []
    jobs = Scripted("jobs", frozenset({"Job"}), {}, journal)
    keys = ["JobSet/c1/ns/Job", "Pod/Job/Job/Job", "Job/c1/ns/x"]
    decide_all(state_at(0), [jobs], keys)
    assert journal == [("jobs", "Job/c1/ns/x", 0)]


@pytest.mark.parametrize(
    ("awaiting", "visited"),
    [
        pytest.param({}, [JOB, JOB2, POD], id="none-awaits"),
        pytest.param({JOB: 1}, [JOB2, POD], id="one-awaits"),
        pytest.param({JOB: 2, POD: 1}, [JOB2], id="two-await"),
        pytest.param({"Job/c1/ns/other": 1}, [JOB, JOB2, POD], id="unvisited-key-awaits"),
    ],
)
def test_decide_all_skips_awaiting_keys(awaiting: dict[str, int], visited: list[str]) -> None:
    journal: Calls = []
    jobs = Scripted("jobs", frozenset({"Job"}), {}, journal)
    pods = Scripted("pods", frozenset({"Pod"}), {}, journal)
    state = state_at(0)
    state.awaiting = dict(awaiting)
    decide_all(state, [jobs, pods], [POD, JOB2, JOB])
    assert [key for _, key, _ in journal] == visited


def test_decide_all_verdicts() -> None:
    journal: Calls = []
    waiting = Decision("Waiting", requeue_at=99)
    admit = Decision("Admit", (PATCH_J1,))
    create = Decision("Create", (CREATE_P1,))
    gang = Scripted("gang", frozenset({"Job"}), {JOB: admit, JOB2: waiting}, journal)
    pods = Scripted("pods", frozenset({"Job"}), {JOB: create}, journal)
    state = state_at(500, logged(JOB2, "Waiting", reconciler="gang"))
    verdicts = decide_all(state, [gang, pods], [JOB2, JOB])
    assert verdicts == [
        Verdict(
            JOB,
            admit,
            Decided(at=500, reconciler="gang", key=JOB, reason="Admit", intents=(PATCH_J1,)),
        ),
        Verdict(
            JOB,
            create,
            Decided(at=500, reconciler="pods", key=JOB, reason="Create", intents=(CREATE_P1,)),
        ),
        Verdict(JOB2, waiting, None),
    ]
    # pods answers None for JOB2: no verdict, but it was asked.
    assert journal == [
        ("gang", JOB, 500),
        ("pods", JOB, 500),
        ("gang", JOB2, 500),
        ("pods", JOB2, 500),
    ]


def test_decide_all_accepts_any_iterable_of_keys() -> None:
    reconciler = Constant("r", frozenset({"Job"}), Decision("x"))
    verdicts = decide_all(state_at(0), [reconciler], (key for key in [JOB2, JOB]))
    assert [v.key for v in verdicts] == [JOB, JOB2]


def test_folding_a_decision_holds_its_key_until_the_expectation_clears() -> None:
    journal: Calls = []
    pods = make_pod("p1")
    creator = Scripted(
        "creator", frozenset({"Job"}), {JOB: Decision("Create", (CREATE_P1,))}, journal
    )
    reconcilers: list[Reconciler] = [creator]
    state = state_at(10)

    (verdict,) = decide_all(state, reconcilers, [JOB])
    assert verdict.event is not None
    fold(state, 2, verdict.event)
    assert state.awaiting == {JOB: 1}

    journal.clear()
    assert decide_all(state, reconcilers, [JOB]) == []
    assert journal == []

    fold(state, 3, Tick(at=20))
    assert decide_all(state, reconcilers, [JOB]) == []
    assert journal == []

    dirty: set[str] = set()
    fold(state, 4, observed(pods, at=30), dirty)
    assert JOB in dirty
    (again,) = decide_all(state, reconcilers, dirty)
    assert journal == [("creator", JOB, 30)]
    assert again.event is not None
    assert again.event.at == 30


def test_a_failed_outcome_also_frees_the_key() -> None:
    creator = Constant("creator", frozenset({"Job"}), Decision("Create", (CREATE_P1,)))
    state = state_at(0)
    (verdict,) = decide_all(state, [creator], [JOB])
    assert verdict.event is not None
    fold(state, 2, verdict.event)
    assert decide_all(state, [creator], [JOB]) == []
    fold(state, 3, Outcome(at=1, decision=2, index=0, ok=False))
    assert [v.key for v in decide_all(state, [creator], [JOB])] == [JOB]


def test_a_decision_without_intents_does_not_hold_its_key() -> None:
    waiter = Constant("waiter", frozenset({"Job"}), Decision("Waiting"))
    state = state_at(0)
    (verdict,) = decide_all(state, [waiter], [JOB])
    assert verdict.event is not None
    fold(state, 2, verdict.event)
    assert decide_all(state, [waiter], [JOB]) == [Verdict(JOB, Decision("Waiting"), None)]


# ---------------------------------------------------------------------------------------------
# A reconciler that raises


class Raising(Constant):
    """A fake reconciler that raises `error` on `key` and answers `decision` elsewhere."""

    def __init__(self, key: str, error: Exception, decision: Decision | None) -> None:
        super().__init__("broken", frozenset({"Job"}), decision)
        self._key = key
        self._error = error

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        if key == self._key:
            raise self._error
        return super().decide(state, key, now)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        pytest.param(KeyError("minCount"), "ReconcilerError: KeyError: 'minCount'", id="key-error"),
        pytest.param(
            ValueError("line one\n  line two"),
            "ReconcilerError: ValueError: line one line two",
            id="message-on-one-line",
        ),
        pytest.param(ZeroDivisionError(), "ReconcilerError: ZeroDivisionError:", id="no-message"),
    ],
)
def test_a_reconciler_that_raises_costs_its_key_a_decision_saying_so(
    error: Exception, reason: str
) -> None:
    reconciler = Raising(JOB, error, Decision("Fine"))
    state = state_at(700)
    verdicts = decide_all(state, [reconciler], [JOB, JOB2])
    assert [(v.key, v.decision, v.event) for v in verdicts] == [
        (JOB, Decision(reason), Decided(at=700, reconciler="broken", key=JOB, reason=reason)),
        (JOB2, Decision("Fine"), Decided(at=700, reconciler="broken", key=JOB2, reason="Fine")),
    ]
    failed, fine = verdicts
    assert failed.error is not None
    assert failed.error.startswith("Traceback")
    assert type(error).__name__ in failed.error
    assert fine.error is None
    # Folded, the failure is the key's last reason: the same failure again is not logged twice,
    # and `decide` (what --verify runs) reproduces it.
    fold(state, 1, failed.event)  # type: ignore[arg-type]
    assert decide(state, reconciler, JOB) == (None, Decision(reason))


class RaisingQueue(Constant):
    """A fake queueing reconciler whose `release` raises on one queue and releases `JOB2`
    from any other."""

    def __init__(self, broken: str) -> None:
        super().__init__("queued", frozenset({"Job"}), Decision("Fine"))
        self._broken = broken

    @property
    def queues(self) -> frozenset[str]:
        return frozenset({"Queue"})

    def release(self, state: State, queue: str) -> list[str]:
        if queue == self._broken:
            raise LookupError("no such queue")
        return [JOB2]


def test_a_queue_whose_release_raises_costs_that_queue_this_pass() -> None:
    reconciler = RaisingQueue("Queue/c1")
    state = state_at(700)
    verdicts = decide_all(state, [reconciler], ["Queue/c1", "Queue/c2", JOB])
    failed, *decided = verdicts
    assert (failed.key, failed.decision, failed.event, failed.queue) == (
        "Queue/c1",
        Decision("ReconcilerError: LookupError: no such queue"),
        None,
        True,
    )
    assert failed.error is not None
    assert "LookupError" in failed.error
    # What a queue released first, in its order, then the other keys.
    assert [(v.key, v.decision.reason, v.queue) for v in decided] == [
        (JOB2, "Fine", False),
        (JOB, "Fine", False),
    ]


class FifoCycle:
    """A fake scheduling cycle: releases its queue's keys oldest first and records, in order,
    what it is asked to decide; each decision's reason says how many came before it."""

    def __init__(self, order: list[str], seen: list[str]) -> None:
        self._order = order
        self.seen = seen

    def release(self, queue: str) -> list[str]:
        return list(self._order)

    def decide(self, key: str, now: int) -> Decision | None:
        self.seen.append(key)
        return Decision(f"Decided: {len(self.seen) - 1} before")


class Fifo(Constant):
    """A fake cycling reconciler (`Cycling`) whose cycles share the list of what was decided."""

    def __init__(self, order: list[str]) -> None:
        super().__init__("fifo", frozenset({"Job"}), None)
        self._order = order
        self.memos: list[list[str]] = []

    @property
    def queues(self) -> frozenset[str]:
        return frozenset({"Queue"})

    def release(self, state: State, queue: str) -> list[str]:
        return list(self._order)

    def memo(self) -> list[str]:
        self.memos.append([])
        return self.memos[-1]

    def cycle(self, state: State, memo: list[str]) -> FifoCycle:
        return FifoCycle(self._order, memo)


OLDER, YOUNGER = "Job/c1/ns/zz-waiting-longest", "Job/c1/ns/aa-waiting-since"


@pytest.mark.parametrize("dirty", [["Queue/c1", JOB], ["Queue/c1", JOB, YOUNGER]])
def test_what_a_queue_releases_is_decided_first_in_the_queue_s_order_in_one_cycle(
    dirty: list[str],
) -> None:
    """Room is charged in the order the queue holds its keys (the oldest first), not in the
    keys' sorted order, and one pass is one cycle."""
    reconciler = Fifo([OLDER, YOUNGER])
    memos: dict[str, Any] = {}
    verdicts = decide_all(state_at(700), [reconciler], dirty, memos)
    assert [(v.key, v.decision.reason) for v in verdicts] == [
        (OLDER, "Decided: 0 before"),
        (YOUNGER, "Decided: 1 before"),
        (JOB, "Decided: 2 before"),
    ]
    decide_all(state_at(800), [reconciler], dirty, memos)
    assert len(reconciler.memos) == 1  # the memo is the caller's, kept between passes


@pytest.mark.parametrize(
    ("backing_off", "decided"),
    [
        pytest.param(set(), [OLDER, YOUNGER, JOB], id="none"),
        pytest.param({JOB}, [OLDER, YOUNGER], id="a-key-asked-for"),
        pytest.param({OLDER}, [YOUNGER, JOB], id="a-key-a-queue-releases"),
    ],
)
def test_a_key_backing_off_is_not_decided_even_when_a_queue_releases_it(
    backing_off: set[str], decided: list[str]
) -> None:
    """A write of the key failed: it waits out its back-off (the caller decides it then), or a
    refused write would be sent again at every pass a queue releases it in."""
    verdicts = decide_all(
        state_at(700), [Fifo([OLDER, YOUNGER])], ["Queue/c1", JOB], {}, backing_off
    )
    assert [v.key for v in verdicts] == decided
