"""The dispatchers: AllAtOnce nominates every worker; Incremental adds `step` workers per
round without admission, in the configured order."""

from __future__ import annotations

import pytest

from daemon.controllers.multicluster.dispatch import (
    ALL_AT_ONCE,
    INCREMENTAL,
    Dispatcher,
    next_round,
    nominated,
)

WORKERS = ("w1", "w2", "w3", "w4", "w5")
ROUND = 1000


@pytest.mark.parametrize(
    ("dispatcher", "after", "workers", "more_at"),
    [
        (Dispatcher(ALL_AT_ONCE), 0, WORKERS, None),
        (Dispatcher(ALL_AT_ONCE), 10 * ROUND, WORKERS, None),
        (Dispatcher(INCREMENTAL, 2, ROUND), 0, ("w1", "w2"), ROUND),
        (Dispatcher(INCREMENTAL, 2, ROUND), ROUND - 1, ("w1", "w2"), ROUND),
        (Dispatcher(INCREMENTAL, 2, ROUND), ROUND, ("w1", "w2", "w3", "w4"), 2 * ROUND),
        (Dispatcher(INCREMENTAL, 2, ROUND), 2 * ROUND, WORKERS, None),
        (Dispatcher(INCREMENTAL, 2, ROUND), 9 * ROUND, WORKERS, None),
        (Dispatcher(INCREMENTAL, 9, ROUND), 0, WORKERS, None),
        # A clock that went back counts as no time passed.
        (Dispatcher(INCREMENTAL, 2, ROUND), -5, ("w1", "w2"), ROUND),
    ],
    ids=[
        "all-at-once",
        "all-at-once-later",
        "first-step",
        "just-before-the-round-ends",
        "second-round",
        "third-round-every-worker",
        "long-after",
        "step-beyond-the-workers",
        "clock-back",
    ],
)
def test_which_workers_hold_a_copy(
    dispatcher: Dispatcher, after: int, workers: tuple[str, ...], more_at: int | None
) -> None:
    since = 10_000
    assert nominated(dispatcher, WORKERS, since, since + after) == list(workers)
    expected = None if more_at is None else since + more_at
    assert next_round(dispatcher, WORKERS, since, since + after) == expected
