"""What a Job must not forget when its pods are gone, played on the in-memory cluster: a pod
name is never used twice in a Job's life, and the back-off after failures holds even once the
failed pods have been counted and deleted (spec A1, A5.4, C1.4, C6.6)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from daemon.controllers.job.pods import SUFFIXES, name_suffix, pod_name
from events.objects import POD_ORDINAL_ANNOTATION
from tests.daemon.controllers.builders import (
    CLUSTER,
    JOB_UID,
    SECOND,
    T0,
    creates,
    make_job,
    make_pod,
    make_state,
    observe,
)
from tests.daemon.controllers.world import JobWorld

MODES = pytest.mark.parametrize("mode", ["NonIndexed", "Indexed"])
POLICIES = pytest.mark.parametrize("policy", ["Failed", "TerminatingOrFailed"])


def started(**spec: Any) -> JobWorld:
    cluster = JobWorld(make_state(make_job(**spec)))
    cluster.now = T0
    cluster.settle()
    cluster.run_all()
    cluster.settle()
    return cluster


def gone(cluster: JobWorld, name: str) -> bool:
    return f"{CLUSTER}/{cluster.job.namespace}/{name}" not in cluster.state.pods


def replace_all(cluster: JobWorld, want: int) -> None:
    """Settle, waiting out any back-off, until `want` pods run again."""
    for _ in range(20):
        cluster.settle()
        cluster.run_all()
        if len(cluster.live_pods()) >= want:
            return
        cluster.advance_to_requeue()
    raise AssertionError("no replacement")


# -- names --------------------------------------------------------------------------------------


@MODES
@POLICIES
def test_replacement_names_never_repeat(mode: str, policy: str) -> None:
    """The reported bug: the replacement of a deleted pod got the deleted pod's name once the
    old pod was gone, because the attempt number counted the pods present."""
    cluster = started(
        parallelism=2,
        completions=2,
        completion_mode=mode,
        pod_replacement_policy=policy,
        backoff_limit=1000,
    )
    cycles = 24
    for cycle in range(cycles):
        cluster.advance(SECOND)
        victim = cluster.live_pods()[cycle % 2].name
        how = cycle % 3
        if how == 0:  # a user deletes it
            cluster.user_delete(victim)
            cluster.settle()
            cluster.kubelet_kill(victim)
        elif how == 1:  # it fails, is counted, and a user cleans it up
            cluster.set_phase(victim, "Failed", exit_codes={"main": 1})
            cluster.settle()
            cluster.user_delete(victim)
        else:  # it is evicted
            cluster.set_phase(victim, "Running", conditions={"DisruptionTarget": "True"})
            cluster.user_delete(victim)
            cluster.settle()
            cluster.kubelet_kill(victim)
        replace_all(cluster, 2)
        assert len(set(cluster.created)) == len(cluster.created), f"cycle {cycle}: name reused"
        assert gone(cluster, victim)
    assert len(cluster.created) == 2 + cycles
    ordinals = [int(p.annotations[POD_ORDINAL_ANNOTATION]) for p in cluster.pods()]
    assert sorted(ordinals) == [cycles, cycles + 1]  # numbered on, never reused


def test_names_after_suspend_and_resume_are_new() -> None:
    """Pods deleted for suspension are never counted, so no count can number their successors;
    the ordinal watermark does."""
    cluster = started(parallelism=2, completions=4)
    first = [p.name for p in cluster.live_pods()]
    cluster.update_job(suspend=True)
    cluster.settle()
    cluster.kubelet_kill()
    cluster.settle()
    assert all(gone(cluster, name) for name in first)
    assert cluster.status.get("failed", 0) == 0
    cluster.update_job(suspend=False)
    cluster.settle()
    assert len(cluster.created) == 4
    assert set(cluster.created[2:]).isdisjoint(first)


def test_a_retried_decision_names_the_same_pods() -> None:
    """Until a created pod is observed the watermark does not move, so deciding again (after a
    lost outcome) names the same pod, and a create that did happen meets AlreadyExists."""
    state = make_state(make_job(parallelism=3, completions=3))
    cluster = JobWorld(state)
    cluster.now = T0
    first = cluster.rec.decide(state, cluster.key, T0)
    assert first is not None
    wanted = [c.name for c in creates(first.intents)]
    # The status write and the first create land; the outcomes of the others are lost.
    status, create, *_ = first.intents
    cluster.apply(status)
    cluster.apply(create)
    cluster.advance(30 * SECOND)
    again = cluster.rec.decide(state, cluster.key, cluster.now)
    assert again is not None
    assert [c.name for c in creates(again.intents)] == wanted[1:]


def test_names_skip_one_another_pod_holds() -> None:
    job = make_job(parallelism=1, completions=1)
    squatter = make_pod(job, pod_name("job", JOB_UID, None, 0), owner_uid="someone-else")
    cluster = JobWorld(make_state(job, [squatter]))
    cluster.now = T0
    cluster.settle()
    (mine,) = cluster.created
    assert mine == pod_name("job", JOB_UID, None, 1)
    assert cluster.pod(mine).annotations[POD_ORDINAL_ANNOTATION] == "1"


@pytest.mark.parametrize("index", [None, 0, 7])
def test_suffixes_are_distinct_for_distinct_ordinals(index: int | None) -> None:
    suffixes = {name_suffix(JOB_UID, index, ordinal) for ordinal in range(50_000)}
    assert len(suffixes) == 50_000
    # A bijection modulo the number of suffixes: the first ordinal past it wraps around.
    assert name_suffix(JOB_UID, index, SUFFIXES) == name_suffix(JOB_UID, index, 0)


# -- back-off -----------------------------------------------------------------------------------


def test_backoff_outlives_the_deleted_pod_doubles_and_resets_on_success() -> None:
    """The reported bug: `BackOff: no new pods before …` then, a few ms later once the failed
    pod was counted and gone, `CreatePods`."""
    cluster = started(parallelism=1, completions=3, pod_replacement_policy="Failed")
    (first,) = cluster.created
    cluster.advance(SECOND)
    cluster.user_delete(first)
    cluster.settle()
    cluster.advance(5 * SECOND)
    failed_at = cluster.now
    cluster.kubelet_kill(first)
    last = cluster.settle()
    assert gone(cluster, first)
    assert cluster.status["failed"] == 1
    assert last is not None
    assert last.reason.startswith("BackOff:")
    assert last.requeue_at == failed_at + 10 * SECOND
    cluster.advance(9 * SECOND)
    cluster.settle()
    assert cluster.created == [first]
    cluster.advance(SECOND)
    cluster.settle()
    assert len(cluster.created) == 2

    # A second consecutive failure: 20 s, still after the pod is gone.
    second = cluster.created[-1]
    cluster.run_all()
    cluster.advance(3 * SECOND)
    failed_at = cluster.now
    cluster.set_phase(second, "Failed", exit_codes={"main": 1})
    cluster.settle()
    cluster.user_delete(second)
    cluster.advance(SECOND)
    cluster.settle()
    assert gone(cluster, second)
    cluster.advance(18 * SECOND)
    cluster.settle()
    assert len(cluster.created) == 2
    assert cluster.now == failed_at + 19 * SECOND
    cluster.advance(SECOND)
    cluster.settle()
    assert len(cluster.created) == 3

    # A success resets: its successor comes at once, and the next failure waits 10 s again.
    third = cluster.created[-1]
    cluster.run_all()
    cluster.advance(SECOND)
    cluster.set_phase(third, "Succeeded")
    cluster.settle()
    assert len(cluster.created) == 4
    fourth = cluster.created[-1]
    cluster.run_all()
    cluster.advance(SECOND)
    failed_at = cluster.now
    cluster.set_phase(fourth, "Failed", exit_codes={"main": 1})
    last = cluster.settle()
    assert last is not None
    assert last.requeue_at == failed_at + 10 * SECOND


def test_terminating_or_failed_backs_off_from_the_deletion() -> None:
    """Under TerminatingOrFailed a deleted pod is a failure at once; the delay runs from its
    deletion (deletionTimestamp less the grace period, as the API server sets it), and holds
    after the pod is gone."""
    cluster = started(parallelism=1, completions=1)
    (first,) = cluster.created
    cluster.advance(SECOND)
    deleted_at = cluster.now
    pod = cluster.pod(first)
    observe(
        cluster.state,
        msgspec.structs.replace(pod, rv="9", deletion_ts=deleted_at + pod.grace_seconds * 1000),
        "MODIFIED",
    )
    last = cluster.settle()
    assert cluster.status["failed"] == 1
    assert last is not None
    assert last.requeue_at == deleted_at + 10 * SECOND
    assert cluster.created == [first]
    cluster.advance(4 * SECOND)
    cluster.kubelet_kill(first)
    cluster.settle()
    assert gone(cluster, first)
    assert cluster.created == [first]
    cluster.advance_to_requeue()
    cluster.settle()
    assert len(cluster.created) == 2
    assert cluster.now == deleted_at + 10 * SECOND
