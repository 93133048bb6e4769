"""Job rules of the real API server through kubernetes-asyncio: defaulting, spec and template
immutability with the suspended-Job relaxations (spec A2/A3), and status validation (A4)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.daemon.sim.helpers import job_body

pytestmark = pytest.mark.anyio

MERGE = "application/merge-patch+json"


def causes(exc: ApiException) -> list[str]:
    body: dict[str, Any] = json.loads(exc.body)
    assert body["reason"] == "Invalid"
    assert body["code"] == 422
    return [c["field"] for c in body["details"]["causes"]]


async def rejected(call: Any) -> list[str]:
    with pytest.raises(ApiException) as err:
        await call
    assert err.value.status == 422, err.value.body
    return causes(err.value)


async def test_job_defaults(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    job = await batch.create_namespaced_job("default", job_body("j"))
    spec = job.spec
    assert (spec.parallelism, spec.completions, spec.backoff_limit) == (1, 1, 6)
    assert spec.completion_mode == "NonIndexed"
    assert spec.suspend is False
    assert spec.pod_replacement_policy == "TerminatingOrFailed"
    assert spec.manual_selector is False
    uid = job.metadata.uid
    assert spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    labels = spec.template.metadata.labels
    assert labels["controller-uid"] == uid
    assert labels["job-name"] == "j"
    assert labels["batch.kubernetes.io/job-name"] == "j"
    assert job.metadata.labels["batch.kubernetes.io/controller-uid"] == uid
    assert spec.template.spec.scheduler_name == "default-scheduler"
    body = job_body(
        "k", parallelism=4, backoffLimitPerIndex=1, completionMode="Indexed", completions=4
    )
    body["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    body["spec"]["podReplacementPolicy"] = "Failed"
    job = await batch.create_namespaced_job("default", body)
    assert job.spec.backoff_limit == 2**31 - 1
    assert job.spec.pod_failure_policy.rules[0].on_pod_conditions[0].status == "True"
    assert job.spec.completions == 4
    assert job.spec.parallelism == 4


async def test_job_create_validation(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    body = job_body("j")
    body["spec"]["template"]["spec"]["restartPolicy"] = "Always"
    assert await rejected(batch.create_namespaced_job("default", body)) == [
        "spec.template.spec.restartPolicy"
    ]
    body = job_body("j", parallelism=-1, managedBy="not a path")
    fields = await rejected(batch.create_namespaced_job("default", body))
    assert set(fields) == {"spec.parallelism", "spec.managedBy"}
    body = job_body("j", podFailurePolicy={"rules": []}, podReplacementPolicy="TerminatingOrFailed")
    assert await rejected(batch.create_namespaced_job("default", body)) == [
        "spec.podReplacementPolicy"
    ]


async def test_template_is_immutable_while_running(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job_body("j", managedBy="kbatchd.dev/job"))
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"rack": "r1"}}}}}
    assert await rejected(
        batch.patch_namespaced_job("j", "default", patch, _content_type=MERGE)
    ) == ["spec.template"]
    for field, value in (
        ("managedBy", "other.dev/x"),
        ("completions", 3),
        ("selector", {"matchLabels": {"a": "b"}}),
    ):
        fields = await rejected(
            batch.patch_namespaced_job(
                "j", "default", {"spec": {field: value}}, _content_type=MERGE
            )
        )
        assert f"spec.{field}" in fields
    # parallelism is mutable
    job = await batch.patch_namespaced_job(
        "j", "default", {"spec": {"parallelism": 5}}, _content_type=MERGE
    )
    assert job.spec.parallelism == 5


DIRECTIVES = {
    "metadata": {"labels": {"placed": "yes"}, "annotations": {"a": "b"}},
    "spec": {
        "nodeSelector": {"cloud.provider.com/topology-rack": "b0-r1"},
        "tolerations": [{"key": "gpu", "operator": "Exists"}],
        "schedulingGates": [{"name": "kbatchd.dev/gate"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "x", "operator": "Exists"}]}
                    ]
                }
            }
        },
    },
}
RESOURCES = {
    "spec": {
        "containers": [
            {
                "name": "main",
                "image": "busybox:1.36",
                "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}},
            }
        ]
    }
}


async def test_suspended_never_started_job_accepts_directives_with_resume(
    api: client.ApiClient,
) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job_body("j", suspend=True))
    # Directives and the resume in one update: validation looks at the stored (suspended) Job.
    job = await batch.patch_namespaced_job(
        "j", "default", {"spec": {"suspend": False, "template": DIRECTIVES}}, _content_type=MERGE
    )
    assert job.spec.suspend is False
    assert job.spec.template.spec.node_selector == {"cloud.provider.com/topology-rack": "b0-r1"}
    assert job.spec.template.metadata.labels["placed"] == "yes"
    # Now it is not suspended: the same kind of change is refused.
    patch = {"spec": {"template": {"spec": {"nodeSelector": {"rack": "other"}}}}}
    assert await rejected(
        batch.patch_namespaced_job("j", "default", patch, _content_type=MERGE)
    ) == ["spec.template"]


async def test_resources_need_suspended_condition_and_no_active_pods(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job_body("j", suspend=True))
    patch = {"spec": {"template": RESOURCES}}
    # Suspended but without the Suspended=True condition: resources are still immutable.
    assert await rejected(
        batch.patch_namespaced_job(
            "j", "default", patch, _content_type="application/strategic-merge-patch+json"
        )
    ) == ["spec.template"]
    now = "2026-01-01T00:00:00Z"
    condition = {
        "type": "Suspended",
        "status": "True",
        "reason": "JobSuspended",
        "message": "Job suspended",
        "lastProbeTime": now,
        "lastTransitionTime": now,
    }
    await batch.patch_namespaced_job_status(
        "j", "default", {"status": {"active": 1, "conditions": [condition]}}, _content_type=MERGE
    )
    # Pods still active: refused.
    assert await rejected(
        batch.patch_namespaced_job(
            "j", "default", patch, _content_type="application/strategic-merge-patch+json"
        )
    ) == ["spec.template"]
    await batch.patch_namespaced_job_status(
        "j", "default", {"status": {"active": 0}}, _content_type=MERGE
    )
    job = await batch.patch_namespaced_job(
        "j",
        "default",
        {"spec": {"suspend": False, "template": RESOURCES}},
        _content_type="application/strategic-merge-patch+json",
    )
    assert job.spec.template.spec.containers[0].resources.requests == {"cpu": "2"}
    # Other container fields stay immutable even then (the Job is resumed now anyway).
    patch = {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "other"}]}}}}
    assert await rejected(
        batch.patch_namespaced_job(
            "j", "default", patch, _content_type="application/strategic-merge-patch+json"
        )
    ) == ["spec.template"]


async def test_started_then_suspended_job_accepts_directives_once_drained(
    api: client.ApiClient,
) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job_body("j"))
    start = "2026-01-01T00:00:00Z"
    await batch.patch_namespaced_job_status(
        "j", "default", {"status": {"startTime": start, "active": 1}}, _content_type=MERGE
    )
    await batch.patch_namespaced_job(
        "j", "default", {"spec": {"suspend": True}}, _content_type=MERGE
    )
    patch = {"spec": {"template": DIRECTIVES}}
    assert await rejected(
        batch.patch_namespaced_job("j", "default", patch, _content_type=MERGE)
    ) == ["spec.template"]
    condition = {
        "type": "Suspended",
        "status": "True",
        "reason": "JobSuspended",
        "message": "Job suspended",
        "lastProbeTime": start,
        "lastTransitionTime": start,
    }
    await batch.patch_namespaced_job_status(
        "j", "default", {"status": {"active": 0, "conditions": [condition]}}, _content_type=MERGE
    )
    job = await batch.patch_namespaced_job("j", "default", patch, _content_type=MERGE)
    assert job.spec.template.spec.scheduling_gates[0].name == "kbatchd.dev/gate"
    # pod affinity (not node affinity) stays immutable
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "affinity": {
                        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": []}
                    }
                }
            }
        }
    }
    assert await rejected(
        batch.patch_namespaced_job("j", "default", patch, _content_type=MERGE)
    ) == ["spec.template"]


def cond(type_: str, status: str = "True") -> dict[str, Any]:
    t = "2026-01-01T00:00:10Z"
    return {
        "type": type_,
        "status": status,
        "reason": "R",
        "message": "m",
        "lastProbeTime": t,
        "lastTransitionTime": t,
    }


START = "2026-01-01T00:00:00Z"
END = "2026-01-01T00:01:00Z"


@pytest.mark.parametrize(
    ("status", "field"),
    [
        ({"active": -1}, "status.active"),
        ({"conditions": [cond("Failed")], "startTime": START}, "status.conditions"),
        ({"conditions": [cond("FailureTarget"), cond("Failed")]}, "status.startTime"),
        (
            {"conditions": [cond("SuccessCriteriaMet"), cond("Complete")], "startTime": START},
            "status.completionTime",
        ),
        (
            {"conditions": [cond("Complete")], "startTime": START, "completionTime": END},
            "status.conditions",
        ),
        ({"completionTime": END, "startTime": START}, "status.completionTime"),
        (
            {
                "conditions": [cond("SuccessCriteriaMet"), cond("Complete")],
                "startTime": END,
                "completionTime": START,
            },
            "status.completionTime",
        ),
        (
            {
                "conditions": [cond("SuccessCriteriaMet"), cond("Complete")],
                "startTime": START,
                "completionTime": END,
                "active": 1,
            },
            "status.active",
        ),
        (
            {
                "conditions": [cond("FailureTarget"), cond("Failed")],
                "startTime": START,
                "terminating": 2,
            },
            "status.terminating",
        ),
        (
            {
                "conditions": [cond("FailureTarget"), cond("Failed")],
                "startTime": START,
                "uncountedTerminatedPods": {"failed": ["u1"]},
            },
            "status.uncountedTerminatedPods",
        ),
        ({"active": 1, "ready": 2}, "status.ready"),
        ({"completedIndexes": "1"}, "status.completedIndexes"),
        ({"failedIndexes": "1"}, "status.failedIndexes"),
        ({"conditions": [cond("SuccessCriteriaMet"), cond("FailureTarget")]}, "status.conditions"),
    ],
)
async def test_status_validation_rejects(
    api: client.ApiClient, status: dict[str, Any], field: str
) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job_body("j"))
    fields = await rejected(
        batch.patch_namespaced_job_status("j", "default", {"status": status}, _content_type=MERGE)
    )
    assert field in fields


async def test_status_lifecycle_accepted_and_monotonic(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job_body("j"))

    async def status(update: dict[str, Any]) -> Any:
        return await batch.patch_namespaced_job_status(
            "j", "default", {"status": update}, _content_type=MERGE
        )

    await status({"startTime": START, "active": 1, "ready": 1, "terminating": 0, "failed": 1})
    assert await rejected(status({"failed": 0})) == ["status.failed"]
    assert await rejected(status({"startTime": END})) == ["status.startTime"]
    await status(
        {"active": 0, "ready": 0, "succeeded": 1, "conditions": [cond("SuccessCriteriaMet")]}
    )
    job = await status(
        {"conditions": [cond("SuccessCriteriaMet"), cond("Complete")], "completionTime": END}
    )
    assert job.status.completion_time is not None
    disabled = await rejected(
        status({"conditions": [cond("SuccessCriteriaMet"), cond("Complete", "False")]})
    )
    assert "status.conditions" in disabled
    assert await rejected(status({"completionTime": "2026-01-01T00:02:00Z"})) == [
        "status.completionTime"
    ]
    assert await rejected(status({"succeeded": 0})) == ["status.succeeded"]
    # An unrelated change on a finished Job is fine.
    await status({"conditions": [cond("SuccessCriteriaMet"), cond("Complete"), cond("Custom")]})


async def test_zero_counters_are_stored_absent_as_the_real_server_stores_them(
    api: client.ApiClient,
) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job_body("j"))
    written = {"startTime": START, "active": 0, "ready": 0, "terminating": 0, "failed": 0}
    job = await batch.patch_namespaced_job_status(
        "j", "default", {"status": {**written, "succeeded": 0}}, _content_type=MERGE
    )
    # int32 omitempty: gone; *int32 (ready, terminating): kept.
    assert (job.status.active, job.status.succeeded, job.status.failed) == (None, None, None)
    assert (job.status.ready, job.status.terminating) == (0, 0)


async def test_start_time_may_be_cleared_only_while_suspended(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job("default", job_body("j"))
    await batch.patch_namespaced_job_status(
        "j", "default", {"status": {"startTime": START}}, _content_type=MERGE
    )
    assert await rejected(
        batch.patch_namespaced_job_status(
            "j", "default", {"status": {"startTime": None}}, _content_type=MERGE
        )
    ) == ["status.startTime"]
    await batch.patch_namespaced_job(
        "j", "default", {"spec": {"suspend": True}}, _content_type=MERGE
    )
    job = await batch.patch_namespaced_job_status(
        "j", "default", {"status": {"startTime": None}}, _content_type=MERGE
    )
    assert job.status.start_time is None


async def test_indexed_status_fields(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    body = job_body(
        "j", completionMode="Indexed", completions=6, parallelism=6, backoffLimitPerIndex=1
    )
    await batch.create_namespaced_job("default", body)

    async def status(update: dict[str, Any]) -> Any:
        return await batch.patch_namespaced_job_status(
            "j", "default", {"status": update}, _content_type=MERGE
        )

    await status({"completedIndexes": "0,2-4", "failedIndexes": "1"})
    assert await rejected(status({"completedIndexes": "4,2"})) == ["status.completedIndexes"]
    assert await rejected(status({"completedIndexes": "0-6"})) == ["status.completedIndexes"]
    assert await rejected(status({"failedIndexes": "1,2"})) == ["status.failedIndexes"]
