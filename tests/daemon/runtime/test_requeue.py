"""The requeue timers and the back-off of failing keys (pure: event times in ms)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from daemon.runtime.requeue import Requeues
from daemon.service import run
from daemon.service.config import Cluster, Settings
from events.schema import Decided, Outcome
from events.state import InFlight


@dataclass(frozen=True)
class Schedule:
    at: int
    key: str


@dataclass(frozen=True)
class Due:
    now: int
    keys: list[str]


@dataclass(frozen=True)
class Next:
    at: int | None


@pytest.mark.parametrize(
    "steps",
    [
        pytest.param([Schedule(10, "a"), Due(9, []), Due(10, ["a"]), Due(20, [])], id="once"),
        pytest.param(
            [Schedule(30, "b"), Schedule(10, "a"), Schedule(20, "c"), Due(30, ["a", "c", "b"])],
            id="time-order",
        ),
        # A later request for a key already due earlier is dropped...
        pytest.param(
            [Schedule(10, "a"), Schedule(20, "a"), Due(10, ["a"]), Due(20, [])], id="later"
        ),
        # ...an earlier one replaces it, and the superseded time hands nothing out.
        pytest.param(
            [Schedule(20, "a"), Schedule(10, "a"), Due(10, ["a"]), Due(20, [])], id="earlier"
        ),
        # Once handed out, the key may be scheduled again.
        pytest.param(
            [Schedule(10, "a"), Due(10, ["a"]), Schedule(15, "a"), Due(15, ["a"])], id="again"
        ),
        # The clock is armed for the earliest time still waiting...
        pytest.param([Next(None), Schedule(30, "b"), Schedule(10, "a"), Next(10)], id="next"),
        # ...which is neither a superseded time nor one handed out.
        pytest.param(
            [Schedule(20, "a"), Schedule(10, "a"), Due(10, ["a"]), Next(None)], id="next-stale"
        ),
        pytest.param(
            [Schedule(10, "a"), Schedule(20, "b"), Due(15, ["a"]), Next(20)], id="next-after-due"
        ),
    ],
)
def test_schedule_and_due(steps: list[Schedule | Due | Next]) -> None:
    requeues = Requeues(1000, 60_000)
    for step in steps:
        if isinstance(step, Schedule):
            requeues.schedule(step.at, step.key)
        elif isinstance(step, Next):
            assert requeues.next_at() == step.at
        else:
            assert requeues.due(step.now) == step.keys


def test_a_failing_key_backs_off_doubling_to_the_cap() -> None:
    requeues = Requeues(1000, 5000)
    ends = [requeues.failed("k", 0) for _ in range(5)]
    assert ends == [1000, 2000, 4000, 5000, 5000]
    requeues.succeeded("k")
    assert requeues.failed("k", 0) == 1000, "a success starts the back-off over"


def test_a_key_backing_off_is_held_back_and_put_back_for_when_it_ends() -> None:
    requeues = Requeues(1000, 60_000)
    requeues.schedule(500, "k")  # an earlier timer of the key's own
    requeues.failed("k", 0)  # backs off until 1000
    assert requeues.due(500) == ["k"]
    assert requeues.ready({"k", "other"}, 500) == {"other"}
    assert requeues.due(999) == []
    assert requeues.due(1000) == ["k"]
    assert requeues.ready({"k"}, 1000) == {"k"}


def test_backing_off_names_the_keys_whose_wait_has_not_ended() -> None:
    requeues = Requeues(1000, 60_000)
    requeues.failed("a", 0)  # until 1000
    requeues.failed("b", 500)  # until 1500
    assert requeues.backing_off(999) == {"a", "b"}
    assert requeues.backing_off(1000) == {"b"}
    requeues.succeeded("b")
    assert requeues.backing_off(1000) == set()
    assert requeues.failed("a", 2000) == 4000, "an ended wait still counts toward doubling"


def test_a_key_not_failing_again_for_a_whole_cap_is_forgotten() -> None:
    requeues = Requeues(1000, 60_000)
    requeues.failed("gone", 0)  # until 1000; its object is deleted meanwhile
    requeues.failed("again", 0)
    assert requeues.backing_off(60_999) == set()
    assert requeues.failed("again", 60_999) == 60_999 + 2000, "within a cap: still doubling"
    assert requeues.backing_off(61_000) == {"again"}
    assert requeues.failed("gone", 61_000) == 62_000, "a later failure starts over"


def test_clear_forgets_everything() -> None:
    requeues = Requeues(1000, 60_000)
    requeues.schedule(10, "a")
    requeues.failed("b", 0)
    requeues.clear()
    assert requeues.next_at() is None
    assert requeues.due(10**9) == []
    assert requeues.ready({"b"}, 0) == {"b"}


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("outcome", "backs_off"),
    [
        pytest.param(Outcome(at=1, decision=7, index=0, ok=False, code=500), True, id="failed"),
        pytest.param(
            Outcome(at=1, decision=7, index=0, ok=False, message="cut", unconfirmed=True),
            False,
            id="unconfirmed",
        ),
    ],
)
async def test_an_unconfirmed_intent_is_no_failure_for_the_back_off(
    outcome: Outcome, backs_off: bool
) -> None:
    """A crash in a create burst leaves its intents unconfirmed; counted as failures, they
    held the Job back for the whole back-off (a minute) after the restart."""
    daemon = run.build(Settings(clusters=[Cluster(name="c")]), [])
    decision = Decided(at=1, reconciler="job", key="Job/c/ns/j", reason="r", intents=())
    daemon.state.inflight[7] = InFlight(decision, [0])
    daemon._note_outcome(outcome)
    assert daemon._requeues.ready({"Job/c/ns/j"}, now=2) == (set() if backs_off else {"Job/c/ns/j"})
