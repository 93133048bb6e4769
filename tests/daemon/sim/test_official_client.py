"""The official (synchronous) `kubernetes` client against a simulated cluster running in a
background thread: discovery through the dynamic client, then get/list/watch/create/patch/
delete of every served kind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client, config, dynamic, watch

from daemon.sim.background import BackgroundSim
from daemon.sim.cluster import SimCluster
from daemon.sim.topology import node

T = "2026-01-01T00:00:00Z"

KINDS: list[tuple[str, str, bool, dict[str, Any]]] = [
    ("v1", "Namespace", False, {}),
    ("v1", "Node", False, {k: v for k, v in node("extra").items() if k in ("spec", "status")}),
    (
        "v1",
        "Pod",
        True,
        {"spec": {"schedulerName": "kbatchd", "containers": [{"name": "c", "image": "i"}]}},
    ),
    (
        "v1",
        "PersistentVolumeClaim",
        True,
        {"spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}},
    ),
    ("v1", "Service", True, {"spec": {"clusterIP": "None", "selector": {"a": "b"}}}),
    (
        "v1",
        "Event",
        True,
        {
            "involvedObject": {"kind": "Pod", "name": "x", "namespace": "default"},
            "reason": "Test",
            "message": "m",
            "type": "Normal",
        },
    ),
    (
        "batch/v1",
        "Job",
        True,
        {
            "spec": {
                "suspend": True,
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                },
            }
        },
    ),
    (
        "jobset.x-k8s.io/v1alpha2",
        "JobSet",
        True,
        {
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "w",
                        "template": {
                            "spec": {
                                "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}
                            }
                        },
                    }
                ]
            }
        },
    ),
    (
        "scheduling.k8s.io/v1alpha2",
        "Workload",
        True,
        {"spec": {"podGroups": [{"name": "g", "policy": {"gang": {"minCount": 2}}}]}},
    ),
    ("scheduling.k8s.io/v1alpha2", "PodGroup", True, {"spec": {"minCount": 2}}),
    ("scheduling.k8s.io/v1", "PriorityClass", False, {"value": 1000, "description": "test"}),
    (
        "coordination.k8s.io/v1",
        "Lease",
        True,
        {"spec": {"holderIdentity": "me", "leaseDurationSeconds": 15}},
    ),
    (
        "events.k8s.io/v1",
        "Event",
        True,
        {
            "eventTime": "2026-01-01T00:00:00.000000Z",
            "reason": "Test",
            "action": "Act",
            "reportingController": "kbatchd",
            "reportingInstance": "kbatchd-0",
            "type": "Normal",
        },
    ),
]


@pytest.fixture(scope="module")
def background() -> Iterator[tuple[BackgroundSim, SimCluster]]:
    runner = BackgroundSim(topology="blocks=1,racks=1,hosts=2", seed=3, time_scale=50.0)
    with runner as sim:
        yield runner, sim


@pytest.fixture(scope="module")
def api_client(background: tuple[BackgroundSim, SimCluster]) -> Iterator[client.ApiClient]:
    _, sim = background
    api = config.new_client_from_config(config_file=str(sim.kubeconfig_path))
    yield api
    api.close()


@pytest.mark.parametrize(
    ("api_version", "kind", "namespaced", "extra"), KINDS, ids=[f"{a}/{k}" for a, k, _, _ in KINDS]
)
def test_every_kind_round_trips(
    api_client: client.ApiClient,
    api_version: str,
    kind: str,
    namespaced: bool,
    extra: dict[str, Any],
) -> None:
    dyn = dynamic.DynamicClient(api_client)
    resource = dyn.resources.get(api_version=api_version, kind=kind)
    name = f"oc-{kind.lower()}"
    ns = "default" if namespaced else None
    body = {"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, **extra}
    created = resource.create(body=body, namespace=ns)
    assert created.metadata.name == name
    assert created.metadata.uid
    got = resource.get(name=name, namespace=ns)
    assert got.metadata.uid == created.metadata.uid
    listed = resource.get(namespace=ns)
    assert name in [item.metadata.name for item in listed.items]
    patched = resource.patch(
        name=name,
        namespace=ns,
        body={"metadata": {"labels": {"patched": "yes"}}},
        content_type="application/merge-patch+json",
    )
    assert patched.metadata.labels["patched"] == "yes"
    seen = None
    for event in resource.watch(
        namespace=ns, resource_version=created.metadata.resourceVersion, timeout=5
    ):
        if (event["type"], event["object"].metadata.name) == ("MODIFIED", name):
            seen = event["object"]
            break
    assert seen is not None
    assert seen.metadata.labels["patched"] == "yes"
    resource.delete(
        name=name, namespace=ns, body={"gracePeriodSeconds": 0, "propagationPolicy": "Background"}
    )
    remaining = [item.metadata.name for item in resource.get(namespace=ns).items]
    if kind == "Namespace":  # emptied first by the namespace controller, then gone
        return
    assert name not in remaining


def test_typed_api_and_watch(
    api_client: client.ApiClient, background: tuple[BackgroundSim, SimCluster]
) -> None:
    core = client.CoreV1Api(api_client)
    nodes = core.list_node()
    assert [n.metadata.name for n in nodes.items if n.metadata.name.startswith("b0")] == [
        "b0-r0-h0",
        "b0-r0-h1",
    ]
    start = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod(
        "default",
        {
            "metadata": {"name": "typed", "annotations": {"sim.kbatchd.dev/run-seconds": "1"}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]},
        },
    )
    phases = []
    w = watch.Watch()
    for event in w.stream(
        core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=5
    ):
        if event["object"].metadata.name == "typed":
            phases.append(event["object"].status.phase)
            if event["object"].status.phase == "Succeeded":
                w.stop()
    assert phases[0] == "Pending"
    assert phases[-1] == "Succeeded"
    assert "Running" in phases
    with pytest.raises(client.ApiException) as err:
        core.read_namespaced_pod("missing", "default")
    assert err.value.status == 404
