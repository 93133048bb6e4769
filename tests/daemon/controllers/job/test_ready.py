"""When a drop of `status.ready` is written (`daemon.controllers.job.ready`): held for the grace
window, written once it outlasts it; rises and every other change written at once."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.controllers.job.ready import hold_ready_drop
from daemon.controllers.job.reconciler import JobReconciler
from tests.daemon.controllers.builders import (
    SECOND,
    T0,
    T0_TEXT,
    key,
    make_job,
    make_pod,
    make_state,
    status_patch,
)

GRACE = 10 * SECOND
NOW = T0 + 60 * SECOND


@pytest.mark.parametrize(
    ("written", "ready", "since", "grace", "held_until"),
    [
        pytest.param(8, 0, [NOW - SECOND] * 8, GRACE, NOW + 9 * SECOND, id="drop-held"),
        pytest.param(8, 0, [NOW - SECOND] * 8, 0, None, id="grace-0-is-upstream"),
        pytest.param(8, 0, [NOW - GRACE] * 8, GRACE, None, id="drop-past-the-window"),
        pytest.param(3, 5, [], GRACE, None, id="rise"),
        pytest.param(5, 5, [NOW], GRACE, None, id="unchanged"),
        pytest.param(None, 0, [NOW], GRACE, None, id="never-written"),
        pytest.param(8, 7, [None], GRACE, None, id="no-ready-condition"),
        # Two pods short: one dropped long ago, so the drop is not covered by the window.
        pytest.param(
            8, 6, [NOW - 20 * SECOND, NOW - 2 * SECOND], GRACE, None, id="partly-old-drop"
        ),
        # Two pods short, three recent drops: held until only one of them is left.
        pytest.param(
            8,
            6,
            [NOW - 9 * SECOND, NOW - 5 * SECOND, NOW - 7 * SECOND],
            GRACE,
            NOW + 3 * SECOND,
            id="held-while-recent-drops-cover-it",
        ),
    ],
)
def test_hold_ready_drop(
    written: int | None, ready: int, since: list[int | None], grace: int, held_until: int | None
) -> None:
    assert hold_ready_drop(written, ready, since, NOW, grace) == held_until


def _decide(
    rec: JobReconciler, *, ready_written: int, pods: list[tuple[bool, int | None]], **status: Any
) -> tuple[dict[str, Any], int | None, str]:
    """A running 2-pod Job whose observed status says `ready_written`; `pods` are (ready,
    when Ready last changed); `status` adds observed fields."""
    job = make_job(
        parallelism=2,
        status={
            "startTime": T0_TEXT,
            "active": 2,
            "terminating": 0,
            "ready": ready_written,
            **status,
        },
    )
    made = [
        make_pod(job, f"p{i}", ready=ready, ready_changed=changed)
        for i, (ready, changed) in enumerate(pods)
    ]
    state = make_state(job, made)
    decision = rec.decide(state, key(job), NOW)
    if decision is None:
        return {}, None, ""
    return status_patch(decision.intents), decision.requeue_at, decision.reason


HELD = JobReconciler(ready_decrease_grace_ms=GRACE)
UPSTREAM = JobReconciler(ready_decrease_grace_ms=0)
RECENT = NOW - 2 * SECOND


@pytest.mark.parametrize(
    ("rec", "ready_written", "pods", "status", "patch", "requeue"),
    [
        pytest.param(
            HELD, 2, [(False, RECENT), (False, RECENT)], {}, {}, RECENT + GRACE, id="drop-held"
        ),
        pytest.param(
            HELD, 2, [(True, RECENT), (True, RECENT)], {}, {}, None, id="drop-then-recovery"
        ),
        pytest.param(
            HELD,
            2,
            [(False, NOW - GRACE), (False, NOW - GRACE)],
            {},
            {"ready": 0},
            None,
            id="drop-past-the-window-written",
        ),
        pytest.param(
            HELD, 0, [(True, RECENT), (True, RECENT)], {}, {"ready": 2}, None, id="rise-at-once"
        ),
        pytest.param(
            HELD,
            2,
            [(False, RECENT), (False, RECENT)],
            {"terminating": 1},
            {"ready": 0, "terminating": 0},
            None,
            id="other-change-carries-the-true-count",
        ),
        pytest.param(
            UPSTREAM,
            2,
            [(False, RECENT), (False, RECENT)],
            {},
            {"ready": 0},
            None,
            id="grace-0-is-upstream",
        ),
    ],
)
def test_job_status_ready(
    rec: JobReconciler,
    ready_written: int,
    pods: list[tuple[bool, int | None]],
    status: dict[str, Any],
    patch: dict[str, Any],
    requeue: int | None,
) -> None:
    written, requeue_at, reason = _decide(rec, ready_written=ready_written, pods=pods, **status)
    assert written == patch
    assert requeue_at == requeue
    if requeue is not None:
        assert reason.startswith("ReadyDropHeld: status.ready stays 2 while 0 pod(s) are ready")
