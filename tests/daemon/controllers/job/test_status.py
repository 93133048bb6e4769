"""Spec C4: kbatchd writes only status the API server accepts from an external controller.

The in-memory cluster runs every write through the simulated server's status validation, so
each flow here fails on a rule violation; the assertions pin the rule each test is about."""

from __future__ import annotations

from typing import Any

from tests.daemon.controllers.builders import (
    FIN,
    REC,
    SECOND,
    T0,
    T0_TEXT,
    condition,
    key,
    make_job,
    make_pod,
    make_state,
    releases,
    status_patch,
)
from tests.daemon.controllers.world import JobWorld

AIMED = condition("FailureTarget", reason="BackoffLimitExceeded", message="limit")


def cluster_of(job: Any, pods: list[Any], now: int = T0 + SECOND) -> JobWorld:
    cluster = JobWorld(make_state(job, pods))
    cluster.now = now
    return cluster


def test_c4_1_a_failing_job_never_completes() -> None:
    job = make_job(
        parallelism=2, completions=2, status={"startTime": T0_TEXT, "conditions": [AIMED]}
    )
    pods = [make_pod(job, n, phase="Succeeded", finished=T0) for n in ("a", "b")]
    cluster = cluster_of(job, pods)
    cluster.settle()
    assert cluster.conditions() == {"FailureTarget": "True", "Failed": "True"}
    assert "completionTime" not in cluster.status


def test_c4_2_a_terminal_condition_always_comes_with_a_start_time() -> None:
    job = make_job(suspend=True, status={"conditions": [AIMED]})
    cluster = cluster_of(job, [])
    cluster.settle()
    assert cluster.conditions()["Failed"] == "True"
    assert cluster.status["startTime"] == "2026-01-01T00:00:01Z"


def test_c4_3_complete_waits_for_active_pods() -> None:
    job = make_job(parallelism=2)
    cluster = cluster_of(job, [])
    cluster.settle()
    cluster.run_all()
    first, second = [p.name for p in cluster.live_pods()]
    cluster.set_phase(first, "Succeeded")
    cluster.settle()
    assert "Complete" not in cluster.conditions()
    assert cluster.status["active"] == 1
    cluster.set_phase(second, "Succeeded")
    cluster.settle()
    assert cluster.conditions()["Complete"] == "True"
    assert cluster.status["active"] == 0


def test_c4_4_failed_waits_until_nothing_is_uncounted() -> None:
    job = make_job(
        status={
            "startTime": T0_TEXT,
            "conditions": [AIMED],
            "uncountedTerminatedPods": {"failed": ["uid-a"]},
        }
    )
    pods = [make_pod(job, "a", phase="Failed", finished=T0)]
    decision = REC.decide(make_state(job, pods), key(job), T0 + SECOND)
    assert decision is not None
    assert "conditions" not in status_patch(decision.intents)
    assert releases(decision.intents) == ["a"]
    cluster = cluster_of(job, pods)
    cluster.settle()
    assert cluster.conditions()["Failed"] == "True"
    assert cluster.status["uncountedTerminatedPods"] == {"succeeded": [], "failed": []}
    assert cluster.status["failed"] == 1


def test_c4_5_completion_time_is_the_complete_transition_and_never_changes() -> None:
    job = make_job(status={"startTime": T0_TEXT})
    pods = [make_pod(job, "a", phase="Succeeded", finished=T0)]
    cluster = cluster_of(job, pods, now=T0 + 5 * SECOND)
    cluster.settle()
    complete = cluster.condition("Complete")
    assert cluster.status["completionTime"] == complete["lastTransitionTime"]
    assert cluster.status["completionTime"] >= cluster.status["startTime"]
    cluster.advance(3600 * SECOND)
    assert cluster.step() is None


def test_c4_6_start_time_is_cleared_only_while_suspended() -> None:
    job = make_job(parallelism=2, completions=2)
    cluster = cluster_of(job, [])
    cluster.settle()
    cluster.run_all()
    cluster.settle()
    cluster.advance(10 * SECOND)
    cluster.set_phase(cluster.live_pods()[0].name, "Failed", exit_codes={"main": 1})
    cluster.settle()
    cluster.advance(60 * SECOND)
    cluster.settle()
    assert [w for w in cluster.status_writes[1:] if "startTime" in w] == []

    cluster.update_job(suspend=True)
    cluster.settle()
    assert [w["startTime"] for w in cluster.status_writes if "startTime" in w][-1] is None
    assert "startTime" not in cluster.status


def test_c4_7_true_terminal_conditions_are_never_removed() -> None:
    failed = condition("Failed", reason="BackoffLimitExceeded", message="limit")
    job = make_job(status={"startTime": T0_TEXT, "conditions": [AIMED, failed], "active": 2})
    pods = [make_pod(job, "a"), make_pod(job, "b", phase="Failed", finalizers=())]
    decision = REC.decide(make_state(job, pods), key(job), T0)
    assert decision is not None
    assert decision.reason.startswith("Finished:")
    assert status_patch(decision.intents) == {}  # a finished Job's status is left alone
    assert releases(decision.intents) == ["a"]

    aiming = make_job(status={"startTime": T0_TEXT, "conditions": [AIMED]})
    decision = REC.decide(make_state(aiming, [make_pod(aiming, "c")]), key(aiming), T0)
    assert decision is not None
    written = status_patch(decision.intents).get("conditions", [AIMED])
    assert {"type": "FailureTarget", "status": "True"}.items() <= written[0].items()


def test_c4_8_conditions_of_other_writers_survive_our_writes() -> None:
    custom = condition("example.com/Checked", reason="Audit")
    job = make_job(status={"conditions": [custom]})
    cluster = cluster_of(job, [make_pod(job, "a", phase="Succeeded", finished=T0)])
    cluster.settle()
    assert cluster.status["conditions"][0] == custom
    assert cluster.conditions() == {
        "example.com/Checked": "True",
        "SuccessCriteriaMet": "True",
        "Complete": "True",
    }


def test_c4_9_terminal_conditions_follow_their_interim_ones_with_nothing_left_running() -> None:
    job = make_job(parallelism=3, completions=3, backoff_limit=0)
    cluster = cluster_of(job, [])
    cluster.settle()
    cluster.run_all()
    cluster.settle()
    cluster.hold()
    cluster.set_phase(cluster.live_pods()[0].name, "Failed", exit_codes={"main": 2})
    cluster.settle()
    assert cluster.conditions() == {"FailureTarget": "True"}
    assert cluster.status["terminating"] == 2
    cluster.kubelet_kill()
    cluster.settle()
    assert cluster.conditions() == {"FailureTarget": "True", "Failed": "True"}
    for write in cluster.status_writes:
        if "ready" in write and "active" in write:
            assert write["ready"] <= write["active"]
    final = cluster.status
    assert (final["active"], final["terminating"], final["ready"]) == (0, 0, 0)
    assert all(FIN not in p.finalizers for p in cluster.pods())
