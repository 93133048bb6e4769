"""The upstream scenarios of spec Part C (C1–C3, C5, C6), played on the in-memory cluster:
decide, apply, move pods through phases, decide again. Every status write passes the
simulated API server's status validation on the way (C4 is `test_job_status.py`)."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from daemon.controllers.job.spec import COMPLETION_INDEX, INDEX_FAILURE_COUNT
from events.fold import fold
from events.intents import Patch
from events.objects import POD_ORDINAL_ANNOTATION, Job, OwnerRef, Pod
from events.schema import Decided
from events.state import State
from tests.daemon.controllers.builders import (
    CLUSTER,
    FIN,
    NS,
    REC,
    SECOND,
    T0,
    container,
    creates,
    key,
    make_job,
    make_pod,
    make_state,
    observe,
    status_patch,
)
from tests.daemon.controllers.world import JobWorld

MODES = pytest.mark.parametrize("mode", ["Indexed", "NonIndexed"])


def started(**spec: Any) -> JobWorld:
    """A Job whose first pods are created and running (ready)."""
    cluster = JobWorld(make_state(make_job(**spec)))
    cluster.now = T0
    cluster.settle()
    cluster.run_all()
    cluster.settle()
    return cluster


def counters(cluster: JobWorld) -> tuple[int, int, int]:
    status = cluster.status
    return status.get("active", 0), status.get("failed", 0), status.get("terminating", 0)


def index_of(cluster: JobWorld, name: str) -> int:
    return int(cluster.pod(name).annotations[COMPLETION_INDEX])


# -- C1 pod replacement policy ---------------------------------------------------------------


@MODES
def test_c1_1_c1_2_terminating_or_failed_replaces_deleted_pods_at_once(mode: str) -> None:
    cluster = started(parallelism=2, completions=2, completion_mode=mode)
    first = [p.name for p in cluster.live_pods()]
    cluster.hold(*first)
    cluster.advance(SECOND)
    cluster.user_delete(*first)
    cluster.settle()
    assert counters(cluster) == (2, 2, 2)
    assert len(cluster.created) == 4  # 2 new + 2 recreated for terminating-or-failed pods
    if mode == "Indexed":
        assert sorted(index_of(cluster, n) for n in cluster.created[2:]) == [0, 1]

    cluster.kubelet_kill(*first)
    cluster.settle()
    assert counters(cluster) == (2, 2, 0)
    assert len(cluster.created) == 4


@MODES
def test_c1_3_failed_policy_waits_for_terminating(mode: str) -> None:
    cluster = started(
        parallelism=2, completions=2, completion_mode=mode, pod_replacement_policy="Failed"
    )
    first = [p.name for p in cluster.live_pods()]
    cluster.hold(*first)
    cluster.advance(SECOND)
    cluster.user_delete(*first)
    cluster.settle()
    assert counters(cluster) == (0, 0, 2)
    assert len(cluster.created) == 2  # no replacement while the old pods terminate

    cluster.kubelet_kill(*first)
    cluster.settle()
    assert counters(cluster) == (0, 2, 0)
    assert len(cluster.created) == 2  # two failures: 20 s back-off from when they stopped
    cluster.advance(20 * SECOND)
    cluster.settle()
    assert counters(cluster) == (2, 2, 0)
    assert len(cluster.created) == 4


def test_c1_4_failed_policy_replaces_only_after_the_old_pod_is_gone() -> None:
    cluster = started(pod_replacement_policy="Failed")
    (old,) = [p.name for p in cluster.live_pods()]
    cluster.advance(SECOND)
    cluster.user_delete(old)
    for _ in range(3):
        cluster.advance(30 * SECOND)
        cluster.settle()
        assert cluster.created == [old]
    cluster.kubelet_kill(old)
    cluster.advance(60 * SECOND)  # past the back-off
    cluster.settle()
    assert len(cluster.created) == 2
    assert cluster.live_pods()[0].name == cluster.created[1]


def test_c1_5_the_policy_in_force_decides_how_terminating_pods_count() -> None:
    """Gate toggling has no counterpart once the feature is GA; what remains is that every
    sync reads the policy afresh: the same terminating pods are waited for under `Failed`
    and counted and replaced under `TerminatingOrFailed`."""
    cluster = started(parallelism=2, completions=2, pod_replacement_policy="Failed")
    first = [p.name for p in cluster.live_pods()]
    cluster.hold(*first)
    cluster.advance(SECOND)
    cluster.user_delete(*first)
    cluster.settle()
    assert counters(cluster) == (0, 0, 2)

    cluster.update_job(podReplacementPolicy="TerminatingOrFailed")
    cluster.advance(60 * SECOND)
    cluster.settle()
    assert counters(cluster) == (2, 2, 2)

    cluster.update_job(podReplacementPolicy="Failed")
    cluster.settle()
    assert counters(cluster) == (2, 2, 2)  # still tracked as terminating, never recounted


# -- C2 delayed terminal conditions ------------------------------------------------------------


def test_c2_1_failure_target_first_failed_once_nothing_terminates() -> None:
    cluster = started(parallelism=2, completions=2, backoff_limit=0)
    a, b = [p.name for p in cluster.live_pods()]
    cluster.hold(a, b)
    cluster.advance(SECOND)
    cluster.set_phase(a, "Failed", exit_codes={"main": 1})
    cluster.settle()
    assert counters(cluster) == (0, 2, 1)
    assert cluster.conditions() == {"FailureTarget": "True"}
    target = cluster.condition("FailureTarget")
    assert (target["reason"], target["message"]) == (
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    )
    assert cluster.status.get("ready") == 0

    cluster.kubelet_kill(b)
    cluster.settle()
    assert cluster.conditions() == {"FailureTarget": "True", "Failed": "True"}
    assert cluster.condition("Failed")["reason"] == "BackoffLimitExceeded"
    assert counters(cluster) == (0, 2, 0)
    assert "completionTime" not in cluster.status


def test_c2_2_scaled_down_indexed_job_meets_criteria_then_completes() -> None:
    cluster = started(parallelism=2, completions=2, completion_mode="Indexed")
    i0, i1 = [p.name for p in cluster.live_pods()]
    cluster.hold(i1)
    cluster.set_phase(i0, "Succeeded")
    cluster.settle()
    cluster.update_job(completions=1, parallelism=1)
    cluster.settle()
    status = cluster.status
    assert cluster.conditions() == {"SuccessCriteriaMet": "True"}
    assert (status["succeeded"], status["terminating"], status["completedIndexes"]) == (1, 1, "0")
    assert status.get("failed", 0) == 0

    cluster.kubelet_kill(i1)
    cluster.settle()
    assert cluster.conditions() == {"SuccessCriteriaMet": "True", "Complete": "True"}
    assert cluster.status["completionTime"] == cluster.condition("Complete")["lastTransitionTime"]


FAIL_JOB_ON_5 = {
    "rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
        {
            "action": "FailJob",
            "onExitCodes": {"containerName": "main-container", "operator": "In", "values": [5]},
        },
    ]
}


def test_c2_3_fail_job_rule_sets_failure_target_then_failed_with_the_rule_message() -> None:
    cluster = started(
        parallelism=2,
        completions=2,
        pod_failure_policy=FAIL_JOB_ON_5,
        containers=[container("main-container")],
    )
    a, b = [p.name for p in cluster.live_pods()]
    cluster.set_phase(a, "Failed", exit_codes={"main-container": 5})
    cluster.settle()
    message = (
        f"Container main-container for pod ns/{a} failed with exit code 5 matching FailJob rule "
        "at index 1"
    )
    assert cluster.conditions() == {"FailureTarget": "True"}
    assert cluster.condition("FailureTarget")["reason"] == "PodFailurePolicy"
    assert cluster.condition("FailureTarget")["message"] == message
    assert cluster.pod(b).deletion_ts is not None

    cluster.kubelet_kill(b)
    cluster.settle()
    failed = cluster.condition("Failed")
    assert (failed["reason"], failed["message"]) == ("PodFailurePolicy", message)


@pytest.mark.parametrize(
    ("phase", "rule_container", "fails_job"),
    [
        ("Failed", "main-container", True),
        ("Running", "main-container", False),
        ("Failed", "other-container", False),
    ],
    ids=["failed-pod-matches", "running-pod-never-matches", "rule-for-another-container"],
)
def test_c2_3_fail_job_rule_matches_only_failed_pods_of_the_named_container(
    phase: str, rule_container: str, fails_job: bool
) -> None:
    policy = {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": rule_container, "operator": "In", "values": [5]},
            }
        ]
    }
    job = make_job(parallelism=1, completions=1, pod_failure_policy=policy, backoff_limit=3)
    pod = make_pod(job, "p", phase=phase, exit_codes={"main-container": 5}, finished=T0)
    decision = REC.decide(make_state(job, [pod]), key(job), T0 + 60 * SECOND)
    assert decision is not None
    status = status_patch(decision.intents)
    conditions = {c["type"] for c in status.get("conditions", ())}
    assert ("FailureTarget" in conditions) is fails_job
    if phase == "Failed" and not fails_job:
        assert status["uncountedTerminatedPods"]["failed"] == ["uid-p"]  # default counting


# -- C3 managedBy (C3.1/C3.2 in test_job_pods.py) ---------------------------------------------


def test_c3_3_a_job_recreated_under_another_manager_is_skipped() -> None:
    old = make_job(uid="old-uid")
    new = make_job(uid="new-uid", managed_by="example.com/custom-job-controller")
    pods = [make_pod(old, "old-pod", phase="Succeeded")]
    assert REC.decide(make_state(new, pods), key(new), T0) is None


def test_pods_of_a_deleted_job_lose_only_the_kbatchd_finalizer() -> None:
    old = make_job()
    pods = [
        make_pod(old, "a", phase="Succeeded", finalizers=(FIN, "example.com/other")),
        make_pod(old, "b", phase="Running", finalizers=()),
    ]
    decision = REC.decide(make_state(None, pods), key("job"), T0)
    assert decision is not None
    assert decision.reason.startswith("ReleaseOrphans:")
    (patch,) = decision.intents
    assert isinstance(patch, Patch)
    assert patch.name == "a"
    assert patch.patch == {
        "metadata": {"uid": "uid-a", "$deleteFromPrimitiveList/finalizers": [FIN]}
    }
    assert REC.decide(make_state(None, pods[1:]), key("job"), T0) is None


@pytest.mark.parametrize(
    "managed_by", ["example.com/custom-job-controller", None], ids=["external", "kbatchd"]
)
def test_c3_4_builtin_tracking_finalizer_is_never_touched(managed_by: str | None) -> None:
    kwargs = {} if managed_by is None else {"managed_by": managed_by}
    job = make_job(
        status={
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True"},
                {"type": "Complete", "status": "True"},
            ],
            "startTime": "2026-01-01T00:00:00Z",
            "completionTime": "2026-01-01T00:00:01Z",
            "succeeded": 1,
        },
        **kwargs,
    )
    pod = make_pod(job, "p", phase="Succeeded", finalizers=("batch.kubernetes.io/job-tracking",))
    assert REC.decide(make_state(job, [pod]), key(job), T0) is None


def test_c3_5_status_of_an_externally_managed_job_stays_untouched() -> None:
    job = make_job(managed_by="example.com/custom-job-controller", status={"active": 3})
    pods = [make_pod(job, "p", phase="Failed")]
    assert REC.decide(make_state(job, pods), key(job), T0) is None


# -- C5 suspended Jobs ---------------------------------------------------------------------------


def test_c5_1_a_never_started_suspended_job_resumes_with_the_new_directives() -> None:
    cluster = JobWorld(make_state(make_job(parallelism=2, completions=2, suspend=True)))
    cluster.now = T0
    cluster.settle()
    assert cluster.created == []
    assert cluster.condition("Suspended")["reason"] == "JobSuspended"
    assert "startTime" not in cluster.status
    template = dict(cluster.job.spec["template"])
    template["spec"] = {**template["spec"], "nodeSelector": {"pool": "b"}}
    template["metadata"] = {**template["metadata"], "annotations": {"queue": "q"}}
    cluster.update_job(template=template, suspend=False)
    cluster.advance(SECOND)
    cluster.settle()
    assert len(cluster.created) == 2
    for pod in cluster.pods():
        assert {k: v for k, v in pod.annotations.items() if k != POD_ORDINAL_ANNOTATION} == {
            "queue": "q"
        }
    made = [c for d in cluster.decisions for c in creates(d.intents)]
    assert [c.body["spec"]["nodeSelector"] for c in made] == [{"pool": "b"}] * 2
    assert cluster.condition("Suspended")["status"] == "False"
    assert cluster.status["startTime"] == "2026-01-01T00:00:01Z"


def test_c5_3_c5_7_suspended_is_written_with_active_zero_so_directives_may_change() -> None:
    cluster = started(parallelism=2, completions=2)
    cluster.update_job(suspend=True)
    first = cluster.step()
    assert first is not None
    assert first.reason.startswith("Suspended: removing the tracking finalizer of 2 active")
    assert "Suspended" not in cluster.conditions()
    second = cluster.step()
    assert second is not None
    assert second.reason.startswith("Suspended: deleting 2 released pod(s)")
    status = cluster.status
    assert (status["active"], status["terminating"], status["ready"]) == (0, 2, 0)
    assert cluster.condition("Suspended")["status"] == "True"
    assert "startTime" not in status  # cleared while suspended (KEP-5440)


def test_c5_6_resuming_flips_suspended_to_false_at_once() -> None:
    job = make_job(
        parallelism=1,
        completions=1,
        status={
            "conditions": [
                {
                    "type": "Suspended",
                    "status": "True",
                    "reason": "JobSuspended",
                    "message": "Job suspended",
                }
            ]
        },
    )
    decision = REC.decide(make_state(job), key(job), T0)
    assert decision is not None
    status = status_patch(decision.intents)
    (suspended,) = status["conditions"]
    assert (suspended["status"], suspended["reason"], suspended["message"]) == (
        "False",
        "JobResumed",
        "Job resumed",
    )
    assert status["startTime"] == "2026-01-01T00:00:00Z"
    assert len(creates(decision.intents)) == 1


def test_c5_8_failed_policy_resume_waits_for_old_pods_and_uses_new_resources() -> None:
    cluster = started(parallelism=2, completions=2, pod_replacement_policy="Failed")
    old = [p.name for p in cluster.live_pods()]
    cluster.hold(*old)
    cluster.update_job(suspend=True)
    cluster.settle()
    assert counters(cluster) == (0, 0, 2)
    template = dict(cluster.job.spec["template"])
    resources = {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}}
    template["spec"] = {**template["spec"], "containers": [container(resources=resources)]}
    cluster.update_job(template=template, suspend=False)
    cluster.advance(SECOND)
    cluster.settle()
    assert len(cluster.created) == 2  # old pods still terminating
    cluster.kubelet_kill(*old)
    cluster.settle()
    new = [d for d in cluster.decisions if creates(d.intents)][-1]
    assert len(cluster.created) == 4
    for create in creates(new.intents):
        assert create.body["spec"]["containers"][0]["resources"] == resources
    assert cluster.status.get("failed", 0) == 0  # suspension is not a failure


def test_c5_10_suspension_does_not_count_and_resume_resets_start_time() -> None:
    cluster = started(parallelism=2, completions=2)
    old = [p.name for p in cluster.live_pods()]
    cluster.update_job(suspend=True)
    cluster.advance(SECOND)
    cluster.settle()
    for name in old:
        assert FIN not in cluster.pod(name).finalizers
        assert cluster.pod(name).deletion_ts is not None
    cluster.kubelet_kill(*old)
    cluster.settle()
    assert cluster.pods() == []
    assert counters(cluster) == (0, 0, 0)
    assert cluster.status.get("succeeded", 0) == 0

    cluster.update_job(suspend=False)
    cluster.advance(10 * SECOND)
    cluster.settle()
    assert len(cluster.created) == 4
    assert counters(cluster) == (2, 0, 0)
    assert cluster.status["startTime"] == "2026-01-01T00:00:11Z"
    assert cluster.condition("Suspended")["reason"] == "JobResumed"


# -- C6 podFailurePolicy / backoffLimitPerIndex / successPolicy / back-off ----------------------


def fail_index(cluster: JobWorld, index: int, code: int = 1) -> str:
    (pod,) = [p for p in cluster.live_pods() if index_of(cluster, p.name) == index]
    cluster.set_phase(pod.name, "Failed", exit_codes={"main": code})
    return pod.name


def test_c6_1_replacement_carries_the_index_failure_count_and_job_completes() -> None:
    cluster = started(
        parallelism=2, completions=2, completion_mode="Indexed", backoff_limit_per_index=1
    )
    failed = fail_index(cluster, 0)
    last = cluster.settle()
    assert last is not None
    assert last.reason.startswith("BackOff:")
    assert last.requeue_at == cluster.now + 10 * SECOND
    assert FIN in cluster.pod(failed).finalizers  # kept until the replacement exists
    cluster.advance_to_requeue()
    cluster.settle()
    (replacement,) = [p for p in cluster.live_pods() if index_of(cluster, p.name) == 0]
    assert replacement.annotations[INDEX_FAILURE_COUNT] == "1"
    assert FIN not in cluster.pod(failed).finalizers
    assert cluster.status["failed"] == 1

    cluster.run_all()
    for pod in cluster.live_pods():
        cluster.set_phase(pod.name, "Succeeded")
    cluster.settle()
    assert cluster.conditions() == {"SuccessCriteriaMet": "True", "Complete": "True"}
    assert cluster.status["completedIndexes"] == "0,1"
    assert cluster.status["failedIndexes"] == ""


def test_c6_2_index_exhausting_its_limit_fails_but_others_run_on() -> None:
    cluster = started(
        parallelism=2, completions=2, completion_mode="Indexed", backoff_limit_per_index=2
    )
    for attempt in range(3):
        fail_index(cluster, 0)
        cluster.settle()
        if attempt < 2:
            cluster.advance_to_requeue()
            cluster.settle()
            cluster.run_all()
    assert cluster.status["failedIndexes"] == "0"
    assert [index_of(cluster, p.name) for p in cluster.live_pods()] == [1]
    assert "conditions" not in cluster.status

    cluster.set_phase(cluster.live_pods()[0].name, "Succeeded")
    cluster.settle()
    assert cluster.conditions() == {"FailureTarget": "True", "Failed": "True"}
    assert cluster.condition("Failed")["reason"] == "FailedIndexes"
    assert (cluster.status["failed"], cluster.status["completedIndexes"]) == (3, "1")


def test_c6_3_global_backoff_limit_wins_over_the_per_index_limit() -> None:
    cluster = started(
        parallelism=3,
        completions=3,
        completion_mode="Indexed",
        backoff_limit_per_index=1,
        backoff_limit=2,
    )
    for index in (0, 1):
        fail_index(cluster, index)
        cluster.settle()
        cluster.advance_to_requeue()
        cluster.settle()
        cluster.run_all()
    fail_index(cluster, 2)
    cluster.settle()
    assert cluster.conditions() == {"FailureTarget": "True"}
    assert cluster.condition("FailureTarget")["reason"] == "BackoffLimitExceeded"
    assert cluster.status["terminating"] == 2
    assert cluster.status["failedIndexes"] == ""
    assert cluster.status["failed"] >= 3

    cluster.kubelet_kill()
    cluster.settle()
    assert cluster.condition("Failed")["reason"] == "BackoffLimitExceeded"


def test_c6_4_zero_per_index_limit_fails_the_index_at_once() -> None:
    cluster = started(
        parallelism=2, completions=2, completion_mode="Indexed", backoff_limit_per_index=0
    )
    fail_index(cluster, 0)
    cluster.settle()
    assert cluster.status["failedIndexes"] == "0"
    assert len(cluster.created) == 2  # no replacement for a failed index
    assert "conditions" not in cluster.status
    cluster.set_phase(cluster.live_pods()[0].name, "Succeeded")
    cluster.settle()
    assert cluster.condition("Failed")["reason"] == "FailedIndexes"
    assert cluster.condition("Failed")["message"] == "Job has failed indexes"


def finished(state: State, pod: Pod) -> None:
    """A pod observed finished with the tracking finalizer, then counted (finalizer removed)
    and deleted: gone from the state, as counted pods soon are."""
    assert FIN in pod.finalizers
    observe(state, pod)
    released = msgspec.structs.replace(pod, finalizers=())
    observe(state, released, "MODIFIED")
    observe(state, released, "DELETED")


@pytest.mark.parametrize(
    ("failures", "delay_s"),
    [(1, 10), (2, 20), (3, 40), (4, 80), (6, 320), (7, 600), (12, 600)],
    ids=["1", "2", "3", "4", "6", "7-capped", "12-capped"],
)
def test_c6_6_backoff_doubles_from_10s_and_caps_at_10min(failures: int, delay_s: int) -> None:
    job = make_job(parallelism=1, completions=1, backoff_limit=20, status={"failed": failures})
    last = T0 + failures * SECOND
    state = make_state(job)
    for i in range(failures):
        finished(state, make_pod(job, f"f{i}", phase="Failed", finished=T0 + (i + 1) * SECOND))
    assert state.pods == {}  # the back-off outlives the pods
    waiting = REC.decide(state, key(job), last + SECOND)
    assert waiting is not None
    assert creates(waiting.intents) == []
    assert waiting.requeue_at == last + delay_s * SECOND
    due = REC.decide(state, key(job), last + delay_s * SECOND)
    assert due is not None
    assert len(creates(due.intents)) == 1


def test_c6_6_a_success_resets_the_failure_count() -> None:
    job = make_job(parallelism=1, completions=3, status={"failed": 3, "succeeded": 1})
    state = make_state(job)
    for pod in (
        make_pod(job, "f1", phase="Failed", finished=T0),
        make_pod(job, "f2", phase="Failed", finished=T0 + SECOND),
        make_pod(job, "s1", phase="Succeeded", finished=T0 + 2 * SECOND),
        make_pod(job, "f3", phase="Failed", finished=T0 + 3 * SECOND),
    ):
        finished(state, pod)
    decision = REC.decide(state, key(job), T0 + 4 * SECOND)
    assert decision is not None
    assert decision.requeue_at == T0 + 13 * SECOND


def test_c6_7_success_policy_meets_criteria_removes_lingering_pods_then_completes() -> None:
    policy = {"rules": [{"succeededIndexes": "0,2-3", "succeededCount": 1}]}
    cluster = started(
        parallelism=4, completions=4, completion_mode="Indexed", success_policy=policy
    )
    (winner,) = [p.name for p in cluster.live_pods() if index_of(cluster, p.name) == 2]
    cluster.hold()
    cluster.set_phase(winner, "Succeeded")
    cluster.settle()
    assert cluster.conditions() == {"SuccessCriteriaMet": "True"}
    met = cluster.condition("SuccessCriteriaMet")
    assert (met["reason"], met["message"]) == ("SuccessPolicy", "Matched rules at index 0")
    assert cluster.status["terminating"] == 3
    assert cluster.status["completedIndexes"] == "2"

    cluster.kubelet_kill()
    cluster.settle()
    complete = cluster.condition("Complete")
    assert (complete["reason"], complete["message"]) == (
        "SuccessPolicy",
        "Matched rules at index 0",
    )
    assert cluster.status.get("failed", 0) == 0
    assert cluster.status["succeeded"] == 1


def test_c6_7_success_policy_is_not_evaluated_for_a_failing_job() -> None:
    policy = {"rules": [{"succeededCount": 1}]}
    job = make_job(
        parallelism=2,
        completions=2,
        completion_mode="Indexed",
        success_policy=policy,
        backoff_limit=0,
    )
    pods = [
        make_pod(job, "i0", index=0, phase="Succeeded", finished=T0),
        make_pod(job, "i1", index=1, phase="Failed", finished=T0),
    ]
    decision = REC.decide(make_state(job, pods), key(job), T0 + SECOND)
    assert decision is not None
    types = [c["type"] for c in status_patch(decision.intents)["conditions"]]
    assert types == ["FailureTarget"]


def _orphan(owners: tuple[OwnerRef, ...], finalizers: tuple[str, ...] = (FIN,)) -> Pod:
    return msgspec.structs.replace(
        make_pod(make_job(), "p", phase="Succeeded", finalizers=finalizers), owners=owners
    )


JOB_OWNER = OwnerRef("Job", "job", "job-uid", True)
ORPHANS = {
    # pod's owners, the Jobs the state shows, whether the finalizer is released
    "owner references cleared (--cascade=orphan)": ((), [make_job()], True),
    "its Job gone": ((JOB_OWNER,), [], True),
    "its Job replaced under the same name": ((JOB_OWNER,), [make_job(uid="new")], True),
    "controlled by another kind": ((OwnerRef("ReplicaSet", "rs", "u", True),), [], True),
    "owned by its Job": ((JOB_OWNER,), [make_job(uid="job-uid")], False),
}


@pytest.mark.parametrize(("owners", "jobs", "released"), ORPHANS.values(), ids=ORPHANS.keys())
def test_a_pod_no_job_of_ours_owns_loses_the_tracking_finalizer(
    owners: tuple[OwnerRef, ...], jobs: list[Job], released: bool
) -> None:
    state = make_state(None, [_orphan(owners)])
    for job in jobs:
        observe(state, job)
    decision = REC.decide(state, f"Pod/{CLUSTER}/{NS}/p", T0)
    if not released:
        assert decision is None
        return
    assert decision is not None
    assert decision.reason.startswith("ReleaseOrphan: pod ns/p (")
    (patch,) = decision.intents
    assert isinstance(patch, Patch)
    assert (patch.kind, patch.name) == ("Pod", "p")
    assert patch.patch == {
        "metadata": {"uid": "uid-p", "$deleteFromPrimitiveList/finalizers": [FIN]}
    }


def test_an_orphan_without_the_finalizer_or_already_being_released_is_left_alone() -> None:
    bare = make_state(None, [_orphan((), finalizers=("example.com/other",))])
    assert REC.decide(bare, f"Pod/{CLUSTER}/{NS}/p", T0) is None
    releasing = make_state(None, [_orphan(())])
    decision = REC.decide(releasing, f"Pod/{CLUSTER}/{NS}/p", T0)
    assert decision is not None
    fold(
        releasing,
        releasing.seq + 1,
        Decided(at=T0, reconciler="job", key="k", reason="r", intents=decision.intents),
    )
    assert REC.decide(releasing, f"Pod/{CLUSTER}/{NS}/p", T0) is None
