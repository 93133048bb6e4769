"""Child Jobs of a JobSet (spec B0): names, labels, annotations, owner reference and managedBy;
per-replicatedJob counters; the success policy; what a finished JobSet does."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from daemon.controllers.jobset.reconciler import JobSetReconciler
from events.intents import Create, Delete
from events.objects import Service
from tests.daemon.controllers.builders import NS, T0
from tests.daemon.controllers.jobset_builders import (
    COMPLETE,
    READY,
    RUNNING,
    child,
    conditions,
    counters,
    created_jobs,
    decide,
    deleted_jobs,
    failed,
    js_status,
    make_jobset,
    rjob,
    state_of,
)


def test_b0_child_jobs_have_upstream_names_labels_owner_and_kbatchd_manager() -> None:
    js = make_jobset(
        "train",
        [rjob("driver", 1, group="ctl"), rjob("workers", 3, parallelism=2, completions=2)],
        coordinator={"replicatedJob": "workers", "jobIndex": 0, "podIndex": 0},
    )
    decision = decide(state_of(js), "train")
    assert decision is not None
    assert created_jobs(decision) == [
        "train-driver-0",
        "train-workers-0",
        "train-workers-1",
        "train-workers-2",
    ]
    body = next(
        i.body for i in decision.intents if isinstance(i, Create) and i.name == "train-workers-1"
    )
    meta = body["metadata"]
    wanted = {
        "jobset.sigs.k8s.io/jobset-name": "train",
        "jobset.sigs.k8s.io/jobset-uid": js.uid,
        "jobset.sigs.k8s.io/replicatedjob-name": "workers",
        "jobset.sigs.k8s.io/restart-attempt": "0",
        "jobset.sigs.k8s.io/job-restart-attempt": "0",
        "jobset.sigs.k8s.io/replicatedjob-replicas": "3",
        "jobset.sigs.k8s.io/global-replicas": "4",
        "jobset.sigs.k8s.io/job-index": "1",
        "jobset.sigs.k8s.io/job-key": hashlib.sha1(f"{NS}/train-workers-1".encode()).hexdigest(),
        "jobset.sigs.k8s.io/job-global-index": "2",
        "jobset.sigs.k8s.io/group-name": "default",
        "jobset.sigs.k8s.io/group-replicas": "3",
        "jobset.sigs.k8s.io/job-group-index": "1",
        "jobset.sigs.k8s.io/coordinator": "train-workers-0-0.train",
    }
    template_meta = body["spec"]["template"]["metadata"]
    for where in (meta["labels"], meta["annotations"], template_meta["labels"]):
        assert {k: where.get(k) for k in wanted} == wanted
    assert template_meta["annotations"]["jobset.sigs.k8s.io/job-index"] == "1"
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "name": "train",
            "uid": js.uid,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert body["spec"]["managedBy"] == "kbatchd.dev/job-controller"
    assert body["spec"]["suspend"] is False
    assert body["spec"]["completionMode"] == "Indexed"
    assert body["spec"]["template"]["spec"]["subdomain"] == "train"
    assert decision.reason.startswith("CreateJobs: creating 4 Job(s)")


def test_c11_3_coordinator_label_and_annotation_on_every_job_and_pod() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 2), rjob("b", 1, parallelism=3, completions=3)],
        coordinator={"replicatedJob": "b", "jobIndex": 0, "podIndex": 2},
        network={"subdomain": "net"},
    )
    decision = decide(state_of(js))
    assert decision is not None
    bodies = [i.body for i in decision.intents if isinstance(i, Create) and i.kind == "Job"]
    assert len(bodies) == 3
    for body in bodies:
        for meta in (body["metadata"], body["spec"]["template"]["metadata"]):
            assert meta["labels"]["jobset.sigs.k8s.io/coordinator"] == "js-b-0-2.net"
            assert meta["annotations"]["jobset.sigs.k8s.io/coordinator"] == "js-b-0-2.net"


def test_b6_exclusive_placement_annotations_and_node_selector_strategy() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 1)],
        annotations={
            "alpha.jobset.sigs.k8s.io/exclusive-topology": "rack",
            "alpha.jobset.sigs.k8s.io/node-selector": "true",
        },
    )
    decision = decide(state_of(js))
    assert decision is not None
    (body,) = [i.body for i in decision.intents if isinstance(i, Create) and i.kind == "Job"]
    notes = body["metadata"]["annotations"]
    assert notes["alpha.jobset.sigs.k8s.io/exclusive-topology"] == "rack"
    assert "alpha.jobset.sigs.k8s.io/exclusive-topology" not in body["metadata"]["labels"]
    pod = body["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"alpha.jobset.sigs.k8s.io/namespaced-job": f"{NS}_js-a-0"}
    assert pod["tolerations"] == [
        {
            "key": "alpha.jobset.sigs.k8s.io/no-schedule",
            "operator": "Exists",
            "effect": "NoSchedule",
        }
    ]


def _services(decision: Any) -> list[Create]:
    return [i for i in decision.intents if isinstance(i, Create) and i.kind == "Service"]


def test_b0_headless_service_named_after_the_jobset() -> None:
    js = make_jobset("train", [rjob("w", 2)])
    decision = decide(state_of(js), "train")
    assert decision is not None
    (service,) = _services(decision)
    assert (service.namespace, service.name) == (NS, "train")
    assert service.body == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "train",
            "namespace": NS,
            "ownerReferences": [
                {
                    "apiVersion": "jobset.x-k8s.io/v1alpha2",
                    "kind": "JobSet",
                    "name": "train",
                    "uid": js.uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "clusterIP": "None",
            "selector": {"jobset.sigs.k8s.io/jobset-name": "train"},
            "publishNotReadyAddresses": True,
        },
    }
    assert "creating headless Service train" in decision.reason


@pytest.mark.parametrize(
    ("network", "name", "publish"),
    [
        pytest.param({"subdomain": "net"}, "net", True, id="subdomain"),
        pytest.param({"publishNotReadyAddresses": False}, "js", False, id="ready-only"),
        pytest.param({"enableDNSHostnames": False}, None, None, id="no-dns"),
    ],
)
def test_b0_headless_service_follows_the_network(
    network: dict[str, Any], name: str | None, publish: bool | None
) -> None:
    decision = decide(state_of(make_jobset("js", [rjob("w")], network=network)))
    assert decision is not None
    services = _services(decision)
    if name is None:
        assert services == []
        return
    (service,) = services
    assert service.name == name
    assert service.body["spec"]["publishNotReadyAddresses"] is publish


def test_b0_an_existing_service_is_left_alone() -> None:
    js = make_jobset("js", [rjob("w")])
    other = Service(name="js", namespace=NS, uid="uid-svc", rv="1")
    decision = decide(state_of(js, other))
    assert decision is not None
    assert _services(decision) == []


def test_b0_the_manager_selects_the_jobset() -> None:
    js = make_jobset("js", managed_by="example.com/other")
    assert decide(state_of(js)) is None
    upstream = make_jobset("js", managed_by=None)
    assert decide(state_of(upstream)) is None
    mine = JobSetReconciler(managed_by="example.com/other")
    assert mine.decide(state_of(js), "JobSet/c1/ns/js", T0) is not None


def test_b0_a_jobset_being_deleted_is_left_to_the_garbage_collector() -> None:
    js = make_jobset("js")
    deleting = make_jobset("js")
    from msgspec.structs import replace

    assert decide(state_of(replace(deleting, deletion_ts=T0))) is None
    assert decide(state_of(js)) is not None


def test_b0_existing_jobs_are_not_created_again_and_foreign_ones_block() -> None:
    js = make_jobset("js", [rjob("a", 2)])
    mine = child(js, "a", 0)
    foreign = child(js, "a", 1, owner_uid="someone-else")
    decision = decide(state_of(js, mine, foreign))
    assert decision is not None
    assert created_jobs(decision) == []
    assert "held by objects this JobSet does not control: js-a-1" in decision.reason
    assert counters(js_status(decision))["a"] == (0, 0, 0, 1, 0)


STATUSES: list[tuple[str, dict[str, Any], tuple[int, int, int, int, int]]] = [
    ("running", RUNNING, (0, 0, 0, 1, 0)),
    ("ready", {"active": 2, "ready": 2}, (1, 0, 0, 1, 0)),
    ("half-ready", READY, (0, 0, 0, 1, 0)),
    ("complete", COMPLETE, (0, 1, 0, 0, 0)),
    ("failed", failed(), (0, 0, 1, 0, 0)),
    ("suspended", {"active": 0}, (0, 0, 0, 0, 1)),
    ("partly-succeeded-rest-ready", {"active": 1, "ready": 1, "succeeded": 1}, (1, 0, 0, 1, 0)),
]


@pytest.mark.parametrize(("state", "status", "want"), STATUSES, ids=[s[0] for s in STATUSES])
def test_b0_replicated_job_counters(
    state: str, status: dict[str, Any], want: tuple[int, int, int, int, int]
) -> None:
    js = make_jobset(
        "js",
        [rjob("a", 1, parallelism=2, completions=2, backoffLimit=0)],
        failurePolicy={"maxRestarts": 0},
    )
    job = child(js, "a", 0, status, suspend=state == "suspended")
    decision = decide(state_of(js, job))
    assert counters(js_status(decision))["a"] == want


SUCCESS: list[tuple[str, dict[str, Any], list[str], bool]] = [
    ("all-default-needs-every-job", {"operator": "All"}, ["a-0"], False),
    ("all-default-all-done", {"operator": "All"}, ["a-0", "a-1", "b-0"], True),
    ("all-targeting-b", {"operator": "All", "targetReplicatedJobs": ["b"]}, ["b-0"], True),
    ("all-targeting-a-partial", {"operator": "All", "targetReplicatedJobs": ["a"]}, ["a-1"], False),
    ("any-one", {"operator": "Any"}, ["a-1"], True),
    (
        "any-targeting-b-but-a-done",
        {"operator": "Any", "targetReplicatedJobs": ["b"]},
        ["a-0"],
        False,
    ),
]


@pytest.mark.parametrize(
    ("case", "policy", "done", "complete"), SUCCESS, ids=[s[0] for s in SUCCESS]
)
def test_b0_success_policy(
    case: str, policy: dict[str, Any], done: list[str], complete: bool
) -> None:
    js = make_jobset("js", [rjob("a", 2), rjob("b", 1)], successPolicy=policy)
    jobs = [
        child(js, name, index, COMPLETE if f"{name}-{index}" in done else RUNNING)
        for name, index in (("a", 0), ("a", 1), ("b", 0))
    ]
    decision = decide(state_of(js, *jobs))
    patch = js_status(decision)
    if complete:
        assert conditions(patch)["Completed"] == ("True", "AllJobsCompleted")
        assert patch["terminalState"] == "Completed"
        assert decision is not None
        assert decision.reason.startswith("Completed:")
    else:
        assert "Completed" not in conditions(patch)
        assert "terminalState" not in patch


def test_b0_a_finished_jobset_deletes_its_remaining_active_jobs_in_the_foreground() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 2)],
        successPolicy={"operator": "Any"},
        status={"terminalState": "Completed", "conditions": [_true("Completed")]},
    )
    running = child(js, "a", 1, RUNNING)
    decision = decide(state_of(js, child(js, "a", 0, COMPLETE), running))
    assert deleted_jobs(decision) == ["js-a-1"]
    (delete,) = [i for i in decision.intents if isinstance(i, Delete)] if decision else []
    assert delete.propagation == "Foreground"
    assert delete.precondition_uid == running.uid
    assert created_jobs(decision) == []


def test_b0_ttl_after_finished_deletes_the_jobset_when_due() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 1)],
        ttlSecondsAfterFinished=60,
        status={"terminalState": "Completed", "conditions": [_true("Completed")]},
    )
    state = state_of(js, child(js, "a", 0, COMPLETE))
    waiting = decide(state)
    assert waiting is not None
    assert not [i for i in waiting.intents if isinstance(i, Delete)]
    assert waiting.requeue_at == T0 + 60_000
    state.now = T0 + 60_000
    due = decide(state)
    assert due is not None
    (delete,) = [i for i in due.intents if isinstance(i, Delete)]
    assert isinstance(delete, Delete)
    assert (delete.kind, delete.name) == ("JobSet", "js")


def _true(type_: str) -> dict[str, Any]:
    return {
        "type": type_,
        "status": "True",
        "reason": "x",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
