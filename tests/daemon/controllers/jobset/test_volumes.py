"""Spec C9: volume claim policies — one claim per template per JobSet, Delete and Retain, the
volumes of the Jobs that mount them, the webhook's rules — and kbatchd's scratch claims."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.controllers.jobset.validation import validate_raw
from daemon.sim import jobset_validation
from daemon.sim.registry import Registry
from daemon.sim.resources import lookup
from daemon.sim.store import Store
from events.intents import Create
from tests.daemon.controllers.jobset_builders import (
    COMPLETE,
    child,
    created_jobs,
    decide,
    jobset_json,
    make_jobset,
    pvc,
    rjob,
    state_of,
)
from tests.daemon.controllers.world import JobSetWorld

SPEC: dict[str, Any] = {
    "accessModes": ["ReadWriteMany"],
    "resources": {"requests": {"storage": "1Gi"}},
}


def mounting(name: str, *volumes: str, init: bool = False) -> dict[str, Any]:
    container = {
        "name": "main",
        "image": "x",
        "volumeMounts": [{"name": v, "mountPath": f"/{v}"} for v in volumes],
    }
    if not init:
        return rjob(name, 1, containers=[container])
    entry = rjob(name, 1)
    entry["template"]["spec"]["template"]["spec"]["initContainers"] = [container]
    return entry


def template(name: str, *, scratch: bool = False, **meta: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, **meta}
    if scratch:
        metadata.setdefault("annotations", {})["kbatchd.dev/scratch"] = "true"
    return {"metadata": metadata, "spec": dict(SPEC)}


def policies(*entries: tuple[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    return [{"templates": tpls, "retentionPolicy": {"whenDeleted": when}} for when, tpls in entries]


def claims(decision: Any) -> dict[str, dict[str, Any]]:
    return {
        i.name: i.body
        for i in decision.intents
        if isinstance(i, Create) and i.kind == "PersistentVolumeClaim"
    }


def test_c9_1_delete_and_retain_claims_and_what_outlives_the_jobset() -> None:
    body = jobset_json(
        "js",
        [mounting("a", "data", "cache")],
        volumeClaimPolicies=policies(
            ("Delete", [template("data", labels={"tier": "fast"})]),
            ("Retain", [template("cache")]),
        ),
    )
    decision = decide(state_of(make_jobset("js", body["spec"]["replicatedJobs"], **_rest(body))))
    made = claims(decision)
    assert sorted(made) == ["cache-js", "data-js"]
    assert made["data-js"]["metadata"]["labels"] == {
        "tier": "fast",
        "jobset.sigs.k8s.io/jobset-name": "js",
    }
    assert made["data-js"]["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    assert "ownerReferences" not in made["cache-js"]["metadata"]
    assert made["cache-js"]["spec"] == SPEC

    world = JobSetWorld()
    js = world.create_jobset(body)
    world.run(lambda: len(world.state.pvcs) == 2 and bool(world.jobs()))
    world.delete(world.jobset(), foreground=True)
    world.run(lambda: "c1/ns/js" not in world.state.jobsets)
    assert sorted(c.name for c in world.state.pvcs.values()) == ["cache-js"]
    assert js.uid

    # A later JobSet of the same name reuses the retained claim.
    world.create_jobset(
        jobset_json(
            "js",
            [mounting("a", "cache")],
            volumeClaimPolicies=policies(("Retain", [template("cache")])),
        )
    )
    retained = world.state.pvcs["c1/ns/cache-js"].uid
    world.run(lambda: bool(world.jobs()))
    assert world.state.pvcs["c1/ns/cache-js"].uid == retained


def _rest(body: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in body["spec"].items() if k not in ("replicatedJobs", "managedBy")}


def test_c9_2_claims_are_created_while_suspended() -> None:
    js = make_jobset(
        "js",
        [mounting("a", "data")],
        suspend=True,
        volumeClaimPolicies=policies(("Delete", [template("data")])),
    )
    assert sorted(claims(decide(state_of(js)))) == ["data-js"]


def test_c9_3_an_existing_claim_is_left_as_it_is() -> None:
    js = make_jobset(
        "js", [mounting("a", "data")], volumeClaimPolicies=policies(("Retain", [template("data")]))
    )
    decision = decide(state_of(js, pvc("data-js")))
    assert claims(decision) == {}
    assert created_jobs(decision) == ["js-a-0"]


def test_c9_4_only_jobs_that_mount_the_claim_get_the_volume() -> None:
    js = make_jobset(
        "js",
        [mounting("a", "data"), rjob("b", 1), mounting("c", "data", init=True)],
        volumeClaimPolicies=policies(("Delete", [template("data")])),
    )
    decision = decide(state_of(js))
    assert decision is not None
    volumes = {
        i.name: i.body["spec"]["template"]["spec"].get("volumes")
        for i in decision.intents
        if isinstance(i, Create) and i.kind == "Job"
    }
    wanted = [{"name": "data", "persistentVolumeClaim": {"claimName": "data-js"}}]
    assert volumes == {"js-a-0": wanted, "js-b-0": None, "js-c-0": wanted}


def test_c9_4_restarts_reuse_the_same_claim() -> None:
    js = make_jobset(
        "js",
        [mounting("a", "data")],
        failurePolicy={"maxRestarts": 3},
        status={"restarts": 1},
        volumeClaimPolicies=policies(("Delete", [template("data")])),
    )
    decision = decide(state_of(js, pvc("data-js", owner=js)))
    assert claims(decision) == {}
    assert created_jobs(decision) == ["js-a-0"]


WEBHOOK: list[tuple[str, list[dict[str, Any]], list[dict[str, Any]], str]] = [
    (
        "duplicate-names",
        [mounting("a", "data")],
        policies(("Delete", [template("data")]), ("Retain", [template("data")])),
        "Duplicate value: 'data'",
    ),
    (
        "uppercase",
        [mounting("a", "Data")],
        policies(("Delete", [template("Data")])),
        "is not a valid RFC 1123 subdomain",
    ),
    (
        "too-long",
        [mounting("a", "d" * 61)],
        policies(("Delete", [template("d" * 61)])),
        "is longer than 63 characters",
    ),
    (
        "no-mount",
        [rjob("a", 1)],
        policies(("Delete", [template("data")])),
        "no container or initContainer mounts a volume named 'data'",
    ),
    (
        "scratch-retained",
        [mounting("a", "tmp")],
        policies(("Retain", [template("tmp", scratch=True)])),
        "a kbatchd.dev/scratch claim is deleted when the JobSet finishes",
    ),
]


@pytest.mark.parametrize(
    ("case", "rjs", "claim_policies", "message"), WEBHOOK, ids=[w[0] for w in WEBHOOK]
)
def test_c9_5_webhook_rejects_bad_claim_policies(
    case: str, rjs: list[dict[str, Any]], claim_policies: list[dict[str, Any]], message: str
) -> None:
    body = jobset_json("js", rjs, volumeClaimPolicies=claim_policies)
    problems = validate_raw("js", body["spec"])
    assert any(message in text for _, text in problems), problems


def test_c9_5_a_pod_volume_of_the_same_name_is_rejected() -> None:
    entry = mounting("a", "data")
    entry["template"]["spec"]["template"]["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    body = jobset_json("js", [entry], volumeClaimPolicies=policies(("Delete", [template("data")])))
    problems = validate_raw("js", body["spec"])
    assert any("already declares a volume named 'data'" in text for _, text in problems)


@pytest.mark.parametrize(
    ("when", "spec", "message"),
    [
        ("Delete", SPEC, "retention policy must be Retain for existing PVC data-js"),
        (
            "Retain",
            {**SPEC, "storageClassName": "other"},
            "must equal the spec of the existing PVC",
        ),
        ("Retain", SPEC, ""),
    ],
)
def test_c9_5_an_existing_claim_needs_retain_and_the_same_spec(
    when: str, spec: dict[str, Any], message: str
) -> None:
    store = Store(seed=1)
    registry = Registry(store)
    pvcs = lookup("", "v1", "persistentvolumeclaims")
    namespaces = lookup("", "v1", "namespaces")
    assert pvcs is not None
    assert namespaces is not None
    registry.create(namespaces, "", {"metadata": {"name": "ns"}})
    registry.create(pvcs, "ns", {"metadata": {"name": "data-js"}, "spec": dict(SPEC)})
    tpl = {"metadata": {"name": "data"}, "spec": spec}
    body = jobset_json("js", [mounting("a", "data")], volumeClaimPolicies=policies((when, [tpl])))
    errors = jobset_validation.existing_claims(store, body)
    if message:
        assert any(message in e.detail for e in errors), errors
    else:
        assert errors == []


def test_c9_scratch_claims_are_deleted_as_soon_as_the_jobset_finishes() -> None:
    world = JobSetWorld()
    world.create_jobset(
        jobset_json(
            "js",
            [mounting("a", "tmp", "data")],
            volumeClaimPolicies=policies(
                ("Delete", [template("tmp", scratch=True), template("data")])
            ),
        )
    )
    world.run(lambda: len(world.live_pods()) == 1 and len(world.state.pvcs) == 2)
    (pod,) = world.live_pods()
    world.finish_pod(pod.name)
    world.run(lambda: world.conditions().get("Completed") == "True")
    world.run()
    assert sorted(c.name for c in world.state.pvcs.values()) == ["data-js"]
    assert "c1/ns/js" in world.state.jobsets  # the JobSet itself is still there


def test_c9_scratch_claims_of_a_finished_jobset_decision() -> None:
    js = make_jobset(
        "js",
        [mounting("a", "tmp")],
        volumeClaimPolicies=policies(("Delete", [template("tmp", scratch=True)])),
        status={
            "terminalState": "Completed",
            "conditions": [
                {"type": "Completed", "status": "True", "reason": "AllJobsCompleted", "message": ""}
            ],
        },
    )
    decision = decide(state_of(js, child(js, "a", 0, COMPLETE), pvc("tmp-js", owner=js)))
    assert decision is not None
    assert [(type(i).__name__, i.kind, i.name) for i in decision.intents if i.kind != "JobSet"] == [
        ("Delete", "PersistentVolumeClaim", "tmp-js")
    ]
    assert "deleting 1 scratch volume claim(s)" in decision.reason
