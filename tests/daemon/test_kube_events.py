"""Kubernetes Events end to end, on both backends: what `kubectl describe` lists for a Job
kbatchd suspends, resumes and completes, and for a gang that does not fit, then does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from tests.backends import on_cluster
from tests.daemon.test_gang import TOPOLOGY, gang_objects, member, occupy_every_rack
from tests.daemon.test_jobs import job_body
from tests.processes import Child, eventually, kube_client, running_daemon

pytestmark = pytest.mark.anyio

RUN = "sim.kbatchd.dev/run-seconds"


async def described(core: client.CoreV1Api, namespace: str, kind: str, name: str) -> list[Any]:
    """The Events about one object, as `kubectl describe` finds them, oldest first (kbatchd
    names each `NAME.<hex nanoseconds>`, as client-go does)."""
    found = await core.list_namespaced_event(
        namespace, field_selector=f"involvedObject.kind={kind},involvedObject.name={name}"
    )
    return sorted(found.items, key=lambda e: e.metadata.name)


def shown(events: list[Any]) -> list[tuple[str, str, str]]:
    return [(e.type, e.reason, e.message) for e in events]


async def milestone(daemon: Child, event: str) -> dict[str, Any]:
    """The daemon's one log line saying `event`."""

    async def logged() -> list[dict[str, Any]]:
        return daemon.lines(event)

    (line,) = await eventually(logged, within=10, what=f"the {event!r} line")
    return line


async def test_a_suspended_job_resumed_and_completed_shows_upstreams_events(
    tmp_path: Path, backend: str
) -> None:
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)) as daemon,
        kube_client(cluster.admin) as api,
    ):
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        ns = cluster.namespace
        await batch.create_namespaced_job(
            ns, job_body("told", suspend=True, annotations={RUN: "0.5"})
        )

        async def suspended() -> list[Any]:
            return [e for e in await described(core, ns, "Job", "told") if e.reason == "Suspended"]

        await eventually(suspended, what="the Suspended Event")
        await batch.patch_namespaced_job("told", ns, {"spec": {"suspend": False}})

        async def completed() -> list[Any]:
            events = await described(core, ns, "Job", "told")
            return events if any(e.reason == "Completed" for e in events) else []

        events = await eventually(completed, within=60, what="the Completed Event")
        pods = await core.list_namespaced_pod(
            ns, label_selector="batch.kubernetes.io/job-name=told"
        )
        (pod,) = [p.metadata.name for p in pods.items]
        assert shown(events) == [
            ("Normal", "Suspended", "Job suspended"),
            ("Normal", "Resumed", "Job resumed"),
            ("Normal", "SuccessfulCreate", f"Created pod: {pod}"),
            ("Normal", "Completed", "Job completed"),
        ]
        job = await batch.read_namespaced_job("told", ns)
        for event in events:
            assert event.involved_object.uid == job.metadata.uid
            assert event.source.component == "kbatchd"
            assert event.count == 1
        done = await milestone(daemon, "Job completed")
        assert (done["key"], done["reason"]) == (
            f"Job/{cluster.name}/{ns}/told",
            "CompletionsReached",
        )


async def test_a_gang_that_does_not_fit_then_does_shows_failed_scheduling_then_scheduled(
    tmp_path: Path, backend: str
) -> None:
    async with (
        on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)) as daemon,
        kube_client(cluster.admin) as api,
    ):
        ns = cluster.namespace
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        group, version = "scheduling.k8s.io", cluster.scheduling_version
        workload, pod_group = gang_objects(version)
        await occupy_every_rack(core, ns)
        await custom.create_namespaced_custom_object(group, version, ns, "workloads", workload)
        await custom.create_namespaced_custom_object(group, version, ns, "podgroups", pod_group)
        names = [f"train-{i:02d}" for i in range(16)]
        for name in names:
            await core.create_namespaced_pod(ns, member(name, "train-main"))

        async def refused() -> list[Any]:
            events = await described(core, ns, "PodGroup", "train-main")
            return [e for e in events if e.message.startswith("InsufficientRoom")]

        (failed,) = await eventually(refused, within=30, what="FailedScheduling for the gang")
        assert (failed.type, failed.reason) == ("Warning", "FailedScheduling")
        rack = "cloud.provider.com/topology-rack"
        assert failed.message == (
            f"InsufficientRoom: 16 pod(s) request nvidia.com/gpu 16 (12 free) in any one {rack}"
        )

        await core.delete_namespaced_pod("blocker-b0-r1", ns, grace_period_seconds=0)

        async def admitted() -> list[Any]:
            events = await described(core, ns, "PodGroup", "train-main")
            return events if events[-1].reason == "Scheduled" else []

        events = await eventually(admitted, within=30, what="Scheduled for the gang")
        assert [e.reason for e in events if e.reason != "FailedScheduling"] == ["Scheduled"]
        assert events[-1].message == "16 pod(s) bound to 2 node(s)"
        admission = await milestone(daemon, "gang admitted")
        key = f"PodGroup/{cluster.name}/{ns}/train-main"
        assert (admission["key"], admission["reason"]) == (key, "Scheduled")

        async def pod_scheduled() -> list[Any]:
            events = await described(core, ns, "Pod", "train-00")
            ours = [e for e in events if e.source.component == "kbatchd"]
            return ours if any(e.reason == "Scheduled" for e in ours) else []

        # As kube-scheduler writes them: the member waited with the placement reason (again,
        # if a retry found another one, as the group's own Events may), then was assigned.
        pod = await core.read_namespaced_pod("train-00", ns)
        ours = shown(await eventually(pod_scheduled, what="Scheduled for a member"))
        assert ours[0] == ("Warning", "FailedScheduling", failed.message)
        assert ours[-1] == (
            "Normal",
            "Scheduled",
            f"Successfully assigned {ns}/train-00 to {pod.spec.node_name}",
        )
        assert {reason for _, reason, _ in ours[1:-1]} <= {"FailedScheduling"}, ours
