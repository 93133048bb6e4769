"""Spec C10: in-place restart — the controller's half of the attempt barrier, decision by
decision, and whole restarts played on the in-memory world with upstream's agent in every pod."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.controllers.jobset.validation import validate_raw
from tests.daemon.controllers.jobset_builders import (
    MAX_INT32,
    READY,
    child,
    conditions,
    decide,
    failed,
    jobset_json,
    js_status,
    make_jobset,
    pod_of,
    rjob,
    state_of,
)
from tests.daemon.controllers.world import JobSetWorld, bump

IN_PLACE: dict[str, Any] = {"backoffLimit": MAX_INT32, "podReplacementPolicy": "Failed"}


def in_place_rj(name: str = "a", replicas: int = 2, pods: int = 2) -> dict[str, Any]:
    return rjob(name, replicas, parallelism=pods, completions=pods, **IN_PLACE)


def in_place_jobset(
    max_restarts: int = 3, status: dict[str, Any] | None = None, **spec: Any
) -> Any:
    return make_jobset(
        "js",
        [in_place_rj()],
        failurePolicy={"maxRestarts": max_restarts, "restartStrategy": "InPlaceRestart"},
        status=status,
        **spec,
    )


def with_pods(js: Any, attempts: list[int | None], **pod: Any) -> Any:
    """Two Jobs of two pods each, the pods' attempts as given (None: not annotated)."""
    jobs = [child(js, "a", i, READY) for i in range(2)]
    pods = [pod_of(jobs[i // 2], i % 2, attempt=a, **pod) for i, a in enumerate(attempts)]
    return state_of(js, *jobs, *pods)


def test_c10_1_a_container_restarted_more_than_max_restarts_fails_the_jobset() -> None:
    js = in_place_jobset(max_restarts=3)
    state = with_pods(js, [0, 0, 0, 0])
    key = next(iter(k for k in state.pods if k.endswith("js-a-0-0-pod")))
    state.pods[key] = state.pods[key].__class__(
        **{**_fields(state.pods[key]), "max_container_restarts": 4, "restart_count": 8}
    )
    patch = js_status(decide(state))
    assert conditions(patch)["Failed"] == ("True", "ReachedMaxRestarts")
    assert patch["terminalState"] == "Failed"


def _fields(pod: Any) -> dict[str, Any]:
    return {f: getattr(pod, f) for f in pod.__struct_fields__}


@pytest.mark.parametrize(
    ("restarts", "towards", "newest", "fails"),
    [(0, 0, 4, True), (0, 0, 3, False), (2, 0, 5, False), (2, 1, 5, True)],
)
def test_c10_2_newest_attempt_less_uncounted_restarts_above_max_fails(
    restarts: int, towards: int, newest: int, fails: bool
) -> None:
    js = in_place_jobset(
        max_restarts=3,
        status={"restarts": restarts, "restartsCountTowardsMax": towards},
    )
    jobs = [child(js, "a", i, READY) for i in range(2)]
    pods = [pod_of(jobs[0], 0, attempt=newest), pod_of(jobs[0], 1, attempt=newest - 1)]
    patch = js_status(decide(state_of(js, *jobs, *pods)))
    assert ("Failed" in conditions(patch)) == fails


@pytest.mark.parametrize("attempt", [0, 1, 5])
def test_c10_3_all_pods_agree_sets_the_current_attempt(attempt: int) -> None:
    js = in_place_jobset(max_restarts=10)
    decision = decide(with_pods(js, [attempt] * 4))
    patch = js_status(decision)
    assert patch["currentInPlaceRestartAttempt"] == attempt
    assert decision is not None
    assert f"all 4 pods at attempt {attempt}" in decision.reason


def test_c10_3_current_is_idempotent() -> None:
    js = in_place_jobset(status={"currentInPlaceRestartAttempt": 2})
    assert "currentInPlaceRestartAttempt" not in js_status(decide(with_pods(js, [2] * 4)))


@pytest.mark.parametrize("attempts", [[0, 0, None, None], [None] * 4, [0, 0, 0, None]])
def test_c10_4_a_fresh_jobset_with_pods_not_yet_reporting_changes_nothing(
    attempts: list[int | None],
) -> None:
    js = in_place_jobset()
    patch = js_status(decide(with_pods(js, attempts)))
    assert "currentInPlaceRestartAttempt" not in patch
    assert "previousInPlaceRestartAttempt" not in patch


def test_c10_5_one_pod_ahead_sets_previous_and_never_lowers_it() -> None:
    js = in_place_jobset(status={"currentInPlaceRestartAttempt": 2})
    decision = decide(with_pods(js, [2, 3, 2, 2]))
    assert js_status(decision)["previousInPlaceRestartAttempt"] == 2
    assert decision is not None
    assert "restarts the 3 pod(s) behind it in place" in decision.reason
    later = in_place_jobset(
        status={"currentInPlaceRestartAttempt": 2, "previousInPlaceRestartAttempt": 4}
    )
    assert "previousInPlaceRestartAttempt" not in js_status(decide(with_pods(later, [2, 3, 2, 2])))


def test_c10_6_failed_and_unannotated_pods_are_ignored() -> None:
    js = in_place_jobset(
        status={"currentInPlaceRestartAttempt": 1, "previousInPlaceRestartAttempt": 0}
    )
    jobs = [child(js, "a", i, READY) for i in range(2)]
    pods = [
        pod_of(jobs[0], 0, attempt=1),
        pod_of(jobs[0], 1, attempt=1),
        pod_of(jobs[1], 0, attempt=1),
        pod_of(jobs[1], 1, attempt=5, phase="Failed"),
        pod_of(jobs[1], 2, attempt=None),
    ]
    patch = js_status(decide(state_of(js, *jobs, *pods)))
    assert "previousInPlaceRestartAttempt" not in patch
    assert "Failed" not in conditions(patch)


@pytest.mark.parametrize("raw", ["-1", "one", "1.5"])
def test_c10_6_a_malformed_attempt_is_an_error_and_changes_nothing(raw: str) -> None:
    js = in_place_jobset()
    state = with_pods(js, [1, 1, 1, 1])
    key = next(iter(k for k in state.pods if k.endswith("js-a-0-0-pod")))
    pod = state.pods[key]
    state.pods[key] = pod.__class__(
        **{**_fields(pod), "annotations": {"jobset.sigs.k8s.io/in-place-restart-attempt": raw}}
    )
    decision = decide(state)
    assert decision is not None
    assert "is not a non-negative integer" in decision.reason
    assert "currentInPlaceRestartAttempt" not in js_status(decision)


WEBHOOK: list[tuple[str, dict[str, Any], str]] = [
    ("backoff-limit", {"backoffLimit": 6, "podReplacementPolicy": "Failed"}, "backoffLimit"),
    (
        "replacement-policy",
        {"backoffLimit": MAX_INT32, "podReplacementPolicy": "TerminatingOrFailed"},
        "podReplacementPolicy",
    ),
    ("completions-differ", {**IN_PLACE, "completions": 3}, "completions"),
    ("completions-unset", {**IN_PLACE, "completions": None}, "completions"),
]


@pytest.mark.parametrize(("case", "job", "field"), WEBHOOK, ids=[w[0] for w in WEBHOOK])
def test_c10_7_webhook_requires_never_failing_jobs(
    case: str, job: dict[str, Any], field: str
) -> None:
    entry = rjob("a", 1, parallelism=2, completions=2)
    spec = entry["template"]["spec"]
    spec.update({k: v for k, v in job.items() if v is not None})
    if job.get("completions", 0) is None:
        del spec["completions"]
    body = jobset_json(
        "js", [entry], failurePolicy={"maxRestarts": 1, "restartStrategy": "InPlaceRestart"}
    )
    problems = validate_raw("js", body["spec"])
    assert any(path.endswith(field) for path, _ in problems), problems
    ok = jobset_json(
        "js",
        [in_place_rj()],
        failurePolicy={"maxRestarts": 1, "restartStrategy": "InPlaceRestart"},
    )
    assert validate_raw("js", ok["spec"]) == []


# -- whole restarts on the world ------------------------------------------------------------


def world_of(jobs: int, pods: int, **policy: Any) -> JobSetWorld:
    world = JobSetWorld(nodes=jobs * pods)
    world.create_jobset(
        jobset_json(
            "js",
            [in_place_rj("w", jobs, pods)],
            failurePolicy={"maxRestarts": 5, "restartStrategy": "InPlaceRestart", **policy},
        )
    )
    world.run(world.in_place_synced)
    return world


def test_c10_one_crash_restarts_every_pod_in_place_and_keeps_every_uid() -> None:
    world = world_of(8, 4)
    assert world.jobset().status["currentInPlaceRestartAttempt"] == 0
    before = {p.name: (p.uid, p.node_name) for p in world.live_pods()}
    assert len(before) == 32
    decided = len(world.decisions)
    created = world.calls.pods_created
    crashed = sorted(before)[5]
    world.restart_in_place(crashed)
    took = world.run(world.in_place_synced)
    status = world.jobset().status
    assert status["previousInPlaceRestartAttempt"] == 0
    assert status["currentInPlaceRestartAttempt"] == 1
    assert {p.name: (p.uid, p.node_name) for p in world.live_pods()} == before
    assert all(p.restart_count == 1 for p in world.live_pods())
    assert world.calls.pods_created == created
    assert world.calls.pods_deleted == 0
    barrier = [
        d.reason
        for key, d in world.decisions[decided:]
        if key.startswith("JobSet/") and d.reason.startswith("InPlaceRestart:")
    ]
    assert len(barrier) == 2, barrier  # previous, then current: two JobSet status writes
    assert took < 10_000
    assert "restarts" not in status or status["restarts"] == 0


def test_c10_restart_job_recreates_the_failed_job_and_restarts_the_rest_in_place() -> None:
    world = world_of(4, 2, rules=[{"action": "RestartJob"}])
    before = {p.name: p.uid for p in world.live_pods()}
    jobs = {n: j.uid for n, j in world.jobs().items()}
    # A whole Job fails (say its rack is lost): its Job reaches a terminal Failed condition.
    job = world.jobs()["js-w-2"]
    world.observe(
        bump(job, status={**job.status, "conditions": failed("DeadlineExceeded")["conditions"]})
    )
    world.run(
        lambda: (
            world.jobs().get("js-w-2") is not None and world.jobs()["js-w-2"].uid != jobs["js-w-2"]
        )
    )
    world.run(world.in_place_synced)
    after = {p.name: p.uid for p in world.live_pods()}
    kept = {n: u for n, u in before.items() if not n.startswith("js-w-2-")}
    assert {n: after.get(n) for n in kept} == kept
    assert not any(n in after for n in before if n.startswith("js-w-2-"))
    assert {n: j.uid for n, j in world.jobs().items() if n != "js-w-2"} == {
        n: u for n, u in jobs.items() if n != "js-w-2"
    }
    status = world.jobset().status
    assert status["replicatedJobsStatus"][0]["jobRestarts"] == [0, 0, 1, 0]
    # The new Job's pods joined at current + 1, which restarted the others in place once.
    assert status["currentInPlaceRestartAttempt"] == 1
    assert all(world.pod(n).restart_count == 1 for n in kept)


# -- what the fold provides ---------------------------------------------------------------------


def test_b5_pod_changes_wake_an_in_place_jobset_only() -> None:
    from events.fold import fold
    from events.schema import Observed

    for strategy, woken in (("InPlaceRestart", True), ("Recreate", False)):
        rj = in_place_rj() if strategy == "InPlaceRestart" else rjob("a", 2)
        js = make_jobset("js", [rj], failurePolicy={"maxRestarts": 1, "restartStrategy": strategy})
        job = child(js, "a", 0, READY)
        state = state_of(js, job)
        dirty: set[str] = set()
        event = Observed(at=0, cluster="c1", change="ADDED", obj=pod_of(job, 0, attempt=0))
        fold(state, 99, event, dirty)
        assert ("JobSet/c1/ns/js" in dirty) == woken
        assert "Job/c1/ns/js-a-0" in dirty


def test_b5_the_slim_pod_keeps_the_highest_container_restart_count() -> None:
    from events.objects import decode_object_dict

    pod = decode_object_dict(
        "Pod",
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}]},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": "a", "restartCount": 2},
                    {"name": "b", "restartCount": 3},
                ],
                "initContainerStatuses": [{"name": "init", "restartCount": 1}],
            },
        },
    )
    assert pod.restart_count == 6  # type: ignore[union-attr]
    assert pod.max_container_restarts == 3  # type: ignore[union-attr]
