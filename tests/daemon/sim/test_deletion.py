"""Deletion through kubernetes-asyncio: grace periods held until the node agent finishes,
finalizers, preconditions, garbage collection (background, foreground, orphan) and
namespace deletion."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS, NAMESPACES, PODS
from daemon.sim.store import Obj
from tests.daemon.sim.helpers import job_body, pod_body

pytestmark = pytest.mark.anyio


def running(obj: Obj | None) -> bool:
    return obj is not None and obj.get("status", {}).get("phase") == "Running"


def gone(obj: Obj | None) -> bool:
    return obj is None


async def test_graceful_delete_waits_for_the_agent(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    # 5 simulated seconds of terminating: 0.1 s at time scale 50.
    await core.create_namespaced_pod(
        "default", pod_body("p", **{"sim.kbatchd.dev/terminating-seconds": "5"})
    )
    phases: list[str] = []
    sim.store.listeners.append(
        lambda e: phases.append(e.obj["status"]["phase"]) if e.resource is PODS else None
    )
    with anyio.fail_after(5):
        await sim.wait_for(PODS, "default", "p", running)
        await core.delete_namespaced_pod("p", "default")
        pod = await core.read_namespaced_pod("p", "default")
        assert pod.metadata.deletion_timestamp is not None
        assert pod.metadata.deletion_grace_period_seconds == 30
        assert pod.status.phase == "Running"
        await sim.wait_for(PODS, "default", "p", gone)
    assert phases[-2:] == ["Failed", "Failed"]  # terminated, then the final DELETED event


async def test_delete_with_grace_zero_and_unbound_pods_are_immediate(
    api: client.ApiClient, sim: SimCluster
) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_body("p"))
    with anyio.fail_after(5):
        await sim.wait_for(PODS, "default", "p", running)
    await core.delete_namespaced_pod("p", "default", grace_period_seconds=0)
    assert sim.get(PODS, "default", "p") is None
    body = pod_body("q")
    body["spec"]["schedulerName"] = "kbatchd"
    await core.create_namespaced_pod("default", body)
    await core.delete_namespaced_pod("q", "default")
    assert sim.get(PODS, "default", "q") is None


async def test_finalizers_hold_deletion(api: client.ApiClient, sim: SimCluster) -> None:
    batch = client.BatchV1Api(api)
    body = job_body("j", suspend=True)
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await batch.create_namespaced_job("default", body)
    await batch.delete_namespaced_job("j", "default", propagation_policy="Background")
    job = await batch.read_namespaced_job("j", "default")
    assert job.metadata.deletion_timestamp is not None
    assert job.metadata.finalizers == ["example.com/hold"]
    with pytest.raises(ApiException) as err:
        await batch.patch_namespaced_job(
            "j",
            "default",
            {"metadata": {"finalizers": ["example.com/hold", "example.com/new"]}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 422
    await batch.patch_namespaced_job(
        "j",
        "default",
        {"metadata": {"finalizers": None}},
        _content_type="application/merge-patch+json",
    )
    assert sim.get(JOBS, "default", "j") is None


async def test_delete_preconditions(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    pod = await core.create_namespaced_pod("default", pod_body("p"))
    for pre in ({"uid": "not-the-uid"}, {"resourceVersion": "1"}):
        with pytest.raises(ApiException) as err:
            await core.delete_namespaced_pod(
                "p", "default", body={"preconditions": pre, "gracePeriodSeconds": 0}
            )
        assert err.value.status == 409
        assert "Precondition failed" in err.value.body
    await core.delete_namespaced_pod(
        "p", "default", body={"preconditions": {"uid": pod.metadata.uid}, "gracePeriodSeconds": 0}
    )


async def owned_pods(core: client.CoreV1Api, job: Any, count: int, *, bound: bool) -> None:
    for i in range(count):
        body = pod_body(f"{job.metadata.name}-{i}")
        if not bound:
            body["spec"]["schedulerName"] = "kbatchd"
        body["metadata"]["ownerReferences"] = [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": job.metadata.name,
                "uid": job.metadata.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        await core.create_namespaced_pod("default", body)


async def test_background_propagation(api: client.ApiClient, sim: SimCluster) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    job = await batch.create_namespaced_job("default", job_body("j", suspend=True))
    await owned_pods(core, job, 2, bound=False)
    await batch.delete_namespaced_job("j", "default", propagation_policy="Background")
    assert sim.get(JOBS, "default", "j") is None
    with anyio.fail_after(5):
        for i in range(2):
            await sim.wait_for(PODS, "default", f"j-{i}", gone)


async def test_foreground_propagation(api: client.ApiClient, sim: SimCluster) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    job = await batch.create_namespaced_job("default", job_body("j", suspend=True))
    await owned_pods(core, job, 2, bound=True)
    with anyio.fail_after(5):
        for i in range(2):
            await sim.wait_for(PODS, "default", f"j-{i}", running)
        await batch.delete_namespaced_job("j", "default", propagation_policy="Foreground")
        held = await batch.read_namespaced_job("j", "default")
        assert held.metadata.deletion_timestamp is not None
        assert "foregroundDeletion" in held.metadata.finalizers
        # The owner stays while its blocking dependents terminate, then goes.
        await sim.wait_for(
            PODS,
            "default",
            "j-0",
            lambda o: o is None or o["metadata"].get("deletionTimestamp") is not None,
        )
        assert sim.get(JOBS, "default", "j") is not None
        await sim.wait_for(JOBS, "default", "j", gone)
    assert sim.get(PODS, "default", "j-0") is None
    assert sim.get(PODS, "default", "j-1") is None


async def test_orphan_propagation_and_job_default(api: client.ApiClient, sim: SimCluster) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    for name, policy in (("orphaned", "Orphan"), ("legacy", None)):
        job = await batch.create_namespaced_job("default", job_body(name, suspend=True))
        await owned_pods(core, job, 1, bound=False)
        if policy:
            await batch.delete_namespaced_job(name, "default", propagation_policy=policy)
        else:
            await batch.delete_namespaced_job(name, "default")  # batch/v1 default: orphan
        assert sim.get(JOBS, "default", name) is None
        pod = await core.read_namespaced_pod(f"{name}-0", "default")
        assert pod.metadata.owner_references is None


async def test_dangling_owner_reference_is_collected(
    api: client.ApiClient, sim: SimCluster
) -> None:
    core = client.CoreV1Api(api)
    body = pod_body("orphan")
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "ghost", "uid": "00000000-dead"}
    ]
    await core.create_namespaced_pod("default", body)
    with anyio.fail_after(5):
        await sim.wait_for(PODS, "default", "orphan", gone)


async def test_namespace_deletion_empties_it_first(api: client.ApiClient, sim: SimCluster) -> None:
    core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
    await core.create_namespace({"metadata": {"name": "team"}})
    await core.create_namespaced_pod("team", pod_body("p"))
    await batch.create_namespaced_job("team", job_body("j", suspend=True))
    with anyio.fail_after(5):
        await sim.wait_for(PODS, "team", "p", running)
        await core.delete_namespace("team")
        ns = await core.read_namespace("team")
        assert ns.status.phase == "Terminating"
        with pytest.raises(ApiException) as err:
            await core.create_namespaced_pod("team", pod_body("late"))
        assert err.value.status == 403
        await sim.wait_for(NAMESPACES, "", "team", gone)
    assert sim.objects(PODS, "team") == []
    assert sim.objects(JOBS, "team") == []


async def test_eviction(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_body("p"))
    with anyio.fail_after(5):
        await sim.wait_for(PODS, "default", "p", running)
        response = await core.create_namespaced_pod_eviction(
            "p",
            "default",
            {"metadata": {"name": "p"}, "deleteOptions": {"gracePeriodSeconds": 1}},
            _preload_content=False,
        )
        assert response.status == 201
        pod = sim.get(PODS, "default", "p")
        assert pod is not None
        assert pod["metadata"]["deletionGracePeriodSeconds"] == 1
        reasons = {c["type"]: c.get("reason") for c in pod["status"]["conditions"]}
        assert reasons["DisruptionTarget"] == "EvictionByEvictionAPI"
        await sim.wait_for(PODS, "default", "p", gone)
