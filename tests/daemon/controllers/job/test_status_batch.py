"""The status batch window (`daemon.controllers.job.status.batched_until`): while pods run, a
counters-only change waits until a window after the Job's previous status write; conditions,
the start time, failed indexes and the write that lets a Job finish go at once."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.job.status import batched_until
from tests.daemon.controllers.builders import (
    SECOND,
    T0,
    T0_TEXT,
    creates,
    key,
    make_job,
    make_pod,
    make_state,
    releases,
    status_patch,
)

WINDOW = SECOND
NOW = T0 + 60 * SECOND
RECENT = NOW - 200  # the previous write, inside the window
WAITS_UNTIL = RECENT + WINDOW


@pytest.mark.parametrize(
    ("patch", "active", "written_at", "window", "until"),
    [
        pytest.param({"ready": 2}, 2, RECENT, WINDOW, WAITS_UNTIL, id="counters-wait"),
        pytest.param(
            {"active": 3, "uncountedTerminatedPods": {"succeeded": ["u"], "failed": []}},
            3,
            RECENT,
            WINDOW,
            WAITS_UNTIL,
            id="accounting-waits",
        ),
        pytest.param({"ready": 2}, 2, NOW - WINDOW, WINDOW, None, id="window-over"),
        pytest.param({"ready": 2}, 2, None, WINDOW, None, id="no-write-known"),
        pytest.param({"ready": 2}, 2, RECENT, 0, None, id="window-0-every-change-at-once"),
        pytest.param({"active": 0}, 0, RECENT, WINDOW, None, id="nothing-running"),
        pytest.param({}, 2, RECENT, WINDOW, None, id="nothing-to-write"),
        pytest.param(
            {"ready": 2, "conditions": []}, 2, RECENT, WINDOW, None, id="conditions-at-once"
        ),
        pytest.param({"startTime": T0_TEXT}, 2, RECENT, WINDOW, None, id="start-at-once"),
        pytest.param({"failedIndexes": "1"}, 2, RECENT, WINDOW, None, id="failed-index-at-once"),
    ],
)
def test_batched_until(
    patch: dict[str, Any], active: int, written_at: int | None, window: int, until: int | None
) -> None:
    assert batched_until(patch, active, written_at, NOW, window) == until


REC = JobReconciler(batch_ms=WINDOW)


def _decide(
    pods: list[dict[str, Any]], written_at: int | None, **job: Any
) -> tuple[dict[str, Any], int | None, str, int, int]:
    """A 3-pod Job observed with 3 active, 0 ready and nothing counted; `pods` are the
    make_pod arguments of its pods. Returns the status written, the requeue, the reason and
    how many pods are created and released."""
    made = make_job(
        parallelism=3,
        completions=3,
        status={"startTime": T0_TEXT, "active": 3, "ready": 0, "terminating": 0},
        **job,
    )
    state = make_state(made, [make_pod(made, f"p{i}", **p) for i, p in enumerate(pods)])
    if written_at is not None:
        state.job_status_written[key(made)] = written_at
    decision = REC.decide(state, key(made), NOW)
    assert decision is not None
    intents = decision.intents
    return (
        status_patch(intents),
        decision.requeue_at,
        decision.reason,
        len(creates(intents)),
        len(releases(intents)),
    )


RUNNING: dict[str, Any] = {"ready": True}


def test_a_rise_inside_the_window_waits_for_it() -> None:
    patch, requeue, reason, _, _ = _decide([RUNNING] * 3, RECENT)
    assert (patch, requeue) == ({}, WAITS_UNTIL)
    assert reason.startswith("StatusBatched: the Job's counters are written at ")


def test_the_same_change_after_the_window_is_written() -> None:
    patch, requeue, _, _, _ = _decide([RUNNING] * 3, NOW - WINDOW)
    assert (patch, requeue) == ({"ready": 3}, None)


def test_the_pods_a_decision_makes_do_not_wait_for_the_status() -> None:
    # One pod gone: a replacement is created now, the counters wait.
    patch, requeue, reason, made, _ = _decide([RUNNING] * 2, RECENT)
    assert (patch, made, requeue) == ({}, 1, WAITS_UNTIL)
    assert "status counters written at " in reason


def test_the_write_that_lets_the_job_finish_goes_at_once() -> None:
    done: dict[str, Any] = {"phase": "Succeeded"}
    patch, requeue, _, _, _ = _decide([done] * 3, RECENT)
    assert patch["uncountedTerminatedPods"]["succeeded"]
    assert patch["active"] == 0
    assert requeue is None


def test_a_finished_pod_among_running_ones_waits_and_keeps_its_finalizer() -> None:
    done: dict[str, Any] = {"phase": "Succeeded"}
    patch, requeue, _, _, released = _decide([done, RUNNING, RUNNING], RECENT)
    assert (patch, requeue, released) == ({}, WAITS_UNTIL, 0)


def test_a_condition_is_written_inside_the_window() -> None:
    # Past the back-off limit: FailureTarget goes at once, with the counters.
    failed: dict[str, Any] = {"phase": "Failed"}
    patch, _, _, _, _ = _decide([failed, RUNNING, RUNNING], RECENT, backoff_limit=0)
    assert [c["type"] for c in patch["conditions"]] == ["FailureTarget"]
    assert patch["uncountedTerminatedPods"]["failed"] == ["uid-p0", "uid-p1", "uid-p2"]
