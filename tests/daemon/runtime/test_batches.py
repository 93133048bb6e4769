"""Which owners marked by their objects' changes wait out their batch window (pure: event
times in ms)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from daemon.controllers.base import Decision
from daemon.runtime.batches import Batches, windows
from events.state import State


@dataclass(frozen=True)
class Plain:
    kinds: frozenset[str]
    name: str = "plain"

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        return None


@dataclass(frozen=True)
class Batched(Plain):
    batch_windows: dict[str, int] = field(default_factory=dict)


JOBS = frozenset({"Job", "Pod"})


@pytest.mark.parametrize(
    ("reconcilers", "expected"),
    [
        pytest.param([Plain(JOBS)], {}, id="none-batches"),
        pytest.param([Batched(JOBS, batch_windows={"Job": 1000})], {"Job": 1000}, id="one"),
        pytest.param([Batched(JOBS, batch_windows={"Job": 0})], {}, id="zero-is-off"),
        # Holding a key holds it for every reconciler of its kind.
        pytest.param(
            [Batched(JOBS, batch_windows={"Job": 1000}), Plain(frozenset({"Job"}))],
            {},
            id="another-of-the-kind-does-not",
        ),
        pytest.param(
            [Batched(JOBS, batch_windows={"Job": 1000}), Plain(frozenset({"JobSet"}))],
            {"Job": 1000},
            id="another-kind-does-not-matter",
        ),
        pytest.param(
            [
                Batched(JOBS, batch_windows={"Job": 1000}),
                Batched(frozenset({"Job"}), batch_windows={"Job": 300}),
            ],
            {"Job": 300},
            id="the-shortest-of-two",
        ),
    ],
)
def test_windows(reconcilers: list[Plain], expected: dict[str, int]) -> None:
    assert windows(reconcilers) == expected


@dataclass(frozen=True)
class Decided:
    now: int
    keys: list[str]


@dataclass(frozen=True)
class Held:
    now: int
    owners: list[str]
    expected: dict[str, int]


J, K, S = "Job/c/ns/a", "Job/c/ns/b", "JobSet/c/ns/s"


@pytest.mark.parametrize(
    "steps",
    [
        # The first change after a quiet spell is decided at once.
        pytest.param([Held(0, [J], {})], id="never-decided"),
        pytest.param([Decided(0, [J]), Held(400, [J], {J: 1000})], id="inside-the-window"),
        pytest.param([Decided(0, [J]), Held(1000, [J], {})], id="window-over"),
        # The window runs from the latest decision, whatever prompted it.
        pytest.param([Decided(0, [J]), Decided(700, [J]), Held(1200, [J], {J: 1700})], id="latest"),
        pytest.param([Decided(0, [J]), Held(10, [J, K], {J: 1000})], id="per-key"),
        # Kinds nobody batches are never held.
        pytest.param([Decided(0, [S]), Held(10, [S], {})], id="unbatched-kind"),
        # Forgetting expired decisions keeps the younger ones.
        pytest.param(
            [Decided(0, [J]), Decided(900, [K]), Decided(1100, []), Held(1200, [J, K], {K: 1900})],
            id="expiry",
        ),
    ],
)
def test_held(steps: list[Decided | Held]) -> None:
    batches = Batches({"Job": 1000})
    for step in steps:
        if isinstance(step, Decided):
            batches.decided(step.keys, step.now)
        else:
            assert batches.held(step.owners, step.now) == step.expected


def test_clear_forgets_every_decision() -> None:
    batches = Batches({"Job": 1000})
    batches.decided([J], 0)
    batches.clear()
    assert batches.held([J], 10) == {}
