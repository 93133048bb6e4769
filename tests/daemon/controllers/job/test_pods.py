"""Creating and deleting a Job's pods: names, labels, annotations, hostname, env, owner and
finalizer; the parallelism/completions arithmetic; which pods go first when there are too
many; managedBy; determinism."""

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from daemon.controllers.base import Reconciler
from daemon.controllers.job.pods import name_prefix
from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.job.spec import COMPLETION_INDEX, COMPLETION_INDEX_ENV, INDEX_FAILURE_COUNT
from events.intents import Create, Delete, Patch
from events.objects import POD_ORDINAL_ANNOTATION
from tests.daemon.controllers.builders import (
    FIN,
    JOB_UID,
    REC,
    SECOND,
    T0,
    container,
    creates,
    deletes,
    key,
    make_job,
    make_pod,
    make_state,
    releases,
    status_patch,
)

SELECTOR_LABELS = {
    "batch.kubernetes.io/controller-uid": JOB_UID,
    "controller-uid": JOB_UID,
    "batch.kubernetes.io/job-name": "job",
    "job-name": "job",
}


def decide_creates(**spec: Any) -> list[Create]:
    job = make_job(**spec)
    decision = REC.decide(make_state(job), key(job), T0)
    assert decision is not None
    return creates(decision.intents)


def test_nonindexed_pods_have_template_selector_labels_owner_and_finalizer() -> None:
    made = decide_creates(
        parallelism=2,
        completions=4,
        template_labels={"app": "train"},
        template_annotations={"note": "x"},
    )
    assert len(made) == 2
    for ordinal, create in enumerate(made):
        assert re.fullmatch(r"job-[0-9a-z]{5}", create.name)
        meta = create.body["metadata"]
        assert meta["name"] == create.name
        assert meta["namespace"] == "ns"
        assert meta["labels"] == {"app": "train", **SELECTOR_LABELS}
        assert meta["annotations"] == {"note": "x", POD_ORDINAL_ANNOTATION: str(ordinal)}
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "job",
                "uid": JOB_UID,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["finalizers"] == [FIN]
        assert "batch.kubernetes.io/job-tracking" not in meta["finalizers"]
        spec = create.body["spec"]
        assert "hostname" not in spec
        assert all("env" not in c for c in spec["containers"])
        assert create.body["kind"] == "Pod"
        assert create.cluster == "c1"
    assert len({c.name for c in made}) == 2


def test_indexed_pods_carry_index_annotation_label_hostname_and_env() -> None:
    preset = {"name": COMPLETION_INDEX_ENV, "value": "preset"}
    made = decide_creates(
        parallelism=3,
        completions=3,
        completion_mode="Indexed",
        containers=[container("main"), container("side", env=[preset])],
        init_containers=[container("init")],
    )
    assert [c.name[: len("job-0-")] for c in made] == ["job-0-", "job-1-", "job-2-"]
    for index, create in enumerate(made):
        assert re.fullmatch(rf"job-{index}-[0-9a-z]{{5}}", create.name)
        meta, spec = create.body["metadata"], create.body["spec"]
        assert meta["annotations"][COMPLETION_INDEX] == str(index)
        assert meta["labels"][COMPLETION_INDEX] == str(index)
        assert meta["labels"] | SELECTOR_LABELS == meta["labels"]
        assert spec["hostname"] == f"job-{index}"
        main, side = spec["containers"]
        (init,) = spec["initContainers"]
        for c in (main, init):
            assert c["env"] == [
                {
                    "name": COMPLETION_INDEX_ENV,
                    "valueFrom": {
                        "fieldRef": {"fieldPath": f"metadata.labels['{COMPLETION_INDEX}']"}
                    },
                }
            ]
        assert side["env"] == [preset]  # never duplicated


def test_created_pods_use_the_current_template() -> None:
    job = make_job(parallelism=1, completions=1, node_selector={"pool": "a"})
    (create,) = creates(REC.decide(make_state(job), key(job), T0).intents)  # type: ignore[union-attr]
    assert create.body["spec"]["nodeSelector"] == {"pool": "a"}
    assert create.body["spec"]["restartPolicy"] == "Never"


@pytest.mark.parametrize(
    ("job_name", "index", "prefix"),
    [
        ("job", None, "job-"),
        ("job", 7, "job-7-"),
        ("a" * 63, None, "a" * 58),
        ("a" * 63, 12, "a" * 54 + "-12-"),
    ],
    ids=["short", "short-indexed", "long", "long-indexed-keeps-index"],
)
def test_generated_name_prefix_is_truncated_like_the_api_server(
    job_name: str, index: int | None, prefix: str
) -> None:
    assert name_prefix(job_name, index) == prefix
    assert len(prefix) <= 58


def test_names_skip_those_already_taken() -> None:
    job = make_job(parallelism=1, completions=3)
    first = creates(REC.decide(make_state(job), key(job), T0).intents)[0]  # type: ignore[union-attr]
    old = make_pod(job, first.name, phase="Failed", finalizers=())
    decision = REC.decide(make_state(job, [old]), key(job), T0 + 60 * SECOND)
    assert decision is not None
    (again,) = creates(decision.intents)
    assert again.name != first.name


@pytest.mark.parametrize(
    ("spec", "status", "running", "expected"),
    [
        ({"parallelism": 3, "completions": 5}, {}, 0, 3),
        ({"parallelism": 3, "completions": 5}, {"succeeded": 3}, 0, 2),
        ({"parallelism": 3, "completions": 5}, {}, 1, 2),
        ({"parallelism": 5, "completions": 2}, {}, 0, 2),
        ({"parallelism": 0, "completions": 2}, {}, 0, 0),
        ({}, {}, 0, 1),
        ({"parallelism": 2}, {}, 0, 2),
        ({"parallelism": 2}, {"succeeded": 1}, 1, 0),
        ({"parallelism": 600, "completions": 600}, {}, 0, 500),
    ],
    ids=[
        "parallelism-bound",
        "remaining-completions",
        "minus-active",
        "completions-bound",
        "zero-parallelism",
        "defaults-1-1",
        "work-queue",
        "work-queue-after-success",
        "capped-at-500",
    ],
)
def test_parallelism_completions_arithmetic(
    spec: dict[str, Any], status: dict[str, Any], running: int, expected: int
) -> None:
    job = make_job(status=status, **spec)
    pods = [make_pod(job, f"job-run{i}") for i in range(running)]
    decision = REC.decide(make_state(job, pods), key(job), T0)
    made = creates(decision.intents) if decision else []
    assert len(made) == expected


def test_excess_pods_lose_their_finalizer_first_then_are_deleted() -> None:
    job = make_job(parallelism=2, completions=10)
    pods = [
        make_pod(job, "a", ready=True),
        make_pod(job, "b", ready=True),
        make_pod(job, "c", phase="Pending", node=""),
        make_pod(job, "d", phase="Pending", node="n1"),
    ]
    decision = REC.decide(make_state(job, pods), key(job), T0 + 5 * SECOND)
    assert decision is not None
    assert decision.reason.startswith(
        "DeletePods: removing the tracking finalizer of 2 pod(s) to delete them; "
        "4 active of 2 wanted"
    )
    assert releases(decision.intents) == ["c", "d"]
    assert deletes(decision.intents) == []
    assert creates(decision.intents) == []

    released = [*pods[:2], *(msgspec.structs.replace(p, finalizers=()) for p in pods[2:])]
    decision = REC.decide(make_state(job, released), key(job), T0 + 6 * SECOND)
    assert decision is not None
    assert decision.reason.startswith("DeletePods: deleting 2 released pod(s)")
    assert deletes(decision.intents) == ["c", "d"]
    assert releases(decision.intents) == []
    status = status_patch(decision.intents)
    assert (status["active"], status["terminating"], status["ready"]) == (2, 2, 2)


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"phase": "Pending", "node": ""}, {"phase": "Pending", "node": "n1"}),
        ({"phase": "Pending"}, {"phase": "Running"}),
        ({"ready": False}, {"ready": True}),
        ({"ready": True, "restart_count": 3}, {"ready": True}),
        ({"ready": True, "created": T0 + SECOND}, {"ready": True, "created": T0}),
    ],
    ids=[
        "unscheduled-before-scheduled",
        "pending-before-running",
        "not-ready-before-ready",
        "more-restarts-first",
        "newer-first",
    ],
)
def test_excess_pod_removal_order(first: dict[str, Any], second: dict[str, Any]) -> None:
    job = make_job(parallelism=1, completions=10)
    for names in (("x", "y"), ("y", "x")):  # the name must not decide
        pods = [make_pod(job, names[0], **first), make_pod(job, names[1], **second)]
        decision = REC.decide(make_state(job, pods), key(job), T0 + 5 * SECOND)
        assert decision is not None
        assert releases(decision.intents) == [names[0]]


def test_indexed_duplicates_and_out_of_range_pods_go_before_anything_else() -> None:
    job = make_job(parallelism=3, completions=3, completion_mode="Indexed")
    pods = [
        make_pod(job, "i0-ready", index=0, ready=True),
        make_pod(job, "i0-pending", index=0, phase="Pending"),
        make_pod(job, "i1", index=1, ready=True),
        make_pod(job, "i7", index=7, ready=True),
        make_pod(job, "no-index", ready=True),
    ]
    decision = REC.decide(make_state(job, pods), key(job), T0)
    assert decision is not None
    assert releases(decision.intents) == ["i0-pending", "i7", "no-index"]
    assert creates(decision.intents) == []  # index 2 is created once they are gone


def test_indexed_creates_lowest_missing_indexes() -> None:
    job = make_job(
        parallelism=2,
        completions=5,
        completion_mode="Indexed",
        status={"completedIndexes": "0,2", "succeeded": 2},
    )
    pods = [make_pod(job, "i1", index=1)]
    decision = REC.decide(make_state(job, pods), key(job), T0)
    assert decision is not None
    assert [
        c.body["metadata"]["annotations"][COMPLETION_INDEX] for c in creates(decision.intents)
    ] == ["3"]


def test_c6_5_work_queue_creates_nothing_after_a_success_and_completes_when_rest_finish() -> None:
    job = make_job(parallelism=3)
    pods = [
        make_pod(job, "a", phase="Succeeded", finished=T0),
        make_pod(job, "b", phase="Failed", finished=T0),
        make_pod(job, "c"),
    ]
    decision = REC.decide(make_state(job, pods), key(job), T0 + 60 * SECOND)
    assert decision is not None
    assert creates(decision.intents) == []
    status = status_patch(decision.intents)
    assert status["uncountedTerminatedPods"] == {"succeeded": ["uid-a"], "failed": ["uid-b"]}
    assert "conditions" not in status  # c still runs

    done = make_pod(job, "c", phase="Succeeded", finished=T0 + SECOND)
    decision = REC.decide(make_state(job, [*pods[:2], done]), key(job), T0 + 60 * SECOND)
    assert decision is not None
    (met,) = status_patch(decision.intents)["conditions"]
    assert (met["type"], met["reason"]) == ("SuccessCriteriaMet", "CompletionsReached")


@pytest.mark.parametrize(
    "managed_by",
    [None, "kubernetes.io/job-controller", "example.com/custom-job-controller"],
    ids=["absent", "builtin", "other-controller"],
)
def test_c3_1_c3_2_jobs_managed_by_others_are_left_alone(managed_by: str | None) -> None:
    job = make_job(parallelism=2, completions=2, managed_by=managed_by)
    pods = [make_pod(job, "a", phase="Failed", finalizers=("batch.kubernetes.io/job-tracking",))]
    for suspend in (False, True):
        state = make_state(job, pods)
        assert REC.decide(state, key(job), T0) is None
        assert (
            JobReconciler(managed_by="kbatchd.dev/job-controller").decide(state, key(job), T0)
            is None
        )
        job = make_job(parallelism=2, completions=2, managed_by=managed_by, suspend=suspend)


def test_a_custom_manager_name_is_honoured() -> None:
    job = make_job(managed_by="example.com/custom-job-controller")
    rec = JobReconciler(managed_by="example.com/custom-job-controller")
    decision = rec.decide(make_state(job), key(job), T0)
    assert decision is not None
    assert len(creates(decision.intents)) == 1


@pytest.mark.parametrize(
    ("labels", "dispatching", "runs"),
    [
        ({"kbatchd.dev/multicluster": "true"}, True, False),
        ({"kbatchd.dev/multicluster": "false"}, True, True),
        ({}, True, True),
        # The manager is another cluster: here is a worker, where copies run.
        ({"kbatchd.dev/multicluster": "true"}, False, True),
    ],
    ids=["dispatched", "label-false", "no-label", "worker"],
)
def test_a_job_the_dispatcher_handles_on_the_manager_runs_no_pod_there(
    labels: dict[str, str], dispatching: bool, runs: bool
) -> None:
    job = msgspec.structs.replace(make_job(), labels=labels)
    manager = key(job).split("/")[1] if dispatching else "elsewhere"
    rec = JobReconciler(dispatch_cluster=manager, dispatch_label="kbatchd.dev/multicluster")
    decision = rec.decide(make_state(job), key(job), T0)
    assert (decision is not None and bool(creates(decision.intents))) is runs


def test_decisions_are_deterministic() -> None:
    job = make_job(
        parallelism=4, completions=8, completion_mode="Indexed", backoff_limit_per_index=2
    )
    pods = [
        make_pod(job, "i0", index=0, phase="Failed", finished=T0, failure_count=0),
        make_pod(job, "i1", index=1, phase="Succeeded", finished=T0),
        make_pod(job, "i2", index=2, ready=True),
    ]
    state = make_state(job, pods)
    first = REC.decide(state, key(job), T0 + 60 * SECOND)
    second = REC.decide(state, key(job), T0 + 60 * SECOND)
    assert first is not None
    assert first == second
    assert msgspec.json.encode(first) == msgspec.json.encode(second)
    assert state == make_state(job, pods)  # nothing in the state was mutated


def test_intents_are_ordered_status_releases_deletes_creates() -> None:
    job = make_job(
        parallelism=2, completions=5, status={"uncountedTerminatedPods": {"failed": ["uid-f"]}}
    )
    pods = [make_pod(job, "f", phase="Failed", finished=T0)]
    decision = REC.decide(make_state(job, pods), key(job), T0 + 60 * SECOND)
    assert decision is not None
    kinds = [
        "status" if isinstance(i, Patch) and i.kind == "Job" else type(i).__name__
        for i in decision.intents
    ]
    assert kinds == ["status", "Patch", "Create", "Create"]
    assert releases(decision.intents) == ["f"]
    (release,) = [i for i in decision.intents if isinstance(i, Patch) and i.kind == "Pod"]
    assert release.patch_type == "strategic"
    assert release.patch == {
        "metadata": {"uid": "uid-f", "$deleteFromPrimitiveList/finalizers": [FIN]}
    }
    status = decision.intents[0]
    assert isinstance(status, Patch)
    assert (status.subresource, status.patch_type, status.precondition_rv) == (
        "status",
        "merge",
        job.rv,
    )
    assert not any(isinstance(i, Delete) for i in decision.intents)


def test_the_reconciler_follows_the_protocol() -> None:
    reconciler: Reconciler = REC
    assert reconciler.name == "job"
    assert reconciler.kinds == frozenset({"Job", "Pod"})
    assert REC.decide(make_state(None), "Pod/c1/ns/job", T0) is None


def test_first_pods_of_a_per_index_job_start_their_failure_count_at_zero() -> None:
    for create in decide_creates(
        parallelism=2, completions=2, completion_mode="Indexed", backoff_limit_per_index=1
    ):
        assert create.body["metadata"]["annotations"][INDEX_FAILURE_COUNT] == "0"


def test_pods_released_for_deletion_are_deleted_even_when_no_longer_in_excess() -> None:
    job = make_job(parallelism=2, completions=10)
    pods = [make_pod(job, "kept", ready=True), make_pod(job, "released", finalizers=())]
    decision = REC.decide(make_state(job, pods), key(job), T0)
    assert decision is not None
    assert deletes(decision.intents) == ["released"]
    assert creates(decision.intents) == []  # deletion wins; the replacement comes next


def test_a_job_that_does_not_decode_is_reported_not_acted_on() -> None:
    job = make_job()
    broken = msgspec.structs.replace(job, spec={**job.spec, "parallelism": "two"})
    decision = REC.decide(make_state(broken), key(job), T0)
    assert decision is not None
    assert decision.intents == ()
    assert decision.reason.startswith("InvalidJob: ns/job: Expected `int | null`, got `str`")
    assert "$.parallelism" in decision.reason


def test_no_more_than_500_pods_are_recorded_per_decision() -> None:
    job = make_job(parallelism=1, completions=1000, status={"startTime": "2026-01-01T00:00:00Z"})
    pods = [make_pod(job, f"p{i:04}", phase="Succeeded", finished=T0) for i in range(600)]
    decision = REC.decide(make_state(job, pods), key(job), T0 + SECOND)
    assert decision is not None
    status = status_patch(decision.intents)
    assert len(status["uncountedTerminatedPods"]["succeeded"]) == 500
