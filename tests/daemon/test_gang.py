"""Gang admission end to end: the daemon and the simulated cluster as real processes, observed
through a standard client (the issue's acceptance scenario)."""

from __future__ import annotations

import copy
import signal
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from daemon.sim.cluster import SimCluster
from daemon.sim.resources import NODES, PODS, by_kind
from events.intents import Bind
from events.schema import Decided, Observed, Outcome
from tests.backends import on_cluster
from tests.processes import (
    assert_reproduced,
    daemon_config,
    eventually,
    kube_client,
    logged_events,
    running_daemon,
)

pytestmark = pytest.mark.anyio

NS = "default"
GPU = "nvidia.com/gpu"
RACK = "cloud.provider.com/topology-rack"
# 2 racks × 2 hosts × 8 GPUs: 16 GPUs per rack.
TOPOLOGY = "blocks=1,racks=2,hosts=2,gpus=8"


def gpus_of(count: int) -> dict[str, Any]:
    """Container resources for `count` GPUs: an extended resource needs its limit (equal to
    the request; the API server refuses a request alone)."""
    return {"requests": {GPU: str(count)}, "limits": {GPU: str(count)}}


def blocker(name: str, host: str, gpus: int) -> dict[str, Any]:
    """A default-scheduler pod bound to `host` (by the simulated cluster's agent, or by
    kube-scheduler)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": host},
            "containers": [{"name": "main", "image": "busybox", "resources": gpus_of(gpus)}],
        },
    }


async def occupy_every_rack(core: client.CoreV1Api, ns: str) -> None:
    """4 of each rack's 16 GPUs taken, and bound, by default-scheduler pods kbatchd does not
    manage (``blocker-<rack>``): a gang of 16 in one rack fits nowhere until one goes."""
    hosts = {"b0-r0": "b0-r0-h0", "b0-r1": "b0-r1-h1"}
    for rack, host in hosts.items():
        await core.create_namespaced_pod(ns, blocker(f"blocker-{rack}", host, 4))

    async def blockers_bound() -> bool:
        pods = [await core.read_namespaced_pod(f"blocker-{r}", ns) for r in hosts]
        return all(p.spec.node_name for p in pods)

    await eventually(blockers_bound, within=30, what="the blockers bound")


def member(name: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": "kbatchd",
            "schedulingGroup": {"podGroupName": group},
            "containers": [{"name": "main", "image": "busybox", "resources": gpus_of(1)}],
        },
    }


# A Workload whose one group of 16 must fit in one rack, and that group.
WORKLOAD: dict[str, Any] = {
    "apiVersion": "scheduling.k8s.io/v1alpha2",
    "kind": "Workload",
    "metadata": {"name": "train"},
    "spec": {
        "podGroupTemplates": [
            {
                "name": "main",
                "schedulingPolicy": {"gang": {"minCount": 16}},
                "schedulingConstraints": {"topology": [{"key": RACK}]},
            }
        ]
    },
}
POD_GROUP: dict[str, Any] = {
    "apiVersion": "scheduling.k8s.io/v1alpha2",
    "kind": "PodGroup",
    "metadata": {"name": "train-main"},
    "spec": {
        "podGroupTemplateRef": {
            "workload": {"workloadName": "train", "podGroupTemplateName": "main"}
        },
        "schedulingPolicy": {"gang": {"minCount": 16}},
        "schedulingConstraints": {"topology": [{"key": RACK}]},
    },
}


def template_ref(version: str, workload: str, template: str) -> dict[str, Any]:
    """The PodGroup spec field naming its Workload template: `workloadRef` in v1beta1 (1.37),
    `podGroupTemplateRef` in v1alpha2 (1.36)."""
    if version == "v1alpha2":
        ref = {"workloadName": workload, "podGroupTemplateName": template}
        return {"podGroupTemplateRef": {"workload": ref}}
    return {"workloadRef": {"workloadName": workload, "templateName": template}}


def gang_objects(version: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """WORKLOAD and POD_GROUP at a scheduling.k8s.io version: copies, deep ones (a server in
    the test's process, the simulated cluster's registry, fills in the metadata it is given)."""
    workload = {**copy.deepcopy(WORKLOAD), "apiVersion": f"scheduling.k8s.io/{version}"}
    group = {**copy.deepcopy(POD_GROUP), "apiVersion": f"scheduling.k8s.io/{version}"}
    spec = {k: v for k, v in POD_GROUP["spec"].items() if k != "podGroupTemplateRef"}
    group["spec"] = {**spec, **template_ref(version, "train", "main")}
    return workload, group


def scheduled(group: dict[str, Any]) -> dict[str, Any]:
    for condition in (group.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodGroupScheduled":
            return dict(condition)
    return {}


async def test_a_gang_requiring_one_rack_waits_for_a_whole_rack_then_binds_into_it(
    tmp_path: Path, backend: str
) -> None:
    async with (
        on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        ns = cluster.namespace
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        group, version = "scheduling.k8s.io", cluster.scheduling_version
        workload, pod_group = gang_objects(version)
        await occupy_every_rack(core, ns)

        await custom.create_namespaced_custom_object(group, version, ns, "workloads", workload)
        await custom.create_namespaced_custom_object(group, version, ns, "podgroups", pod_group)
        names = [f"train-{i:02d}" for i in range(16)]
        for name in names:
            await core.create_namespaced_pod(ns, member(name, "train-main"))

        async def group_condition() -> dict[str, Any]:
            found = await custom.get_namespaced_custom_object(
                group, version, ns, "podgroups", "train-main"
            )
            return scheduled(found)

        async def unschedulable() -> dict[str, Any] | None:
            condition = await group_condition()
            message = condition.get("message", "")
            return condition if message.startswith("InsufficientRoom") else None

        condition = await eventually(unschedulable, within=30, what="PodGroupScheduled=False")
        assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
        assert condition["message"] == (
            f"InsufficientRoom: 16 pod(s) request nvidia.com/gpu 16 (12 free) in any one {RACK}"
        )
        members = (
            await core.list_namespaced_pod(ns, field_selector="spec.schedulerName=kbatchd")
        ).items
        assert len(members) == 16
        assert not [p.metadata.name for p in members if p.spec.node_name], "a partial gang bound"

        await core.delete_namespaced_pod("blocker-b0-r1", ns, grace_period_seconds=0)

        async def all_bound() -> list[Any] | None:
            pods = [await core.read_namespaced_pod(name, ns) for name in names]
            return pods if all(p.spec.node_name for p in pods) else None

        bound = await eventually(all_bound, within=30, what="all 16 members bound")
        racks = set()
        for pod in bound:
            node = await core.read_node(pod.spec.node_name)
            racks.add(node.metadata.labels[RACK])
        assert racks == {"b0-r1"}
        condition = await group_condition()
        assert (condition["status"], condition["reason"]) == ("True", "Scheduled")


async def test_requests_cut_without_an_answer_still_bind_the_gang_whole_into_one_rack(
    tmp_path: Path,
) -> None:
    """A quarter of the daemon's API requests get no answer: cut before the server acts on
    them, or after (a bind done, its answer lost; retried, the bind is refused as already
    made, which is done, not failed). The gang still ends up bound, each member by one bind,
    all in one rack, and the log re-decides to the same decisions."""
    workloads = by_kind(WORKLOAD["apiVersion"], "Workload")
    groups = by_kind(POD_GROUP["apiVersion"], "PodGroup")
    assert workloads is not None
    assert groups is not None
    names = [f"train-{i:02d}" for i in range(16)]
    async with SimCluster.start(topology=TOPOLOGY, seed=11) as sim:
        assert sim.kubeconfig_path is not None
        config = daemon_config(tmp_path, sim.kubeconfig_path)
        async with running_daemon(config) as daemon:
            sim.faults.set(drop_request=0.25)
            sim.registry.create(workloads, NS, copy.deepcopy(WORKLOAD))
            sim.registry.create(groups, NS, copy.deepcopy(POD_GROUP))
            for name in names:
                sim.registry.create(PODS, NS, member(name, "train-main"))

            async def scheduled_and_bound() -> list[str] | None:
                condition = scheduled(sim.get(groups, NS, "train-main") or {})
                pods = [sim.get(PODS, NS, name) or {} for name in names]
                nodes = [str(pod.get("spec", {}).get("nodeName") or "") for pod in pods]
                return nodes if condition.get("status") == "True" and all(nodes) else None

            nodes = await eventually(
                scheduled_and_bound, within=30, what="PodGroupScheduled=True, 16 members bound"
            )
            sim.faults.clear()
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=10) == 0
        racks = {(sim.get(NODES, "", node) or {})["metadata"]["labels"][RACK] for node in nodes}
        assert len(racks) == 1
    events = [event for _, event in await logged_events(tmp_path / "kbatchd.db")]
    assert [e for e in events if isinstance(e, Outcome) and not e.ok] == []
    binds = [
        i.name for e in events if isinstance(e, Decided) for i in e.intents if isinstance(i, Bind)
    ]
    assert sorted(binds) == names
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


def leader_workers(version: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A Workload of a 1-pod leader group and a 3-pod worker group, both inside one rack, and
    its two PodGroups, at a scheduling.k8s.io version."""
    templates = [
        {
            "name": name,
            "schedulingPolicy": {"gang": {"minCount": count}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
        }
        for name, count in (("leader", 1), ("workers", 3))
    ]
    workload = {
        "apiVersion": f"scheduling.k8s.io/{version}",
        "kind": "Workload",
        "metadata": {"name": "serve"},
        "spec": {"podGroupTemplates": templates},
    }
    groups = []
    for template in templates:
        name = str(template["name"])
        spec: dict[str, Any] = {
            "schedulingPolicy": template["schedulingPolicy"],
            "schedulingConstraints": template["schedulingConstraints"],
            **template_ref(version, "serve", name),
        }
        groups.append(
            {
                "apiVersion": workload["apiVersion"],
                "kind": "PodGroup",
                "metadata": {"name": f"serve-{name}"},
                "spec": spec,
            }
        )
    return workload, groups


async def test_the_leader_group_is_bound_first_and_workers_join_its_rack(
    tmp_path: Path, backend: str
) -> None:
    async with (
        on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        ns = cluster.namespace
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        version = cluster.scheduling_version
        workload, groups = leader_workers(version)
        await custom.create_namespaced_custom_object(
            "scheduling.k8s.io", version, ns, "workloads", workload
        )
        for group in groups:
            await custom.create_namespaced_custom_object(
                "scheduling.k8s.io", version, ns, "podgroups", group
            )
        # Workers first: they must still wait for their leader.
        names = ["serve-workers-0", "serve-workers-1", "serve-workers-2", "serve-leader-0"]
        for name in names:
            await core.create_namespaced_pod(ns, member(name, name.rsplit("-", 1)[0]))

        async def all_running() -> list[Any] | None:
            pods = [await core.read_namespaced_pod(name, ns) for name in names]
            return pods if all(p.status.phase == "Running" for p in pods) else None

        pods = await eventually(all_running, within=60, what="leader and workers running")
        racks = set()
        for pod in pods:
            node = await core.read_node(pod.spec.node_name)
            racks.add(node.metadata.labels[RACK])
        assert len(racks) == 1, racks
    events = await logged_events(tmp_path / "kbatchd.db")
    binds = [
        (seq, i.name)
        for seq, e in events
        if isinstance(e, Decided)
        for i in e.intents
        if isinstance(i, Bind)
    ]
    assert binds[0][1] == "serve-leader-0"
    assert sorted(name for _, name in binds[1:]) == names[:3]
    leader_running = next(
        seq
        for seq, e in events
        if isinstance(e, Observed) and e.name == "serve-leader-0" and e.obj.phase == "Running"
    )
    assert all(seq > leader_running for seq, _ in binds[1:]), "workers bound before the leader ran"


RATIO = "prefill=1,decode=3"


async def test_role_ratio_units_are_admitted_whole_and_each_shares_a_rack(
    tmp_path: Path, backend: str
) -> None:
    """prefill:decode = 1:3 with 2 prefill and 7 decode pods: two whole units, each unit's
    pods in one rack; the seventh decode pod makes no unit and waits."""
    async with (
        on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        ns, version = cluster.namespace, cluster.scheduling_version
        cluster_version = f"scheduling.k8s.io/{version}"
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        templates = [
            {"name": role, "schedulingPolicy": {"gang": {"minCount": count}}}
            for role, count in (("prefill", 1), ("decode", 3))
        ]
        workload = {
            "apiVersion": cluster_version,
            "kind": "Workload",
            "metadata": {
                "name": "llm",
                "annotations": {"kbatchd.dev/role-ratio": "prefill=1,decode=3"},
            },
            "spec": {"podGroupTemplates": templates},
        }
        await custom.create_namespaced_custom_object(
            "scheduling.k8s.io", version, ns, "workloads", workload
        )
        for template in templates:
            role = str(template["name"])
            group = {
                "apiVersion": cluster_version,
                "kind": "PodGroup",
                "metadata": {"name": f"llm-{role}"},
                "spec": {
                    "schedulingPolicy": template["schedulingPolicy"],
                    **template_ref(version, "llm", role),
                },
            }
            await custom.create_namespaced_custom_object(
                "scheduling.k8s.io", version, ns, "podgroups", group
            )
        names = [f"llm-prefill-{i}" for i in range(2)] + [f"llm-decode-{i}" for i in range(7)]
        for name in names:
            await core.create_namespaced_pod(ns, member(name, name.rsplit("-", 1)[0]))

        async def bound() -> dict[str, str] | None:
            pods = [await core.read_namespaced_pod(name, ns) for name in names]
            nodes = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
            return nodes if len(nodes) == 8 else None

        nodes = await eventually(bound, within=60, what="two whole units bound")
        racks: dict[str, dict[str, int]] = {}
        for name, node_name in nodes.items():
            node = await core.read_node(node_name)
            role = name.split("-")[1]
            counts = racks.setdefault(node.metadata.labels[RACK], {"prefill": 0, "decode": 0})
            counts[role] += 1
        # Whole units only, and a unit never spans racks: every rack holds 3 decoders a prefill.
        assert all(c["decode"] == 3 * c["prefill"] for c in racks.values()), racks
        left = [n for n in names if n not in nodes]
        assert len(left) == 1, left
        assert left[0].startswith("llm-decode-"), left
