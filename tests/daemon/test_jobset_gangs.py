"""A JobSet that asks for a composite gang, end to end: on Kubernetes 1.37 one
CompositePodGroup over one PodGroup per child Job, the set bound inside one block and each Job
inside one rack, the leader's Job first; where CompositePodGroup is not served (1.36, the
simulated cluster), per-Job PodGroups, each Job in one rack, and one line in the log saying
so."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from events.intents import Bind
from events.schema import Decided
from tests.backends import on_cluster
from tests.daemon.test_gang import blocker, gpus_of
from tests.daemon.test_gang_jobs import raw_pods
from tests.daemon.test_jobsets import create, jobset, replicated
from tests.processes import (
    assert_reproduced,
    eventually,
    kube_client,
    logged_events,
    running_daemon,
)

pytestmark = pytest.mark.anyio

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
TOPOLOGY = "blocks=2,racks=2,hosts=2,gpus=8"
GROUP = "scheduling.k8s.io"


def gang_jobset() -> dict[str, Any]:
    container = [{"name": "main", "image": "busybox", "resources": gpus_of(4)}]
    run = {"sim.kbatchd.dev/run-seconds": "600"}
    rjs = [
        replicated("leader", 1, 1, annotations=run, containers=container),
        replicated("workers", 2, 2, annotations=run, containers=container),
    ]
    for rj in rjs:
        rj["template"]["spec"]["template"]["spec"]["schedulerName"] = "kbatchd"
    body = jobset("train", rjs)
    body["metadata"]["annotations"] = {
        "kbatchd.dev/gang": "composite",
        "kbatchd.dev/gang-topology": BLOCK,
        "kbatchd.dev/gang-job-topology": RACK,
    }
    return body


async def test_a_jobset_gang_binds_the_set_into_one_block_each_job_into_one_rack(
    tmp_path: Path, backend: str
) -> None:
    async with on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster:
        config = cluster.daemon_config(tmp_path)
        async with running_daemon(config), kube_client(cluster.admin) as api:
            ns, version = cluster.namespace, cluster.scheduling_version
            core = client.CoreV1Api(api)
            # Rack 0 of block 0 is full: block 0 has 16 GPUs free, block 1 has 32; the set
            # asks for 20.
            for host in ("b0-r0-h0", "b0-r0-h1"):
                await core.create_namespaced_pod(ns, blocker(f"blocker-{host}", host, 8))
            await create(api, gang_jobset(), ns)

            async def all_bound() -> list[dict[str, Any]] | None:
                pods = [
                    p
                    for p in await raw_pods(api, ns)
                    if p["spec"].get("schedulerName") == "kbatchd"
                ]
                done = len(pods) == 5 and all(p["spec"].get("nodeName") for p in pods)
                return pods if done else None

            pods = await eventually(all_bound, within=90, what="the JobSet's 5 pods bound")
            labels = {}
            for node in {p["spec"]["nodeName"] for p in pods}:
                labels[node] = (await core.read_node(node)).metadata.labels
            by_job: dict[str, set[str]] = {}
            for p in pods:
                job = p["metadata"]["labels"]["batch.kubernetes.io/job-name"]
                by_job.setdefault(job, set()).add(labels[p["spec"]["nodeName"]][RACK])
                group = p["spec"]["schedulingGroup"]["podGroupName"]
                assert group == f"{job}-a0"
            assert all(len(racks) == 1 for racks in by_job.values()), by_job
            custom = client.CustomObjectsApi(api)
            groups = await custom.list_namespaced_custom_object(GROUP, version, ns, "podgroups")
            parents = {
                g["metadata"]["name"]: g["spec"].get("parentCompositePodGroupName")
                for g in groups["items"]
            }
            assert set(parents) == {"train-leader-0-a0", "train-workers-0-a0", "train-workers-1-a0"}
            if version == "v1alpha2":
                assert set(parents.values()) == {None}
            else:
                assert set(parents.values()) == {"train-a0"}
                found = await custom.get_namespaced_custom_object(
                    GROUP, "v1alpha3", ns, "compositepodgroups", "train-a0"
                )
                assert found["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 3}}
                assert {labels[p["spec"]["nodeName"]][BLOCK] for p in pods} == {"b1"}
    events = await logged_events(tmp_path / "kbatchd.db")
    binds: dict[str, int] = {}
    notes = 0
    for seq, event in events:
        if not isinstance(event, Decided):
            continue
        notes += "CompositeUnavailable" in event.reason
        for intent in event.intents:
            if isinstance(intent, Bind):
                binds.setdefault(intent.name.rsplit("-", 2)[0], seq)
    if version == "v1alpha2":
        assert notes == 1
    else:
        assert notes == 0
        assert binds["train-leader-0"] < binds["train-workers-0"], "the leader first"
        assert binds["train-leader-0"] < binds["train-workers-1"]
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0
