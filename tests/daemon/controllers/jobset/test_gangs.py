"""A JobSet's gang (`jobset.gangs`): the Workload, the CompositePodGroup and one PodGroup per
child Job, made one step at a time in the versions the cluster serves; per-Job PodGroups where
CompositePodGroup is not served; fresh groups per attempt."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from daemon.controllers.base import Decision
from events.intents import Create, Delete
from events.objects import decode_object_dict
from events.state import State
from tests.daemon.controllers.builders import CLUSTER, NS, observe
from tests.daemon.controllers.jobset_builders import (
    JS_UID,
    created_jobs,
    decide,
    make_jobset,
    rjob,
    state_of,
)

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
GANG = {
    "kbatchd.dev/gang": "composite",
    "kbatchd.dev/gang-topology": BLOCK,
    "kbatchd.dev/gang-job-topology": RACK,
}


def gang_state(version: str, composite: bool, annotations: dict[str, str] | None = None) -> State:
    jobset = make_jobset(
        "js",
        [rjob("leader", 1), rjob("workers", 2, parallelism=2, completions=2)],
        annotations=GANG if annotations is None else annotations,
    )
    state = state_of(jobset)
    group = f"scheduling.k8s.io/{version}"
    state.served = {f"{CLUSTER}/Workload": group, f"{CLUSTER}/PodGroup": group}
    if composite:
        state.served[f"{CLUSTER}/CompositePodGroup"] = "scheduling.k8s.io/v1alpha3"
    return state


def creates(decision: Decision | None, kind: str) -> dict[str, dict[str, Any]]:
    assert decision is not None
    return {i.name: i.body for i in decision.intents if isinstance(i, Create) and i.kind == kind}


def carry_out(state: State, decision: Decision | None) -> None:
    """The creates of a decision, stored as the API server would (with a uid)."""
    assert decision is not None
    for intent in decision.intents:
        if isinstance(intent, Create) and intent.kind != "Job":
            body = copy.deepcopy(intent.body)
            body["metadata"].update(name=intent.name, namespace=NS, uid=f"uid-{intent.name}")
            observe(state, decode_object_dict(intent.kind, body))


def test_a_composite_gang_is_made_workload_then_composite_then_groups_with_the_jobs() -> None:
    state = gang_state("v1beta1", composite=True)
    first = decide(state)
    assert list(creates(first, "Workload")) == ["js"]
    assert not created_jobs(first), "the Jobs wait for their groups"
    spec = creates(first, "Workload")["js"]["spec"]
    assert spec["controllerRef"] == {"apiGroup": "jobset.x-k8s.io", "kind": "JobSet", "name": "js"}
    assert "podGroupTemplates" not in spec
    [root] = spec["compositePodGroupTemplates"]
    assert root["name"] == "jobset"
    assert root["schedulingPolicy"] == {"gang": {"minGroupCount": 3}}
    assert root["schedulingConstraints"] == {"topology": [{"key": BLOCK}]}
    assert root["disruptionMode"] == {"all": {}}
    assert [(t["name"], t["schedulingPolicy"]) for t in root["podGroupTemplates"]] == [
        ("leader", {"gang": {"minCount": 1}}),
        ("workers", {"gang": {"minCount": 2}}),
    ]
    assert creates(first, "Workload")["js"]["metadata"]["annotations"] == {
        "kbatchd.dev/leader-template": "leader"
    }
    carry_out(state, first)

    second = decide(state)
    cpg = creates(second, "CompositePodGroup")["js-a0"]
    assert cpg["apiVersion"] == "scheduling.k8s.io/v1alpha3"
    assert cpg["spec"]["workloadRef"] == {"workloadName": "js", "templateName": "jobset"}
    assert [
        (o["kind"], o.get("controller", False)) for o in cpg["metadata"]["ownerReferences"]
    ] == [
        ("JobSet", True),
        ("Workload", False),
    ]
    assert not created_jobs(second)
    carry_out(state, second)

    third = decide(state)
    groups = creates(third, "PodGroup")
    assert sorted(groups) == ["js-leader-0-a0", "js-workers-0-a0", "js-workers-1-a0"]
    worker = groups["js-workers-1-a0"]["spec"]
    assert worker["parentCompositePodGroupName"] == "js-a0"
    assert worker["workloadRef"] == {"workloadName": "js", "templateName": "workers"}
    assert worker["schedulingConstraints"] == {"topology": [{"key": RACK}]}
    jobs = creates(third, "Job")
    assert sorted(jobs) == ["js-leader-0", "js-workers-0", "js-workers-1"]
    pod_spec = jobs["js-workers-1"]["spec"]["template"]["spec"]
    assert pod_spec["schedulingGroup"] == {"podGroupName": "js-workers-1-a0"}
    kinds = [i.kind for i in third.intents if isinstance(i, Create)]  # type: ignore[union-attr]
    assert kinds.index("Job") > max(i for i, k in enumerate(kinds) if k == "PodGroup")
    assert third is not None
    assert "under CompositePodGroup js-a0" in third.reason


def test_without_composite_each_job_gets_its_own_gang_and_the_log_says_so() -> None:
    state = gang_state("v1alpha2", composite=False)
    first = decide(state)
    spec = creates(first, "Workload")["js"]["spec"]
    assert "compositePodGroupTemplates" not in spec
    assert [t["name"] for t in spec["podGroupTemplates"]] == ["leader", "workers"]
    carry_out(state, first)
    second = decide(state)
    groups = creates(second, "PodGroup")
    assert sorted(groups) == ["js-leader-0-a0", "js-workers-0-a0", "js-workers-1-a0"]
    ref = groups["js-leader-0-a0"]["spec"]["podGroupTemplateRef"]
    assert ref == {"workload": {"workloadName": "js", "podGroupTemplateName": "leader"}}
    assert "parentCompositePodGroupName" not in groups["js-leader-0-a0"]["spec"]
    assert second is not None
    assert "CompositeUnavailable: the cluster serves no CompositePodGroup" in second.reason
    carry_out(state, second)
    for name in groups:
        assert f"{CLUSTER}/{NS}/{name}" in state.podgroups
    assert not creates(decide(state), "PodGroup"), "made once"


def test_a_restart_makes_fresh_groups_and_deletes_the_previous_attempts() -> None:
    state = gang_state("v1beta1", composite=True)
    for _ in range(3):
        carry_out(state, decide(state))
    jobset = state.jobsets[f"{CLUSTER}/{NS}/js"]
    restarted = make_jobset(
        "js",
        [rjob("leader", 1), rjob("workers", 2, parallelism=2, completions=2)],
        annotations=GANG,
        status={"restarts": 1},
        rv="2",
    )
    assert restarted.uid == jobset.uid == JS_UID
    observe(state, restarted, "MODIFIED")
    decision = decide(state)
    assert decision is not None
    deleted = sorted((i.kind, i.name) for i in decision.intents if isinstance(i, Delete))
    assert ("CompositePodGroup", "js-a0") in deleted
    assert ("PodGroup", "js-workers-0-a0") in deleted
    assert list(creates(decision, "CompositePodGroup")) == ["js-a1"]


@pytest.mark.parametrize(
    ("annotations", "error"),
    [
        ({"kbatchd.dev/gang": "yes"}, "kbatchd.dev/gang]: expected 'composite', got 'yes'"),
        (
            {"kbatchd.dev/gang": "composite", "kbatchd.dev/leader-template": "boss"},
            "'boss' names no replicatedJob (have leader, workers)",
        ),
        (
            {"kbatchd.dev/gang": "composite", "kbatchd.dev/gang-topology": "a b"},
            "kbatchd.dev/gang-topology]: expected a node label key, got 'a b'",
        ),
    ],
)
def test_a_bad_gang_annotation_is_named(annotations: dict[str, str], error: str) -> None:
    decision = decide(gang_state("v1beta1", composite=True, annotations=annotations))
    assert decision is not None
    assert decision.reason.startswith("InvalidJobSet: ")
    assert error in decision.reason


def test_a_jobset_without_the_annotation_gets_no_gang() -> None:
    decision = decide(gang_state("v1beta1", composite=True, annotations={}))
    assert not creates(decision, "Workload")
    assert (
        "schedulingGroup" not in creates(decision, "Job")["js-leader-0"]["spec"]["template"]["spec"]
    )
