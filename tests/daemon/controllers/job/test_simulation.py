"""End to end without I/O: an Indexed Job with backoffLimitPerIndex whose index 1 fails, played
decision by decision on the in-memory cluster until the Job finishes. Checks the multi-step
accounting protocol: nothing counted twice or lost, counters never decrease, every status write
accepted by the API server's rules, no finalizer left behind."""

from __future__ import annotations

import pytest

from daemon.controllers.job.indexes import Indexes
from daemon.controllers.job.spec import COMPLETION_INDEX, INDEX_FAILURE_COUNT
from tests.daemon.controllers.builders import (
    FIN,
    SECOND,
    T0,
    make_job,
    make_pod,
    make_state,
    observe,
)
from tests.daemon.controllers.world import JobWorld


def play(failures_of_index_1: int, limit: int = 1, steps: int = 40) -> JobWorld:
    job = make_job(
        parallelism=3, completions=3, completion_mode="Indexed", backoff_limit_per_index=limit
    )
    cluster = JobWorld(make_state(job))
    cluster.now = T0
    left = failures_of_index_1
    last_counts = (0, 0)
    for _ in range(steps):
        decision = cluster.settle()
        status = cluster.status
        counts = (
            status.get("failed", 0)
            + len((status.get("uncountedTerminatedPods") or {}).get("failed", [])),
            status.get("succeeded", 0),
        )
        assert counts >= last_counts, "a counter went backwards"
        last_counts = counts
        if {"Complete", "Failed"} & {k for k, v in cluster.conditions().items() if v == "True"}:
            return cluster
        cluster.advance(SECOND)
        pending = [p for p in cluster.pods() if p.phase == "Pending" and p.deletion_ts is None]
        if pending:
            cluster.run_all()
            continue
        running = cluster.live_pods()
        if running:
            pod = running[0]
            if pod.annotations[COMPLETION_INDEX] == "1" and left > 0:
                left -= 1
                cluster.set_phase(pod.name, "Failed", exit_codes={"main": 1})
            else:
                cluster.set_phase(pod.name, "Succeeded")
            continue
        assert decision is not None, "stalled"
        assert decision.requeue_at is not None, "stalled"
        cluster.advance_to_requeue()
    raise AssertionError("the Job did not finish")


@pytest.mark.parametrize(
    ("failures", "outcome", "completed", "failed_indexes"),
    [
        (0, "Complete", "0-2", ""),
        (1, "Complete", "0-2", ""),
        (2, "Failed", "0,2", "1"),
    ],
    ids=["no-failure", "one-retry-then-success", "index-exhausted"],
)
def test_indexed_job_with_a_failing_index_runs_to_the_end(
    failures: int, outcome: str, completed: str, failed_indexes: str
) -> None:
    cluster = play(failures)
    status = cluster.status
    assert cluster.conditions()[outcome] == "True"
    if outcome == "Failed":
        assert cluster.condition("Failed")["reason"] == "FailedIndexes"
        assert cluster.conditions()["FailureTarget"] == "True"
    else:
        assert cluster.conditions()["SuccessCriteriaMet"] == "True"
        assert status["completionTime"] == cluster.condition("Complete")["lastTransitionTime"]
    assert status["completedIndexes"] == completed
    assert status["failedIndexes"] == failed_indexes
    assert status.get("failed", 0) == failures  # each failed pod counted exactly once
    assert status["succeeded"] == Indexes.parse(completed, 3).total()
    uncounted = status.get("uncountedTerminatedPods") or {}
    assert not uncounted.get("succeeded")
    assert not uncounted.get("failed")
    assert (status["active"], status["terminating"], status["ready"]) == (0, 0, 0)
    assert all(FIN not in p.finalizers for p in cluster.pods())
    assert len(cluster.created) == 3 + failures - (1 if outcome == "Failed" else 0)
    retries = [p for p in cluster.pods() if p.annotations[COMPLETION_INDEX] == "1"]
    assert sorted(p.annotations[INDEX_FAILURE_COUNT] for p in retries) == [
        str(i) for i in range(len(retries))
    ]


def test_a_pod_that_vanishes_after_its_finalizer_went_is_still_counted() -> None:
    job = make_job(
        parallelism=2,
        completions=2,
        status={
            "startTime": "2026-01-01T00:00:00Z",
            "active": 1,
            "ready": 0,
            "terminating": 0,
            "failed": 1,
            "uncountedTerminatedPods": {"failed": ["uid-gone"]},
        },
    )
    counted_before = make_pod(job, "old", phase="Failed", finalizers=(), finished=T0)
    running = make_pod(job, "run")
    cluster = JobWorld(make_state(job, [counted_before, running]))
    cluster.now = T0 + 3600 * SECOND
    cluster.settle()
    assert cluster.status["failed"] == 2
    assert cluster.status["uncountedTerminatedPods"] == {"succeeded": [], "failed": []}
    observe(cluster.state, cluster.pod("old"), "DELETED")
    assert cluster.settle() is None
    assert cluster.status["failed"] == 2


def test_the_log_of_decisions_replays_identically() -> None:
    first = play(2)
    second = play(2)
    assert first.decisions == second.decisions
    assert first.status_writes == second.status_writes
