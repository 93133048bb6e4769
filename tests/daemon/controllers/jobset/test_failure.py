"""Spec C8: the JobSet failure policy, restarts and the restart-attempt labels, decision by
decision and played on the in-memory world."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.controllers.jobset.spec import JOB_RESTART_ATTEMPT, RESTART_ATTEMPT
from tests.daemon.controllers.jobset_builders import (
    READY,
    RUNNING,
    child,
    conditions,
    created_jobs,
    decide,
    deleted_jobs,
    failed,
    jobset_json,
    js_status,
    make_jobset,
    rjob,
    state_of,
)
from tests.daemon.controllers.world import JobSetWorld

EARLY = "2026-01-01T00:00:05Z"
LATE = "2026-01-01T00:00:09Z"


def fail_one(world: JobSetWorld, job: str) -> None:
    """The running pod of `job` fails (backoffLimit 0: the Job fails)."""
    (pod,) = [p for p in world.live_pods() if p.owners[0].name == job]
    world.finish_pod(pod.name, exit_code=1)


def uids(world: JobSetWorld) -> dict[str, str]:
    return {name: job.uid for name, job in world.jobs().items()}


def test_c8_1_no_failure_policy_fails_the_jobset() -> None:
    js = make_jobset("js", [rjob("a", 2)])
    decision = decide(state_of(js, child(js, "a", 0, RUNNING), child(js, "a", 1, failed())))
    patch = js_status(decision)
    assert conditions(patch)["Failed"] == ("True", "FailedJobs")
    (failed_condition,) = [c for c in patch["conditions"] if c["type"] == "Failed"]
    assert failed_condition["message"] == (
        "jobset failed due to one or more job failures (first failed job: js-a-1)"
    )
    assert patch["terminalState"] == "Failed"
    assert decision is not None
    assert decision.reason.startswith("FailedJobs:")
    # Next decision: a finished JobSet deletes what still runs.
    done = make_jobset("js", [rjob("a", 2)], status=patch)
    assert deleted_jobs(decide(state_of(done, child(done, "a", 0, RUNNING)))) == ["js-a-0"]


def test_c8_2_default_action_restarts_then_reaches_max_restarts() -> None:
    world = JobSetWorld()
    world.create_jobset(
        jobset_json("js", [rjob("a", 2, backoffLimit=0)], failurePolicy={"maxRestarts": 1})
    )
    world.run(lambda: len(world.live_pods()) == 2 and all(p.ready for p in world.live_pods()))
    first = uids(world)
    fail_one(world, "js-a-1")
    world.run(lambda: world.jobset().status.get("restarts") == 1)
    assert world.conditions()["RestartingJobSet"] == "True"
    reason = {c["type"]: c["reason"] for c in world.jobset().status["conditions"]}
    assert reason["RestartingJobSet"] == "DefaultFailurePolicy"
    world.run(
        lambda: len(world.jobs()) == 2 and set(uids(world).values()).isdisjoint(first.values())
    )
    assert {j.labels[RESTART_ATTEMPT] for j in world.jobs().values()} == {"1"}
    world.run(lambda: world.conditions().get("RestartingJobSet") == "False")
    fail_one(world, "js-a-0")
    world.run(lambda: world.conditions().get("Failed") == "True")
    status = world.jobset().status
    assert {c["type"]: c["reason"] for c in status["conditions"]}["Failed"] == "ReachedMaxRestarts"
    assert status["restarts"] == 1
    assert status["terminalState"] == "Failed"


RULES: list[tuple[str, dict[str, Any], str]] = [
    ("reason-matches", failed("PodFailurePolicy", "container main exited with 42"), "fail"),
    ("other-reason-restarts", failed("BackoffLimitExceeded", "x"), "restart"),
    (
        "pattern-must-match-too",
        failed("PodFailurePolicy", "container main exited with 7"),
        "restart",
    ),
]


@pytest.mark.parametrize(("case", "status", "outcome"), RULES, ids=[r[0] for r in RULES])
def test_c8_3_fail_jobset_rule_on_reason_and_message_pattern(
    case: str, status: dict[str, Any], outcome: str
) -> None:
    js = make_jobset(
        "js",
        [rjob("a", 1)],
        failurePolicy={
            "maxRestarts": 3,
            "rules": [
                {
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                    "onJobFailureMessagePatterns": ["exited with 4[0-9]$", "(unclosed"],
                }
            ],
        },
    )
    patch = js_status(decide(state_of(js, child(js, "a", 0, status))))
    if outcome == "fail":
        assert conditions(patch)["Failed"] == ("True", "FailJobSetFailurePolicyAction")
        assert "restarts" not in patch
    else:
        assert "Failed" not in conditions(patch)
        assert patch["restarts"] == 1
        assert conditions(patch)["RestartingJobSet"] == ("True", "DefaultFailurePolicy")


def test_c8_4_restarting_condition_transitions() -> None:
    world = JobSetWorld()
    world.create_jobset(
        jobset_json(
            "js",
            [rjob("a", 2, backoffLimit=0)],
            failurePolicy={
                "maxRestarts": 3,
                "rules": [{"name": "Rule1", "action": "RestartJobSet"}],
            },
        )
    )
    world.run(lambda: len(world.live_pods()) == 2 and all(p.ready for p in world.live_pods()))
    fail_one(world, "js-a-0")
    world.run(lambda: world.conditions().get("RestartingJobSet") == "True")
    reasons = {c["type"]: c["reason"] for c in world.jobset().status["conditions"]}
    assert reasons["RestartingJobSet"] == "FailurePolicy_Rule1"
    world.run(lambda: world.conditions().get("RestartingJobSet") == "False")
    reasons = {c["type"]: c["reason"] for c in world.jobset().status["conditions"]}
    assert reasons["RestartingJobSet"] == "JobsReady"
    assert all(j.labels[RESTART_ATTEMPT] == "1" for j in world.jobs().values())
    assert all(p.ready for p in world.live_pods())


def _restarted(strategy: str) -> tuple[Any, list[Any]]:
    """restarts=1 with four Jobs: three attempt-0 Jobs already gone, one still finalizing."""
    js = make_jobset(
        "js",
        [rjob("a", 4)],
        failurePolicy={"maxRestarts": 3, "restartStrategy": strategy},
        status={"restarts": 1, "restartsCountTowardsMax": 1},
    )
    return js, [child(js, "a", 2, RUNNING, restarts=0, deleting=True)]


def test_c8_5_recreate_replaces_each_job_once_its_own_predecessor_is_gone() -> None:
    js, jobs = _restarted("Recreate")
    decision = decide(state_of(js, *jobs))
    assert created_jobs(decision) == ["js-a-0", "js-a-1", "js-a-3"]
    assert deleted_jobs(decision) == []  # already being deleted
    assert created_jobs(decide(state_of(js))) == ["js-a-0", "js-a-1", "js-a-2", "js-a-3"]


def test_c8_5_the_old_attempt_is_deleted_in_the_foreground() -> None:
    js, _ = _restarted("Recreate")
    old = [child(js, "a", i, RUNNING, restarts=0) for i in range(4)]
    decision = decide(state_of(js, *old))
    assert deleted_jobs(decision) == ["js-a-0", "js-a-1", "js-a-2", "js-a-3"]
    assert created_jobs(decision) == []
    assert decision is not None
    assert all(getattr(i, "propagation", "Foreground") == "Foreground" for i in decision.intents)


def test_c8_6_blocking_recreate_waits_for_every_old_job() -> None:
    js, jobs = _restarted("BlockingRecreate")
    decision = decide(state_of(js, *jobs))
    assert created_jobs(decision) == []
    assert decision is not None
    assert "BlockingRecreate: no Job is created while 1 Job(s)" in decision.reason
    assert created_jobs(decide(state_of(js))) == ["js-a-0", "js-a-1", "js-a-2", "js-a-3"]


def test_c8_6_blocking_recreate_on_the_world() -> None:
    world = JobSetWorld(terminate_ms=5000)
    world.create_jobset(
        jobset_json(
            "js",
            [rjob("a", 4, backoffLimit=0)],
            failurePolicy={"maxRestarts": 3, "restartStrategy": "BlockingRecreate"},
        )
    )
    world.run(lambda: len(world.live_pods()) == 4)
    fail_one(world, "js-a-0")
    attempts: list[tuple[int, int]] = []

    def record() -> bool:
        labels = [j.labels[RESTART_ATTEMPT] for j in world.jobs().values()]
        attempts.append((labels.count("0"), labels.count("1")))
        return labels.count("1") == 4

    world.run(record)
    assert all(old == 0 or new == 0 for old, new in attempts), attempts


def test_c8_7_restart_and_ignore_max_restarts_never_fails_on_the_limit() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 1)],
        failurePolicy={
            "maxRestarts": 0,
            "rules": [{"name": "ignore", "action": "RestartJobSetAndIgnoreMaxRestarts"}],
        },
        status={"restarts": 7, "restartsCountTowardsMax": 0},
    )
    patch = js_status(decide(state_of(js, child(js, "a", 0, failed()))))
    assert patch["restarts"] == 8
    assert "restartsCountTowardsMax" not in patch
    assert conditions(patch)["RestartingJobSet"] == ("True", "FailurePolicy_ignore")


def test_c8_8_restart_job_recreates_only_the_failed_job() -> None:
    world = JobSetWorld()
    world.create_jobset(
        jobset_json(
            "js",
            [rjob("a", 3, backoffLimit=0)],
            failurePolicy={"maxRestarts": 2, "rules": [{"action": "RestartJob"}]},
        )
    )
    world.run(lambda: len(world.live_pods()) == 3 and all(p.ready for p in world.live_pods()))
    before = uids(world)
    fail_one(world, "js-a-1")
    world.run(
        lambda: (
            world.jobs()["js-a-1"].uid != before["js-a-1"] if "js-a-1" in world.jobs() else False
        )
    )
    after = uids(world)
    assert after["js-a-0"] == before["js-a-0"]
    assert after["js-a-2"] == before["js-a-2"]
    assert world.jobs()["js-a-1"].labels[JOB_RESTART_ATTEMPT] == "1"
    assert world.jobs()["js-a-1"].labels[RESTART_ATTEMPT] == "0"
    status = world.jobset().status
    assert status.get("restarts", 0) == 0
    (rj,) = status["replicatedJobsStatus"]
    assert rj["jobRestarts"] == [0, 1, 0]
    assert rj["jobRestartsCountTowardsMax"] == [0, 1, 0]


def test_c8_8_restart_job_counts_towards_max_restarts() -> None:
    rules = {"maxRestarts": 2, "rules": [{"action": "RestartJob"}]}
    rj_status = {
        "name": "a",
        "ready": 0,
        "succeeded": 0,
        "failed": 1,
        "active": 2,
        "suspended": 0,
        "jobRestarts": [1, 0, 1],
        "jobRestartsCountTowardsMax": [1, 0, 1],
    }
    js = make_jobset(
        "js",
        [rjob("a", 3)],
        failurePolicy=rules,
        status={"replicatedJobsStatus": [rj_status]},
    )
    jobs = [
        child(js, "a", 0, RUNNING, job_restarts=1),
        child(js, "a", 1, failed()),
        child(js, "a", 2, RUNNING, job_restarts=1),
    ]
    patch = js_status(decide(state_of(js, *jobs)))
    assert conditions(patch)["Failed"] == ("True", "ReachedMaxRestarts")


def test_c8_8_an_outdated_job_restart_attempt_makes_the_job_previous() -> None:
    rj_status = {"name": "a", "jobRestarts": [0, 1], "jobRestartsCountTowardsMax": [0, 1]}
    js = make_jobset(
        "js",
        [rjob("a", 2)],
        failurePolicy={"maxRestarts": 2, "rules": [{"action": "RestartJob"}]},
        status={"replicatedJobsStatus": [rj_status]},
    )
    decision = decide(state_of(js, child(js, "a", 0, READY), child(js, "a", 1, failed())))
    assert deleted_jobs(decision) == ["js-a-1"]
    assert "Failed" not in conditions(js_status(decision))  # not in the current attempt


@pytest.mark.parametrize(("failing", "targeted"), [("b", True), ("a", False)])
def test_c8_9_target_replicated_jobs(failing: str, targeted: bool) -> None:
    js = make_jobset(
        "js",
        [rjob("a", 1), rjob("b", 1)],
        failurePolicy={
            "maxRestarts": 3,
            "rules": [{"name": "onlyB", "action": "FailJobSet", "targetReplicatedJobs": ["b"]}],
        },
    )
    other = "a" if failing == "b" else "b"
    patch = js_status(
        decide(state_of(js, child(js, failing, 0, failed()), child(js, other, 0, RUNNING)))
    )
    if targeted:
        assert conditions(patch)["Failed"] == ("True", "FailJobSetFailurePolicyAction")
    else:
        assert conditions(patch)["RestartingJobSet"] == ("True", "DefaultFailurePolicy")


def test_c8_10_first_matching_rule_wins_and_earliest_failed_job_is_reported() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 3)],
        failurePolicy={
            "maxRestarts": 3,
            "rules": [
                {
                    "name": "never",
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["DeadlineExceeded"],
                },
                {
                    "name": "second",
                    "action": "FailJobSet",
                    "onJobFailureReasons": ["PodFailurePolicy"],
                },
                {"name": "third", "action": "RestartJobSet"},
            ],
        },
    )
    jobs = [
        child(js, "a", 0, failed("BackoffLimitExceeded", at=EARLY)),
        child(js, "a", 1, failed("PodFailurePolicy", at=LATE)),
        child(js, "a", 2, failed("PodFailurePolicy", at=EARLY)),
    ]
    decision = decide(state_of(js, *jobs))
    patch = js_status(decision)
    (condition,) = [c for c in patch["conditions"] if c["type"] == "Failed"]
    assert condition["reason"] == "FailJobSetFailurePolicyAction"
    assert condition["message"].endswith("(first failed job: js-a-2)")
    assert decision is not None
    assert decision.reason.startswith("FailJobSetFailurePolicyAction: rule second")
