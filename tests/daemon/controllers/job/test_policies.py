"""Limits and policies decided in one step: activeDeadlineSeconds, backoffLimit (and restarts
under OnFailure), per-index back-off and limits, each podFailurePolicy action, the exact
`status.terminating`, the stuck-terminating bound, and Jobs being deleted."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import pytest

from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.job.spec import INDEX_FAILURE_COUNT, INDEX_IGNORED_FAILURE_COUNT
from events.objects import Job, Node, Pod
from tests.daemon.controllers.builders import (
    FIN,
    REC,
    SECOND,
    T0,
    T0_TEXT,
    creates,
    deletes,
    key,
    make_job,
    make_node,
    make_pod,
    make_state,
    releases,
    status_patch,
)
from tests.daemon.controllers.world import JobWorld

SETTLED = {"startTime": T0_TEXT, "active": 1, "ready": 0, "terminating": 0}


def decide(job: Job, pods: Sequence[Pod], now: int, rec: JobReconciler = REC, **kw: Any) -> Any:
    return rec.decide(make_state(job, pods, **kw), key(job), now)


def conditions_written(decision: Any) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status_patch(decision.intents).get("conditions", ())}


# -- activeDeadlineSeconds ---------------------------------------------------------------------


def test_active_deadline_requeues_at_the_deadline_then_fails_the_job() -> None:
    job = make_job(active_deadline_seconds=60, status=SETTLED)
    pods = [make_pod(job, "p")]
    waiting = decide(job, pods, T0 + 30 * SECOND)
    assert waiting is not None
    assert waiting.intents == ()
    assert waiting.requeue_at == T0 + 60 * SECOND
    assert waiting.reason.startswith("Waiting:")

    due = decide(job, pods, T0 + 60 * SECOND)
    target = conditions_written(due)["FailureTarget"]
    assert (target["reason"], target["message"]) == (
        "DeadlineExceeded",
        "Job was active longer than specified deadline",
    )
    assert deletes(due.intents) == ["p"]
    assert due.reason.startswith("DeadlineExceeded: FailureTarget")


def test_active_deadline_is_not_running_while_suspended() -> None:
    job = make_job(
        active_deadline_seconds=60,
        suspend=True,
        status={"active": 0, "ready": 0, "terminating": 0},
    )
    assert decide(job, [], T0 + 3600 * SECOND) is not None  # writes Suspended
    suspended = make_job(
        active_deadline_seconds=60,
        suspend=True,
        status={
            "active": 0,
            "ready": 0,
            "terminating": 0,
            "conditions": [
                {
                    "type": "Suspended",
                    "status": "True",
                    "reason": "JobSuspended",
                    "message": "Job suspended",
                }
            ],
        },
    )
    assert decide(suspended, [], T0 + 3600 * SECOND) is None


def test_a_new_job_starts_its_deadline_now() -> None:
    job = make_job(active_deadline_seconds=90)
    decision = decide(job, [], T0 + 500)
    assert status_patch(decision.intents)["startTime"] == T0_TEXT
    assert decision.requeue_at == T0 + 90 * SECOND


# activeDeadlineSeconds -> when the Job started at T0 is past it, as upstream's controller
# computes it: the seconds multiplied into a Go Duration (int64 nanoseconds), which wraps.
DEADLINES = {
    "a-minute": (60, T0 + 60 * SECOND),
    "max-int32": (2**31 - 1, T0 + (2**31 - 1) * SECOND),
    "the-last-second-that-does-not-wrap": (9_223_372_036, T0 + 9_223_372_036 * SECOND),
    "ten-to-the-tenth: wraps far into the past": (10**10, T0 - 8_446_744_073_709),
    "max-int64: wraps to just before the start": (2**63 - 1, T0 - 1_000),
}


@pytest.mark.parametrize(("seconds", "due"), DEADLINES.values(), ids=DEADLINES.keys())
def test_an_active_deadline_is_where_upstreams_go_duration_puts_it(seconds: int, due: int) -> None:
    """Any positive int64 is a valid activeDeadlineSeconds. A Job is past its deadline where
    upstream's wrapped duration says so: one that wraps into the past fails at its first
    sync with DeadlineExceeded and no pod, as on the built-in controller."""
    job = make_job(active_deadline_seconds=seconds)
    first = decide(job, [], T0)
    if due <= T0:
        assert first.reason.startswith("DeadlineExceeded")
        assert creates(first.intents) == []
        return
    assert status_patch(first.intents)["startTime"] == T0_TEXT
    assert len(creates(first.intents)) == 1
    running = make_job(active_deadline_seconds=seconds, status=SETTLED)
    later = decide(running, [make_pod(running, "p")], T0 + 30 * SECOND)
    assert later.intents == ()
    assert later.requeue_at == due


# -- backoffLimit ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("counted", "new", "limit", "fails"),
    [(3, 0, 3, False), (3, 1, 3, True), (0, 1, 0, True), (0, 0, 0, False)],
    ids=["at-limit", "past-limit", "zero-limit-one-failure", "zero-limit-no-failure"],
)
def test_backoff_limit(counted: int, new: int, limit: int, fails: bool) -> None:
    job = make_job(parallelism=1, completions=5, backoff_limit=limit, status={"failed": counted})
    pods = [make_pod(job, f"f{i}", phase="Failed", finished=T0) for i in range(new)]
    decision = decide(job, pods, T0 + 3600 * SECOND)
    assert ("FailureTarget" in conditions_written(decision)) is fails


@pytest.mark.parametrize(
    ("limit", "restarts", "fails"),
    [(2, 1, False), (2, 2, True), (0, 1, True), (0, 0, False)],
    ids=["below", "reached", "zero-limit-any-restart", "zero-limit-no-restart"],
)
def test_restarts_under_on_failure_count_towards_the_backoff_limit(
    limit: int, restarts: int, fails: bool
) -> None:
    job = make_job(backoff_limit=limit, restart_policy="OnFailure", status=SETTLED)
    decision = decide(job, [make_pod(job, "p", restart_count=restarts)], T0 + SECOND)
    written = conditions_written(decision) if decision is not None and decision.intents else {}
    assert ("FailureTarget" in written) is fails


# -- backoffLimitPerIndex / maxFailedIndexes --------------------------------------------------


def per_index_job(**spec: Any) -> Job:
    return make_job(
        parallelism=3,
        completions=3,
        completion_mode="Indexed",
        **{"backoff_limit_per_index": 5, **spec},
    )


@pytest.mark.parametrize(
    ("count", "delay_s"),
    [(0, 10), (1, 20), (2, 40)],
    ids=["first-failure", "second-failure", "third-failure"],
)
def test_per_index_backoff_delays_the_index_from_its_last_failure(count: int, delay_s: int) -> None:
    job = per_index_job()
    pods = [
        make_pod(job, "i0", index=0, phase="Failed", failure_count=count, finished=T0),
        make_pod(job, "i1", index=1),
        make_pod(job, "i2", index=2),
    ]
    waiting = decide(job, pods, T0 + SECOND)
    assert waiting is not None
    assert creates(waiting.intents) == []
    assert waiting.requeue_at == T0 + delay_s * SECOND
    assert "i0" not in releases(waiting.intents)  # kept for its failure count

    due = decide(job, pods, T0 + delay_s * SECOND)
    (create,) = creates(due.intents)
    assert create.body["metadata"]["annotations"][INDEX_FAILURE_COUNT] == str(count + 1)


def test_per_index_backoff_gates_each_index_separately() -> None:
    job = per_index_job()
    pods = [
        make_pod(job, "i0", index=0, phase="Failed", failure_count=0, finished=T0),
        make_pod(job, "i1", index=1, phase="Failed", failure_count=2, finished=T0),
        make_pod(job, "i2", index=2),
    ]
    decision = decide(job, pods, T0 + 15 * SECOND)
    (create,) = creates(decision.intents)
    assert create.name.startswith("job-0-")
    assert decision.requeue_at == T0 + 40 * SECOND  # index 1, third failure
    later = decide(job, pods, T0 + 15 * SECOND)
    assert later == decision


def test_max_failed_indexes_exceeded_fails_the_job() -> None:
    job = per_index_job(backoff_limit_per_index=0, max_failed_indexes=1)
    pods = [
        make_pod(job, "i0", index=0, phase="Failed", failure_count=0, finished=T0),
        make_pod(job, "i1", index=1, phase="Failed", failure_count=0, finished=T0),
        make_pod(job, "i2", index=2),
    ]
    decision = decide(job, pods, T0 + SECOND)
    target = conditions_written(decision)["FailureTarget"]
    assert target["reason"] == "MaxFailedIndexesExceeded"
    assert status_patch(decision.intents)["failedIndexes"] == "0,1"
    assert deletes(decision.intents) == ["i2"]


# -- podFailurePolicy --------------------------------------------------------------------------


def policy(action: str, **requirement: Any) -> dict[str, Any]:
    return {"rules": [{"action": action, **requirement}]}


EXIT_42 = {"onExitCodes": {"operator": "In", "values": [42]}}
DISRUPTED = {"onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}


@pytest.mark.parametrize(
    ("rules", "exit_code", "conditions", "counted", "fails_job"),
    [
        (policy("Ignore", **EXIT_42), 42, {}, False, False),
        (policy("Count", **EXIT_42), 42, {}, True, False),
        (policy("FailJob", **EXIT_42), 42, {}, True, True),
        (policy("FailJob", **EXIT_42), 41, {}, True, False),
        (policy("Ignore", **DISRUPTED), 137, {"DisruptionTarget": "True"}, False, False),
        (policy("Ignore", **DISRUPTED), 137, {"DisruptionTarget": "False"}, True, False),
        (policy("FailJob", onExitCodes={"operator": "NotIn", "values": [1, 2]}), 3, {}, True, True),
        (
            policy("FailJob", onExitCodes={"operator": "NotIn", "values": [1, 2]}),
            1,
            {},
            True,
            False,
        ),
        (policy("FailJob", onExitCodes={"operator": "NotIn", "values": [1]}), 0, {}, True, False),
        (policy("Unknown", **EXIT_42), 42, {}, True, False),
    ],
    ids=[
        "ignore",
        "count",
        "fail-job",
        "fail-job-other-code",
        "ignore-disruption-target",
        "disruption-target-false",
        "not-in-matches",
        "not-in-listed",
        "exit-0-never-matches",
        "unknown-action-skipped",
    ],
)
def test_pod_failure_policy_actions(
    rules: dict[str, Any],
    exit_code: int,
    conditions: dict[str, str],
    counted: bool,
    fails_job: bool,
) -> None:
    job = make_job(parallelism=1, completions=2, pod_failure_policy=rules, backoff_limit=5)
    pod = make_pod(
        job, "p", phase="Failed", exit_codes={"main": exit_code}, conditions=conditions, finished=T0
    )
    decision = decide(job, [pod], T0 + 3600 * SECOND)
    status = status_patch(decision.intents)
    uncounted = status.get("uncountedTerminatedPods", {}).get("failed", [])
    assert (uncounted == ["uid-p"]) is counted
    assert ("FailureTarget" in conditions_written(decision)) is fails_job
    if not counted:
        assert releases(decision.intents) == ["p"]  # nothing to record first
        assert len(creates(decision.intents)) == 1  # replaced, not counted


def test_fail_job_message_names_the_first_failing_container() -> None:
    job = make_job(pod_failure_policy=policy("FailJob", **EXIT_42))
    pod = make_pod(job, "p", phase="Failed", exit_codes={"sidecar": 0, "main": 42}, finished=T0)
    target = conditions_written(decide(job, [pod], T0 + SECOND))["FailureTarget"]
    assert target["message"] == (
        "Container main for pod ns/p failed with exit code 42 matching FailJob rule at index 0"
    )


def test_disruption_target_fail_job_message() -> None:
    job = make_job(pod_failure_policy=policy("FailJob", **DISRUPTED))
    pod = make_pod(job, "p", phase="Failed", conditions={"DisruptionTarget": "True"})
    target = conditions_written(decide(job, [pod], T0 + SECOND))["FailureTarget"]
    assert target["message"] == (
        "Pod ns/p has condition DisruptionTarget matching FailJob rule at index 0"
    )


def test_fail_index_fails_only_that_index() -> None:
    job = per_index_job(pod_failure_policy=policy("FailIndex", **EXIT_42))
    pods = [
        make_pod(job, "i0", index=0, phase="Failed", exit_codes={"main": 42}, failure_count=0),
        make_pod(job, "i1", index=1),
        make_pod(job, "i2", index=2),
    ]
    decision = decide(job, pods, T0 + SECOND)
    status = status_patch(decision.intents)
    assert status["failedIndexes"] == "0"
    assert "conditions" not in status
    assert creates(decision.intents) == []


def test_ignored_failure_is_carried_in_the_ignored_count_annotation() -> None:
    job = per_index_job(pod_failure_policy=policy("Ignore", **EXIT_42))
    pods = [
        make_pod(job, "i0", index=0, phase="Failed", exit_codes={"main": 42}, failure_count=1),
        make_pod(job, "i1", index=1),
        make_pod(job, "i2", index=2),
    ]
    decision = decide(job, pods, T0 + 3600 * SECOND)
    (create,) = creates(decision.intents)
    notes = create.body["metadata"]["annotations"]
    assert (notes[INDEX_FAILURE_COUNT], notes[INDEX_IGNORED_FAILURE_COUNT]) == ("1", "1")


def test_a_pod_failure_policy_forces_replacement_only_after_failure() -> None:
    job = make_job(parallelism=1, completions=1, pod_failure_policy=policy("Count", **EXIT_42))
    spec = dict(job.spec)
    del spec["podReplacementPolicy"]  # the controller's safety net, not the API default
    job = msgspec.structs.replace(job, spec=spec)
    pod = make_pod(job, "p", deletion_ts=T0)
    decision = decide(job, [pod], T0 + 60 * SECOND)
    assert creates(decision.intents) == []
    assert status_patch(decision.intents)["terminating"] == 1


# -- status.terminating ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "replacement", ["Failed", "TerminatingOrFailed"], ids=["failed", "terminating-or-failed"]
)
def test_status_terminating_counts_exactly_the_pods_being_deleted(replacement: str) -> None:
    job = make_job(parallelism=2, completions=10, pod_replacement_policy=replacement)
    pods = [
        make_pod(job, "a-running-deleted", deletion_ts=T0),
        make_pod(job, "b-pending-deleted", phase="Pending", deletion_ts=T0, finalizers=()),
        make_pod(job, "c-failed-deleted", phase="Failed", deletion_ts=T0, finalizers=()),
        make_pod(job, "d-succeeded", phase="Succeeded", finalizers=()),
        make_pod(job, "e-active", ready=True),
        make_pod(job, "f-active"),
        make_pod(job, "g-released", finalizers=()),
    ]
    decision = decide(job, pods, T0 + 3600 * SECOND)
    status = status_patch(decision.intents)
    assert deletes(decision.intents) == ["g-released"]
    assert status["terminating"] == 3  # two already terminating + the one deleted now
    assert (status["active"], status["ready"]) == (2, 1)


# -- stuck terminating (beyond upstream) -------------------------------------------------------

STUCK = JobReconciler(stuck_terminating_after_ms=60 * SECOND)


def stuck_state(node_ready: bool) -> tuple[Job, list[Pod], list[Node]]:
    job = make_job(
        parallelism=1,
        completions=1,
        pod_replacement_policy="Failed",
        status={"startTime": T0_TEXT, "active": 0, "ready": 0, "terminating": 1},
    )
    pods: list[Pod] = [make_pod(job, "p", node="n1", deletion_ts=T0)]
    return job, pods, [make_node("n1", ready=node_ready)]


def test_stuck_pod_is_awaited_until_the_bound() -> None:
    job, pods, nodes = stuck_state(node_ready=False)
    decision = decide(job, pods, T0 + 30 * SECOND, STUCK, nodes=nodes)
    assert decision is not None
    assert decision.intents == ()
    assert decision.requeue_at == T0 + 60 * SECOND


def test_stuck_pod_on_a_not_ready_node_is_treated_as_failed_and_replaced() -> None:
    job, pods, nodes = stuck_state(node_ready=False)
    decision = decide(job, pods, T0 + 60 * SECOND, STUCK, nodes=nodes)
    assert len(creates(decision.intents)) == 1
    status = status_patch(decision.intents)
    assert status["uncountedTerminatedPods"]["failed"] == ["uid-p"]
    assert "terminating" not in status  # still exactly 1: the stuck pod terminates on
    condition = conditions_written(decision)["PodsStuckTerminating"]
    assert (condition["status"], condition["reason"]) == ("True", "NodeNotReady")
    assert "ns/p (node n1)" in condition["message"]
    assert "StuckTerminating:" in decision.reason


@pytest.mark.parametrize(
    ("rec", "node_ready"),
    [(STUCK, True), (REC, False)],
    ids=["node-ready", "bound-off"],
)
def test_terminating_pod_is_not_stuck(rec: JobReconciler, node_ready: bool) -> None:
    job, pods, nodes = stuck_state(node_ready=node_ready)
    decision = decide(job, pods, T0 + 3600 * SECOND, rec, nodes=nodes)
    assert decision is None


def test_stuck_pod_is_counted_once_and_the_job_goes_on() -> None:
    job, pods, nodes = stuck_state(node_ready=False)
    cluster = JobWorld(make_state(job, pods, nodes), rec=STUCK)
    cluster.now = T0 + 60 * SECOND
    cluster.settle()
    assert cluster.status["failed"] == 1
    assert cluster.status["terminating"] == 1
    assert FIN not in cluster.pod("p").finalizers
    cluster.run_all()
    cluster.set_phase(cluster.live_pods()[0].name, "Succeeded")
    cluster.settle()
    assert "Complete" not in cluster.conditions()  # the stuck pod still terminates
    cluster.kubelet_kill("p")
    cluster.settle()
    assert cluster.conditions()["Complete"] == "True"
    assert cluster.conditions()["PodsStuckTerminating"] == "False"
    assert cluster.status["failed"] == 1


# -- Jobs being deleted ------------------------------------------------------------------------


def test_a_job_being_deleted_creates_nothing_and_releases_its_pods() -> None:
    job = make_job(parallelism=2, completions=2, deletion_timestamp=T0_TEXT, status=SETTLED)
    pods = [make_pod(job, "a", phase="Succeeded"), make_pod(job, "b")]
    decision = decide(job, pods, T0 + SECOND)
    assert creates(decision.intents) == []
    assert deletes(decision.intents) == []
    assert releases(decision.intents) == ["b"]
    assert status_patch(decision.intents)["uncountedTerminatedPods"]["succeeded"] == ["uid-a"]
