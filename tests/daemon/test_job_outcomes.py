"""Job policies end to end, on both backends: each scenario reduces what the cluster shows to
an outcome (pods created, the Job's conditions and counters) and compares it with the one
upstream's Job controller gives, the same literal for every backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from events.schema import Decided
from tests.backends import Cluster, on_cluster
from tests.daemon.test_jobs import job_body, pods_ever_held
from tests.processes import eventually, kube_client, logged_events, running_daemon

pytestmark = pytest.mark.anyio

RUN, EXIT = "sim.kbatchd.dev/run-seconds", "sim.kbatchd.dev/exit-code"


async def finished(batch: client.BatchV1Api, name: str, namespace: str) -> Any:
    """The Job once it has a terminal condition (Complete or Failed)."""

    async def check() -> Any:
        job = await batch.read_namespaced_job(name, namespace)
        conditions = job.status.conditions or []
        done = any(c.type in ("Complete", "Failed") and c.status == "True" for c in conditions)
        return job if done else None

    return await eventually(check, within=90, what=f"Job {name} finished")


async def outcome_of(cluster: Cluster, tmp: Path, body: dict[str, Any]) -> dict[str, Any]:
    """Run the Job under kbatchd until it finishes; its observable outcome."""
    name = body["metadata"]["name"]
    async with (
        running_daemon(cluster.daemon_config(tmp)),
        kube_client(cluster.admin) as api,
    ):
        batch = client.BatchV1Api(api)
        await batch.create_namespaced_job(cluster.namespace, body)
        job = await finished(batch, name, cluster.namespace)
    events = await logged_events(tmp / "kbatchd.db")
    return {
        "pods": len(pods_ever_held(events, name)),
        "conditions": sorted(
            (c.type, c.reason) for c in job.status.conditions or [] if c.status == "True"
        ),
        "succeeded": job.status.succeeded or 0,
        "failed": job.status.failed or 0,
    }


async def test_backoff_limit_fails_the_job_after_limit_plus_one_pods(
    tmp_path: Path, backend: str
) -> None:
    body = job_body("flaky", annotations={RUN: "0.5", EXIT: "1"})
    body["spec"]["backoffLimit"] = 1
    async with on_cluster(backend, tmp_path) as cluster:
        outcome = await outcome_of(cluster, tmp_path, body)
    assert outcome == {
        "pods": 2,
        "conditions": [
            ("Failed", "BackoffLimitExceeded"),
            ("FailureTarget", "BackoffLimitExceeded"),
        ],
        "succeeded": 0,
        "failed": 2,
    }


async def test_pod_failure_policy_fails_the_job_at_the_first_matching_exit_code(
    tmp_path: Path, backend: str
) -> None:
    body = job_body("fatal", parallelism=1, completions=3, annotations={RUN: "0.5", EXIT: "42"})
    body["spec"]["backoffLimit"] = 6
    body["spec"]["podFailurePolicy"] = {
        "rules": [
            {
                "action": "FailJob",
                "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]},
            }
        ]
    }
    async with on_cluster(backend, tmp_path) as cluster:
        outcome = await outcome_of(cluster, tmp_path, body)
    assert outcome == {
        "pods": 1,
        "conditions": [("Failed", "PodFailurePolicy"), ("FailureTarget", "PodFailurePolicy")],
        "succeeded": 0,
        "failed": 1,
    }


async def test_pod_failure_policy_ignore_does_not_count_toward_the_backoff_limit(
    tmp_path: Path, backend: str
) -> None:
    body = job_body("ignored", annotations={RUN: "0.5", EXIT: "7"})
    body["spec"]["backoffLimit"] = 0
    body["spec"]["podFailurePolicy"] = {
        "rules": [
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [7]}},
        ]
    }
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        batch = client.BatchV1Api(api)
        await batch.create_namespaced_job(cluster.namespace, body)

        async def replaced_twice() -> bool:
            events = await logged_events(tmp_path / "kbatchd.db")
            return len(pods_ever_held(events, "ignored")) >= 3

        await eventually(replaced_twice, within=60, what="ignored failures replaced")
        job = await batch.read_namespaced_job("ignored", cluster.namespace)
        assert not [c for c in job.status.conditions or [] if c.status == "True"]
        assert not job.status.failed


async def test_success_policy_completes_the_job_when_its_indexes_succeed(
    tmp_path: Path, backend: str
) -> None:
    body = job_body("partial", parallelism=3, completions=3, annotations={RUN: "1"})
    body["spec"]["completionMode"] = "Indexed"
    body["spec"]["successPolicy"] = {"rules": [{"succeededIndexes": "0-2", "succeededCount": 1}]}
    async with on_cluster(backend, tmp_path) as cluster:
        outcome = await outcome_of(cluster, tmp_path, body)
    assert outcome["pods"] == 3
    assert outcome["conditions"] == [
        ("Complete", "SuccessPolicy"),
        ("SuccessCriteriaMet", "SuccessPolicy"),
    ]
    assert outcome["succeeded"] >= 1


async def test_a_job_kbatchd_does_not_manage_gets_no_decision(tmp_path: Path, backend: str) -> None:
    """Left to the built-in Job controller: on the real control plane it runs the Job to
    Complete; kbatchd decides nothing for it on either backend."""
    body = job_body("theirs", annotations={RUN: "0.5"})
    del body["spec"]["managedBy"]
    async with on_cluster(backend, tmp_path) as cluster:
        async with (
            running_daemon(cluster.daemon_config(tmp_path)),
            kube_client(cluster.admin) as api,
        ):
            batch = client.BatchV1Api(api)
            await batch.create_namespaced_job(cluster.namespace, body)
            marker = job_body("ours", annotations={RUN: "0.5"})
            await batch.create_namespaced_job(cluster.namespace, marker)
            await finished(batch, "ours", cluster.namespace)
            if cluster.real:
                theirs = await finished(batch, "theirs", cluster.namespace)
                assert theirs.status.succeeded == 1
        events = await logged_events(tmp_path / "kbatchd.db")
    keys = {e.key for _, e in events if isinstance(e, Decided)}
    assert any(key.endswith("/ours") for key in keys)
    assert not any(key.endswith("/theirs") for key in keys)
