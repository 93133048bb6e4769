"""`job.projection`: the per-Job records the fold keeps from pod changes — the back-off record
(failures since the newest success, when the newest finished) and the pod ordinal watermark —
event by event, as `fold` drives them."""

from __future__ import annotations

from typing import Any

import pytest
from msgspec.structs import replace

from daemon.controllers.job import projection as jobs
from events.fold import fold, fold_all
from events.intents import Intent, Patch
from events.objects import JOB_TRACKING_FINALIZER, POD_ORDINAL_ANNOTATION, Job, OwnerRef, Pod
from events.schema import Change, Decided, Event
from events.state import BackoffRecord, State, decode_state, empty_state, encode_state
from tests.events.builders import job_owner, make_job, make_pod, observed

REF = "Job/c1/ns/train"
TOF = make_job("train")  # no podReplacementPolicy and no podFailurePolicy: TerminatingOrFailed
ONLY_FAILED = replace(TOF, spec={**TOF.spec, "podReplacementPolicy": "Failed"})
WITH_POLICY = replace(TOF, spec={**TOF.spec, "podFailurePolicy": {"rules": []}})
SUCCESSOR = replace(TOF, uid="uid-job-train-2")
DELETING = 100_000  # a deletion timestamp; less the 30 s grace: finished at 70_000
GRACE_MS = 30_000


def pod(
    name: str = "p",
    *,
    phase: str = "Running",
    tracked: bool = True,
    deleting: int | None = None,
    finished: int | None = None,
    owner: OwnerRef | None = None,
    ordinal: str | None = None,
) -> Pod:
    """A pod of Job `train` on a node (tracked: with kbatchd's finalizer)."""
    base = make_pod(
        name, node="n1", phase=phase, owner=owner or job_owner("train"), deletion_ts=deleting
    )
    return replace(
        base,
        finalizers=(JOB_TRACKING_FINALIZER,) if tracked else (),
        finished=finished,
        annotations={} if ordinal is None else {POD_ORDINAL_ANNOTATION: ordinal},
    )


def seen(obj: Any, change: Change = "MODIFIED") -> Event:
    return observed(obj, change=change)


def run(events: list[Event]) -> State:
    return fold_all(empty_state(), list(enumerate(events, start=1)))


def added(job: Job = TOF) -> Event:
    return observed(job)


# ---------------------------------------------------------------------------------------------
# The back-off record


BACKOFF_CASES = [
    pytest.param(
        [added(), seen(pod()), seen(pod(phase="Failed", finished=100))],
        {REF: BackoffRecord(1, 100)},
        id="failed-with-the-finalizer",
    ),
    pytest.param(
        [added(), seen(pod(phase="Failed", finished=100), "ADDED")],
        {REF: BackoffRecord(1, 100)},
        id="first-seen-already-failed",
    ),
    pytest.param(
        [
            added(),
            seen(pod()),
            seen(pod(tracked=False)),  # released for suspension or scale-down
            seen(pod(tracked=False, deleting=DELETING)),
            seen(pod(tracked=False, deleting=DELETING, phase="Failed", finished=DELETING)),
        ],
        {},
        id="killed-after-release-not-counted",
    ),
    pytest.param(
        [
            added(),
            seen(pod(phase="Failed", finished=100)),
            seen(pod(phase="Failed", finished=100, tracked=False)),
            seen(pod(phase="Failed", finished=100, tracked=False), "DELETED"),
        ],
        {REF: BackoffRecord(1, 100)},
        id="counted-once-and-outlives-the-pod",
    ),
    pytest.param(
        [
            added(),
            seen(pod("a", phase="Failed", finished=200)),
            seen(pod("b", phase="Failed", finished=100)),
        ],
        {REF: BackoffRecord(2, 200)},
        id="failures-add-up-newest-time-kept",
    ),
    pytest.param(
        [
            added(),
            seen(pod("a", phase="Failed", finished=100)),
            seen(pod("b", phase="Succeeded", finished=150)),
        ],
        {},
        id="success-resets",
    ),
    pytest.param(
        [
            added(),
            seen(pod("a", phase="Failed", finished=100)),
            seen(pod("b", phase="Succeeded", finished=150, tracked=False)),
        ],
        {REF: BackoffRecord(1, 100)},
        id="untracked-success-does-not-reset",
    ),
    pytest.param(
        [
            added(),
            seen(pod("a", phase="Failed", finished=100)),
            seen(pod("b", phase="Succeeded", finished=150)),
            seen(pod("c", phase="Failed", finished=300)),
        ],
        {REF: BackoffRecord(1, 300)},
        id="failures-after-the-success",
    ),
    pytest.param(
        [added(), seen(pod()), seen(pod(deleting=DELETING))],
        {REF: BackoffRecord(1, DELETING - GRACE_MS)},
        id="terminating-or-failed-deletion-fails-at-once",
    ),
    pytest.param(
        [
            added(),
            seen(pod()),
            seen(pod(deleting=DELETING)),
            seen(pod(deleting=DELETING, phase="Failed", finished=DELETING + 5)),
        ],
        {REF: BackoffRecord(1, DELETING - GRACE_MS)},
        id="terminating-or-failed-deleted-then-failed-counts-once",
    ),
    pytest.param(
        [
            added(),
            seen(pod("a", phase="Failed", finished=50_000)),
            seen(pod()),
            seen(pod(deleting=DELETING)),
            seen(pod(deleting=DELETING, phase="Succeeded", finished=DELETING + 5)),
        ],
        {REF: BackoffRecord(2, DELETING - GRACE_MS)},
        id="terminating-or-failed-deleted-then-succeeded-stays-a-failure",
    ),
    pytest.param(
        [added(ONLY_FAILED), seen(pod()), seen(pod(deleting=DELETING))],
        {},
        id="failed-policy-deletion-is-no-failure-yet",
    ),
    pytest.param(
        [added(WITH_POLICY), seen(pod()), seen(pod(deleting=DELETING))],
        {},
        id="pod-failure-policy-forces-failed",
    ),
    pytest.param(
        [
            added(ONLY_FAILED),
            seen(pod()),
            seen(pod(deleting=DELETING)),
            seen(pod(deleting=DELETING, phase="Failed", finished=DELETING + 5)),
        ],
        {REF: BackoffRecord(1, DELETING + 5)},
        id="failed-policy-counts-when-failed",
    ),
    pytest.param(
        [
            added(ONLY_FAILED),
            seen(pod("a", phase="Failed", finished=50_000)),
            seen(pod()),
            seen(pod(deleting=DELETING)),
            seen(pod(deleting=DELETING, phase="Succeeded", finished=DELETING + 5)),
        ],
        {},
        id="failed-policy-deleted-then-succeeded-resets",
    ),
    pytest.param(
        [
            added(ONLY_FAILED),
            seen(pod()),
            seen(pod(deleting=DELETING)),
            seen(pod(deleting=DELETING, tracked=False)),  # stuck on a NotReady node: released
        ],
        {REF: BackoffRecord(1, DELETING - GRACE_MS)},
        id="failed-policy-released-while-terminating",
    ),
    pytest.param(
        [added(), seen(pod(phase="Failed", finished=100, owner=OwnerRef("Job", "train", "x")))],
        {},
        id="not-the-controller",
    ),
    pytest.param(
        [added(SUCCESSOR), seen(pod(phase="Failed", finished=100))],
        {},
        id="pod-of-an-earlier-job-of-that-name",
    ),
    pytest.param(
        [seen(pod(phase="Failed", finished=100))],
        {},
        id="job-unknown",
    ),
    pytest.param(
        [added(), seen(pod()), seen(pod(phase="Failed", finished=100), "DELETED")],
        {},
        id="deleted-event-not-counted",
    ),
    pytest.param(
        [added(), seen(pod(phase="Failed", finished=100)), seen(TOF, "DELETED")],
        {},
        id="dropped-with-the-job",
    ),
    pytest.param(
        [
            seen(pod("a", phase="Failed", finished=100), "ADDED"),
            seen(pod("b", phase="Succeeded", finished=150), "ADDED"),
            seen(pod("c", phase="Failed", finished=300), "ADDED"),
            seen(pod("d", phase="Failed", finished=200), "ADDED"),
            seen(pod("e", phase="Failed", finished=400, tracked=False), "ADDED"),
            seen(pod("f", deleting=DELETING), "ADDED"),
            added(),
        ],
        {REF: BackoffRecord(3, DELETING - GRACE_MS)},  # c, d and the deleted f
        id="pods-seen-before-their-job",
    ),
    pytest.param(
        [
            seen(pod("a", phase="Failed", finished=100), "ADDED"),
            seen(pod("f", deleting=DELETING), "ADDED"),
            added(ONLY_FAILED),
        ],
        {REF: BackoffRecord(1, 100)},
        id="pods-seen-before-their-job-failed-policy",
    ),
    pytest.param(
        [added(), seen(pod(phase="Failed", finished=100)), seen(SUCCESSOR)],
        {},
        id="job-replaced-under-the-same-name",
    ),
    pytest.param(
        [added(), seen(pod(phase="Failed", finished=100)), seen(replace(TOF, rv="7"))],
        {REF: BackoffRecord(1, 100)},
        id="job-update-keeps-it",
    ),
]


@pytest.mark.parametrize(("events", "expected"), BACKOFF_CASES)
def test_backoff_record(events: list[Event], expected: dict[str, BackoffRecord]) -> None:
    assert run(events).job_backoff == expected


@pytest.mark.parametrize(("events", "expected"), BACKOFF_CASES)
def test_backoff_record_survives_a_snapshot_anywhere(
    events: list[Event], expected: dict[str, BackoffRecord]
) -> None:
    for cut in range(len(events) + 1):
        state = decode_state(encode_state(run(events[:cut])))
        fold_all(state, list(enumerate(events[cut:], start=cut + 1)))
        assert state.job_backoff == expected, f"snapshot after {cut} events"


# ---------------------------------------------------------------------------------------------
# The pod ordinal watermark


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        pytest.param([seen(pod(ordinal="4"), "ADDED")], {REF: 5}, id="one-more-than-seen"),
        pytest.param(
            [seen(pod("a", ordinal="4"), "ADDED"), seen(pod("b", ordinal="2"), "ADDED")],
            {REF: 5},
            id="never-goes-down",
        ),
        pytest.param(
            [
                added(),
                seen(pod("a", ordinal="7")),
                seen(pod("a", ordinal="7", tracked=False)),
                seen(pod("a", ordinal="7", tracked=False), "DELETED"),
            ],
            {REF: 8},
            id="outlives-the-pod",
        ),
        pytest.param(
            [seen(pod(str(i), ordinal=text), "ADDED") for i, text in enumerate(("x", "-1", ""))]
            + [seen(pod("big", ordinal="9" * 40), "ADDED")],
            {},
            id="malformed-ignored",
        ),
        pytest.param(
            [seen(replace(pod(ordinal="3"), owners=()), "ADDED")],
            {},
            id="no-controller",
        ),
        pytest.param(
            [added(), seen(pod(ordinal="3")), seen(TOF, "DELETED")],
            {},
            id="dropped-with-the-job",
        ),
    ],
)
def test_pod_ordinals(events: list[Event], expected: dict[str, int]) -> None:
    assert run(events).pod_ordinals == expected


# ---------------------------------------------------------------------------------------------
# When the status was last written: the start of the batch window


def decided(at: int, *intents: Intent, key: str = REF) -> Event:
    return Decided(at=at, reconciler="job", key=key, reason="r", intents=intents)


STATUS = Patch("c1", "Job", "ns", "train", patch={"status": {"ready": 1}}, subresource="status")
POD_STATUS = Patch("c1", "Pod", "ns", "p", patch={"status": {}}, subresource="status")
SPEC = Patch("c1", "Job", "ns", "train", patch={"spec": {"suspend": True}})


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        pytest.param([added(), decided(7, STATUS)], {REF: 7}, id="status-write"),
        pytest.param(
            [added(), decided(7, STATUS), decided(9, STATUS)], {REF: 9}, id="the-newest-write"
        ),
        pytest.param([added(), decided(7, POD_STATUS, SPEC)], {}, id="not-the-jobs-status"),
        # A dispatcher's decision keyed by another object writing this Job's status.
        pytest.param(
            [added(), decided(7, STATUS, key="JobSet/c1/ns/x")], {REF: 7}, id="any-decision"
        ),
        pytest.param(
            [added(), decided(7, STATUS), seen(TOF, "DELETED")], {}, id="dropped-with-the-job"
        ),
        pytest.param(
            [added(), decided(7, STATUS), seen(SUCCESSOR)], {}, id="dropped-for-a-new-job"
        ),
    ],
)
def test_status_written(events: list[Event], expected: dict[str, int]) -> None:
    assert run(events).job_status_written == expected


# ---------------------------------------------------------------------------------------------
# Cost: most pod events never reach `job.projection`


@pytest.mark.parametrize(
    ("change", "calls"),
    [
        pytest.param({"conditions": {"Ready": "True"}, "rv": "9"}, 0, id="ready-only"),
        pytest.param({"requests": {"cpu": 1}}, 0, id="resized"),
        pytest.param({"phase": "Failed"}, 1, id="phase"),
        pytest.param({"deletion_ts": 5}, 1, id="deletion"),
        pytest.param({"finalizers": ()}, 1, id="finalizers"),
    ],
)
def test_pod_changed_only_for_the_fields_that_matter(
    monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], calls: int
) -> None:
    seen_calls: list[str] = []
    monkeypatch.setattr(
        jobs, "pod_changed", lambda state, cluster, old, new: seen_calls.append(new.name)
    )
    state = run([added()])
    fold(state, 2, seen(pod(), "ADDED"))
    assert seen_calls == ["p"]  # a pod new to the state
    fold(state, 3, seen(replace(pod(), **change)))
    assert len(seen_calls) == 1 + calls


def test_finish_time_follows_upstream_order() -> None:
    assert jobs.finish_time(pod(finished=5, deleting=DELETING)) == 5
    assert jobs.finish_time(pod(deleting=DELETING)) == DELETING - GRACE_MS
    assert jobs.finish_time(replace(pod(), created=42)) == 42
