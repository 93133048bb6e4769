"""Gang Jobs end to end (KEP-5547): kbatchd's Job controller makes a Job's Workload and PodGroup,
with upstream's names and owners, links every pod it creates to the group, and the gang
controller admits the pods whole, into the topology the Job asks for."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from daemon.controllers.workloads import podgroup_name, template_name, workload_name
from events.intents import Bind, Create
from events.schema import Decided
from tests.backends import Cluster, on_cluster
from tests.daemon.test_gang import RACK, TOPOLOGY, gpus_of, occupy_every_rack, scheduled
from tests.processes import (
    assert_reproduced,
    eventually,
    kube_client,
    logged_events,
    running_daemon,
)

pytestmark = pytest.mark.anyio

GROUP = "scheduling.k8s.io"
KUEUE_REQUIRED = "kueue.x-k8s.io/podset-required-topology"


def gang_job(name: str, pods: int, version: str) -> dict[str, Any]:
    """An Indexed Job of `pods` one-GPU pods that must share a rack. On Kubernetes 1.37 it asks
    for its gang in ``spec.scheduling``; 1.36 has no such field, so there the gang is inferred
    (``workload_with_job``) and the rack comes from Kueue's pod set annotation."""
    template: dict[str, Any] = {
        "metadata": {},
        "spec": {
            "schedulerName": "kbatchd",
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox", "resources": gpus_of(1)}],
        },
    }
    spec: dict[str, Any] = {
        "managedBy": "kbatchd.dev/job-controller",
        "completionMode": "Indexed",
        "parallelism": pods,
        "completions": pods,
        "template": template,
    }
    if version == "v1alpha2":
        template["metadata"]["annotations"] = {KUEUE_REQUIRED: RACK}
    else:
        spec["scheduling"] = {
            "schedulingPolicy": {"gang": {}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


async def raw_pods(api: client.ApiClient, ns: str) -> list[dict[str, Any]]:
    """The namespace's pods as the server sends them (the generated models may not know
    ``spec.schedulingGroup``)."""
    answer: Any = await client.CoreV1Api(api).list_namespaced_pod(ns, _preload_content=False)
    return [p for p in json.loads(await answer.read())["items"]]


async def test_a_gang_job_gets_its_workload_and_podgroup_and_binds_whole_into_one_rack(
    tmp_path: Path, backend: str
) -> None:
    async with on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster:
        await _play(cluster, tmp_path)


async def _play(cluster: Cluster, tmp_path: Path) -> None:
    config = cluster.daemon_config(tmp_path, job={"workload_with_job": True})
    async with running_daemon(config), kube_client(cluster.admin) as api:
        ns, version = cluster.namespace, cluster.scheduling_version
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        custom = client.CustomObjectsApi(api)
        await occupy_every_rack(core, ns)
        job = await batch.create_namespaced_job(ns, gang_job("train", 16, version))
        uid = job.metadata.uid
        workload = workload_name("train", uid)
        group = podgroup_name(workload, template_name("train"))

        async def members() -> list[dict[str, Any]] | None:
            pods = [
                p for p in await raw_pods(api, ns) if p["spec"].get("schedulerName") == "kbatchd"
            ]
            return pods if len(pods) == 16 else None

        pods = await eventually(members, within=30, what="the Job's 16 pods")
        assert {p["spec"].get("schedulingGroup", {}).get("podGroupName") for p in pods} == {group}
        # Only kbatchd's: the built-in Job controller leaves a managedBy Job's gang alone.
        listed = await custom.list_namespaced_custom_object(GROUP, version, ns, "workloads")
        assert [w["metadata"]["name"] for w in listed["items"]] == [workload]
        found = await custom.get_namespaced_custom_object(GROUP, version, ns, "workloads", workload)
        assert found["spec"]["controllerRef"] == {
            "apiGroup": "batch",
            "kind": "Job",
            "name": "train",
        }
        [template] = found["spec"]["podGroupTemplates"]
        assert template["name"] == "train-pgt-0"
        assert template["schedulingPolicy"] == {"gang": {"minCount": 16}}
        assert [
            (o["kind"], o["uid"], o.get("controller")) for o in found["metadata"]["ownerReferences"]
        ] == [("Job", uid, True)]
        pod_group = await custom.get_namespaced_custom_object(
            GROUP, version, ns, "podgroups", group
        )
        owners = [
            (o["kind"], o.get("controller", False))
            for o in pod_group["metadata"]["ownerReferences"]
        ]
        assert owners == [("Job", True), ("Workload", False)]
        assert pod_group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 16}}

        async def waiting() -> dict[str, Any] | None:
            got = await custom.get_namespaced_custom_object(GROUP, version, ns, "podgroups", group)
            condition = scheduled(got)
            return condition if condition.get("status") == "False" else None

        condition = await eventually(waiting, within=30, what="PodGroupScheduled=False")
        assert condition["reason"] == "Unschedulable"
        assert not [
            p["metadata"]["name"]
            for p in await raw_pods(api, ns)
            if p["spec"].get("schedulerName") == "kbatchd" and p["spec"].get("nodeName")
        ], "a partial gang bound"

        await core.delete_namespaced_pod("blocker-b0-r1", ns, grace_period_seconds=0)

        async def all_bound() -> list[dict[str, Any]] | None:
            pods = await members() or []
            return pods if pods and all(p["spec"].get("nodeName") for p in pods) else None

        bound = await eventually(all_bound, within=30, what="all 16 members bound")
        racks = {(await core.read_node(p["spec"]["nodeName"])).metadata.labels[RACK] for p in bound}
        assert racks == {"b0-r1"}


BLOCK = "cloud.provider.com/topology-block"
# 2 blocks of 8 racks of 16 hosts of 8 GPUs: 1,024 GPUs per block.
SEED_TOPOLOGY = "blocks=2,racks=8,hosts=16,gpus=8"


async def test_the_seed_gang_job_of_1000_pods_is_bound_as_one_unit_into_one_block(
    tmp_path: Path, backend: str
) -> None:
    """The issue's seed scenario: the Job's pods are created in two decisions of 500, and no
    pod binds before the last exists; then one decision binds all 1,000 inside one block."""
    async with on_cluster(backend, tmp_path, topology=SEED_TOPOLOGY) as cluster:
        config = cluster.daemon_config(tmp_path, job={"workload_with_job": True})
        async with running_daemon(config), kube_client(cluster.admin) as api:
            ns, version = cluster.namespace, cluster.scheduling_version
            body = gang_job("seed", 1000, version)
            if version == "v1alpha2":
                body["spec"]["template"]["metadata"]["annotations"] = {KUEUE_REQUIRED: BLOCK}
            else:
                body["spec"]["scheduling"]["schedulingConstraints"] = {"topology": [{"key": BLOCK}]}
            await client.BatchV1Api(api).create_namespaced_job(ns, body)

            async def all_bound() -> list[dict[str, Any]] | None:
                pods = await raw_pods(api, ns)
                done = len(pods) == 1000 and all(p["spec"].get("nodeName") for p in pods)
                return pods if done else None

            pods = await eventually(all_bound, within=240, what="1,000 pods bound")
            core = client.CoreV1Api(api)
            labels = {}
            for node in {p["spec"]["nodeName"] for p in pods}:
                labels[node] = (await core.read_node(node)).metadata.labels[BLOCK]
            assert len(set(labels.values())) == 1
            assert len({p["spec"]["schedulingGroup"]["podGroupName"] for p in pods}) == 1
    events = await logged_events(tmp_path / "kbatchd.db")
    creates = [
        s
        for s, e in events
        if isinstance(e, Decided)
        and any(i.kind == "Pod" and isinstance(i, Create) for i in e.intents)
    ]
    binds = [
        (s, sum(isinstance(i, Bind) for i in e.intents))
        for s, e in events
        if isinstance(e, Decided) and any(isinstance(i, Bind) for i in e.intents)
    ]
    assert len(creates) == 2
    assert [count for _, count in binds] == [1000]
    assert binds[0][0] > max(creates)
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0
