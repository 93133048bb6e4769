"""Every manifest in config/examples/ applied as a user would apply it, on every backend, with
kbatchd running; each reaches the outcome its header comment promises."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client

from tests.backends import Cluster, on_cluster
from tests.processes import eventually, kube_client, running_daemon

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).resolve().parents[2] / "config" / "examples"
RACK = "cloud.provider.com/topology-rack"
# Room for the gang examples: 2 racks × 2 hosts × 8 GPUs.
TOPOLOGY = "blocks=1,racks=2,hosts=2,gpus=8"
# Kind -> (API group, plural) of the custom resources the examples hold.
CUSTOM = {
    "JobSet": ("jobset.x-k8s.io", "jobsets"),
    "Workload": ("scheduling.k8s.io", "workloads"),
    "PodGroup": ("scheduling.k8s.io", "podgroups"),
}


def for_cluster(doc: dict[str, Any], version: str) -> dict[str, Any]:
    """A scheduling.k8s.io object of the examples (Kubernetes 1.37's v1beta1) in the version
    the cluster serves: on v1alpha2 (1.36) the PodGroup names its template differently, as
    the examples' headers say."""
    if not doc["apiVersion"].startswith("scheduling.k8s.io/") or version == "v1beta1":
        return doc
    doc = {**doc, "apiVersion": f"scheduling.k8s.io/{version}"}
    ref = doc["spec"].get("workloadRef")
    if ref is not None:
        spec = {k: v for k, v in doc["spec"].items() if k != "workloadRef"}
        spec["podGroupTemplateRef"] = {
            "workload": {
                "workloadName": ref["workloadName"],
                "podGroupTemplateName": ref["templateName"],
            }
        }
        doc["spec"] = spec
    return doc


async def apply(api: client.ApiClient, cluster: Cluster, docs: list[dict[str, Any]]) -> None:
    ns = cluster.namespace
    for doc in docs:
        doc = for_cluster(doc, cluster.scheduling_version)
        kind = doc["kind"]
        if kind == "Pod":
            await client.CoreV1Api(api).create_namespaced_pod(ns, doc)
        elif kind == "Job":
            await client.BatchV1Api(api).create_namespaced_job(ns, doc)
        else:
            group, plural = CUSTOM[kind]
            version = doc["apiVersion"].split("/", 1)[1]
            await client.CustomObjectsApi(api).create_namespaced_custom_object(
                group, version, ns, plural, doc
            )


def condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    for item in (obj.get("status") or {}).get("conditions") or ():
        if item.get("type") == type_:
            return dict(item)
    return {}


async def indexed_job(api: client.ApiClient, cluster: Cluster) -> None:
    batch = client.BatchV1Api(api)

    async def complete() -> Any:
        job = await batch.read_namespaced_job("indexed", cluster.namespace)
        done = any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or ())
        return job if done else None

    job = await eventually(complete, within=90, what="the Job Complete")
    assert (job.status.succeeded, job.status.completed_indexes) == (4, "0-3")
    pods = await client.CoreV1Api(api).list_namespaced_pod(
        cluster.namespace, label_selector="job-name=indexed"
    )
    indexes = set()
    for pod in pods.items:
        env = {e.name: e for e in pod.spec.containers[0].env or ()}
        assert "JOB_COMPLETION_INDEX" in env, pod.metadata.name
        indexes.add(pod.metadata.annotations["batch.kubernetes.io/job-completion-index"])
    assert indexes == {"0", "1", "2", "3"}


async def jobset_depends_on(api: client.ApiClient, cluster: Cluster) -> None:
    custom = client.CustomObjectsApi(api)

    async def completed() -> bool:
        found = await custom.get_namespaced_custom_object(
            "jobset.x-k8s.io", "v1alpha2", cluster.namespace, "jobsets", "pipeline"
        )
        return condition(found, "Completed").get("status") == "True"

    await eventually(completed, within=90, what="the JobSet Completed")
    jobs = {
        j.metadata.name: j
        for j in (await client.BatchV1Api(api).list_namespaced_job(cluster.namespace)).items
    }
    prepared = jobs["pipeline-prepare-0"].status.completion_time
    assert prepared is not None
    for name in ("pipeline-train-0", "pipeline-train-1"):
        assert jobs[name].metadata.creation_timestamp >= prepared.replace(microsecond=0), name


async def _bound_in_one_rack(
    api: client.ApiClient, cluster: Cluster, groups: list[str], pods: list[str]
) -> None:
    custom, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    version = cluster.scheduling_version

    async def scheduled() -> bool:
        for group in groups:
            found = await custom.get_namespaced_custom_object(
                "scheduling.k8s.io", version, cluster.namespace, "podgroups", group
            )
            if condition(found, "PodGroupScheduled").get("status") != "True":
                return False
        return True

    await eventually(scheduled, within=60, what=f"{', '.join(groups)} PodGroupScheduled=True")
    racks = set()
    for name in pods:
        pod = await core.read_namespaced_pod(name, cluster.namespace)
        assert pod.spec.node_name, name
        node = await core.read_node(pod.spec.node_name)
        racks.add(node.metadata.labels[RACK])
    assert len(racks) == 1, racks


async def gang_rack(api: client.ApiClient, cluster: Cluster) -> None:
    await _bound_in_one_rack(api, cluster, ["train-main"], [f"train-{i}" for i in range(4)])


async def prefill_decode(api: client.ApiClient, cluster: Cluster) -> None:
    pods = ["llm-prefill-0", "llm-decode-0", "llm-decode-1", "llm-decode-2"]
    await _bound_in_one_rack(api, cluster, ["llm-prefill", "llm-decode"], pods)


OUTCOMES: dict[str, Callable[[client.ApiClient, Cluster], Awaitable[None]]] = {
    "indexed-job.yaml": indexed_job,
    "jobset-depends-on.yaml": jobset_depends_on,
    "gang-rack.yaml": gang_rack,
    "prefill-decode.yaml": prefill_decode,
}


def test_every_example_has_a_checked_outcome() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.yaml")) == sorted(OUTCOMES)


@pytest.mark.parametrize("example", sorted(OUTCOMES))
async def test_the_example_reaches_its_documented_outcome(
    tmp_path: Path, backend: str, example: str
) -> None:
    async with (
        on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        await apply(api, cluster, list(yaml.safe_load_all((EXAMPLES / example).read_text())))
        await OUTCOMES[example](api, cluster)
