"""The JobSet webhook of the simulated API server (spec C7.6, C9.5, C10.7 and the B3 rule
checks): what it refuses with a 422 naming the field, and the same rules as the reconciler's
refusal of a JobSet that reached a cluster without the webhook."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.controllers.jobset.validation import validate_raw
from daemon.sim.errors import ApiError
from daemon.sim.registry import Registry
from daemon.sim.resources import JOBSETS, NAMESPACES, lookup
from daemon.sim.store import Store
from tests.daemon.controllers.jobset_builders import (
    conditions,
    decide,
    jobset_json,
    js_status,
    make_jobset,
    rjob,
    state_of,
)


def registry() -> Registry:
    reg = Registry(Store(seed=1))
    reg.create(NAMESPACES, "", {"metadata": {"name": "ns"}})
    return reg


def raw(rjs: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    """A JobSet as a client sends it (the server defaults it)."""
    return {
        "metadata": {"name": "js", "namespace": "ns"},
        "spec": {"managedBy": "kbatchd.dev/jobset-controller", "replicatedJobs": rjs, **spec},
    }


def test_c7_6_the_server_refuses_a_self_dependency_with_a_422_naming_the_field() -> None:
    with pytest.raises(ApiError) as refused:
        registry().create(JOBSETS, "ns", raw([rjob("a"), rjob("b", depends_on=[("b", "Ready")])]))
    assert refused.value.code == 422
    assert refused.value.message == (
        'JobSet.jobset.x-k8s.io "js" is invalid: spec.replicatedJobs[1].dependsOn[0].name: '
        "Invalid value: replicatedJob: b cannot depend on itself"
    )


def test_b0_a_valid_jobset_is_stored_defaulted() -> None:
    stored = registry().create(
        JOBSETS, "ns", raw([rjob("a"), rjob("b", depends_on=[("a", "Complete")])])
    )
    spec = stored.obj["spec"]
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["replicatedJobs"][1]["template"]["spec"]["completionMode"] == "Indexed"


def test_c9_5_the_server_refuses_a_delete_policy_over_an_existing_claim() -> None:
    reg = registry()
    pvcs = lookup("", "v1", "persistentvolumeclaims")
    assert pvcs is not None
    reg.create(
        pvcs, "ns", {"metadata": {"name": "data-js"}, "spec": {"accessModes": ["ReadWriteOnce"]}}
    )
    entry = rjob(
        "a",
        containers=[
            {"name": "main", "image": "x", "volumeMounts": [{"name": "data", "mountPath": "/d"}]}
        ],
    )
    policy = {
        "templates": [{"metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"]}}]
    }
    with pytest.raises(ApiError) as refused:
        reg.create(JOBSETS, "ns", raw([entry], volumeClaimPolicies=[policy]))
    assert refused.value.code == 422
    assert "retention policy must be Retain for existing PVC data-js" in refused.value.message
    retained = {**policy, "retentionPolicy": {"whenDeleted": "Retain"}}
    reg.create(JOBSETS, "ns", raw([entry], volumeClaimPolicies=[retained]))


RULES: list[tuple[str, dict[str, Any], str]] = [
    ("bad-rule-name", {"rules": [{"name": "1st", "action": "FailJobSet"}]}, "rules[0].name"),
    (
        "duplicate-rule-name",
        {"rules": [{"name": "r", "action": "FailJobSet"}, {"name": "r", "action": "FailJobSet"}]},
        "rules[1].name",
    ),
    ("unknown-action", {"rules": [{"name": "r", "action": "Explode"}]}, "rules[0].action"),
    (
        "unknown-target",
        {"rules": [{"name": "r", "action": "FailJobSet", "targetReplicatedJobs": ["zz"]}]},
        "rules[0].targetReplicatedJobs",
    ),
    (
        "unknown-reason",
        {"rules": [{"name": "r", "action": "FailJobSet", "onJobFailureReasons": ["Oops"]}]},
        "rules[0].onJobFailureReasons",
    ),
    ("unknown-strategy", {"restartStrategy": "Sometimes"}, "failurePolicy.restartStrategy"),
]


@pytest.mark.parametrize(("case", "policy", "field"), RULES, ids=[r[0] for r in RULES])
def test_b3_failure_policy_rules_are_validated(
    case: str, policy: dict[str, Any], field: str
) -> None:
    body = jobset_json("js", [rjob("a")], failurePolicy={"maxRestarts": 1, **policy})
    problems = validate_raw("js", body["spec"])
    assert any(field in path for path, _ in problems), problems


def test_b3_restart_job_allows_at_most_1024_replicas() -> None:
    body = jobset_json(
        "js",
        [rjob("a", 1025)],
        failurePolicy={"maxRestarts": 1, "rules": [{"name": "r", "action": "RestartJob"}]},
    )
    problems = validate_raw("js", body["spec"])
    assert any("at most 1024" in text for _, text in problems), problems


def test_b0_generated_names_must_fit_in_63_characters() -> None:
    body = jobset_json("j" * 40, [rjob("r" * 20, 10)])
    problems = validate_raw("j" * 40, body["spec"])
    assert any("longer than 63 characters" in text for _, text in problems), problems


def test_c11_3_coordinator_must_name_an_existing_indexed_replicated_job() -> None:
    body = jobset_json("js", [rjob("a", 2)], coordinator={"replicatedJob": "a", "jobIndex": 2})
    problems = validate_raw("js", body["spec"])
    assert ("spec.coordinator.jobIndex", "must be a valid job index") in problems
    missing = jobset_json("js", [rjob("a")], coordinator={"replicatedJob": "zz"})
    assert validate_raw("js", missing["spec"])[0][0] == "spec.coordinator.replicatedJob"


def test_the_reconciler_refuses_what_the_webhook_would_have() -> None:
    js = make_jobset(
        "js",
        [rjob("a", 2)],
        failurePolicy={"maxRestarts": 1, "restartStrategy": "InPlaceRestart"},
    )
    decision = decide(state_of(js))
    assert decision is not None
    assert decision.reason.startswith("InvalidJobSet: ns/js: spec.replicatedJobs[0].template.spec")
    assert conditions(js_status(decision))["Failed"] == ("True", "InvalidJobSet")
