"""Builders for the gang reconciler tests: nodes from the simulated cluster's topology
generator, PodGroups and Workloads in the API's JSON shape (decoded by the real decoder), slim
member pods, and readers of the decisions (what they bind, delete and write)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from daemon.controllers.base import Decision
from daemon.controllers.gang.reconciler import GangReconciler
from daemon.sim import topology as sim_topology
from events.intents import Bind, Delete, Patch
from events.objects import (
    CompositePodGroup,
    Node,
    Pod,
    PodGroup,
    Workload,
    decode_object_dict,
)
from events.quantity import resource_map
from events.topology import DEFAULT_LEVELS

CLUSTER: Final = "c1"
NS: Final = "ns"
T0: Final = 1_767_225_600_000  # 2026-01-01T00:00:00Z
SECOND: Final = 1000
GPU: Final = "nvidia.com/gpu"
BLOCK, RACK, HOST = DEFAULT_LEVELS
SCHEDULER: Final = "kbatchd"

REC: Final = GangReconciler(
    ready_timeout_ms=60 * SECOND, backoff_base_ms=10 * SECOND, backoff_max_ms=80 * SECOND
)


def nodes(spec: str = "blocks=1,racks=2,hosts=2,gpus=8") -> list[Node]:
    """Nodes as `kbatchd sim --topology SPEC` registers them (``b0-r1-h0`` in rack ``b0-r1``)."""
    found = []
    for raw in sim_topology.generate(spec):
        node = decode_object_dict("Node", raw)
        assert isinstance(node, Node)
        found.append(node)
    return found


def _metadata(name: str, annotations: dict[str, str] | None) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": NS,
        "uid": f"uid-{name}",
        "resourceVersion": "1",
        "annotations": annotations or {},
    }


def podgroup(
    name: str,
    min_count: int | None = 1,
    *,
    topology_key: str | None = None,
    workload: str | None = None,
    template: str | None = None,
    conditions: list[dict[str, Any]] | None = None,
    annotations: dict[str, str] | None = None,
    priority: int | None = None,
    disruption: str | dict[str, Any] | None = None,
    preemption: str | None = None,
    parent: str | None = None,
) -> PodGroup:
    """A PodGroup; made from `workload`'s `template` (v1alpha2's reference, or v1beta1's when
    it is the child of the CompositePodGroup `parent`)."""
    spec: dict[str, Any] = {
        "schedulingPolicy": {"gang": {"minCount": min_count}} if min_count else {"basic": {}}
    }
    for field, value in (
        ("priority", priority),
        ("disruptionMode", disruption),
        ("preemptionPolicy", preemption),
    ):
        if value is not None:
            spec[field] = value
    if topology_key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
        spec["workloadRef"] = {"workloadName": workload, "templateName": template or name}
    elif workload is not None:
        spec["podGroupTemplateRef"] = {
            "workload": {"workloadName": workload, "podGroupTemplateName": template or name}
        }
    raw = {
        "metadata": {**_metadata(name, annotations), "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": spec,
        "status": {"conditions": conditions} if conditions else {},
    }
    group = decode_object_dict("PodGroup", raw)
    assert isinstance(group, PodGroup)
    return group


def workload(
    name: str, templates: Sequence[str], annotations: dict[str, str] | None = None
) -> Workload:
    raw = {
        "metadata": _metadata(name, annotations),
        "spec": {
            "podGroupTemplates": [
                {"name": t, "schedulingPolicy": {"gang": {"minCount": 1}}} for t in templates
            ]
        },
    }
    found = decode_object_dict("Workload", raw)
    assert isinstance(found, Workload)
    return found


def composite_workload(
    name: str, templates: Sequence[str], annotations: dict[str, str] | None = None
) -> Workload:
    """A v1beta1 Workload whose one composite template ``set`` holds `templates`."""
    children = [{"name": t, "schedulingPolicy": {"gang": {"minCount": 1}}} for t in templates]
    raw = {
        "metadata": _metadata(name, annotations),
        "spec": {
            "compositePodGroupTemplates": [
                {
                    "name": "set",
                    "schedulingPolicy": {"gang": {"minGroupCount": len(templates)}},
                    "podGroupTemplates": children,
                }
            ]
        },
    }
    found = decode_object_dict("Workload", raw)
    assert isinstance(found, Workload)
    return found


def composite(
    name: str, min_groups: int | None, workload: str, topology_key: str | None = None
) -> CompositePodGroup:
    spec: dict[str, Any] = {
        "workloadRef": {"workloadName": workload, "templateName": "set"},
        "schedulingPolicy": {"gang": {"minGroupCount": min_groups}}
        if min_groups
        else {"basic": {}},
    }
    if topology_key is not None:
        spec["schedulingConstraints"] = {"topology": [{"key": topology_key}]}
    found = decode_object_dict(
        "CompositePodGroup", {"metadata": _metadata(name, None), "spec": spec}
    )
    assert isinstance(found, CompositePodGroup)
    return found


def member(
    name: str,
    group: str,
    *,
    gpus: int = 1,
    node: str = "",
    phase: str = "Pending",
    ready: bool = False,
    scheduler: str = SCHEDULER,
    annotations: dict[str, str] | None = None,
    gates: tuple[str, ...] = (),
    cpu: str = "1",
    priority: int = 0,
) -> Pod:
    requests = resource_map({"cpu": cpu, GPU: gpus} if gpus else {"cpu": cpu})
    return Pod(
        name=name,
        namespace=NS,
        uid=f"uid-{name}",
        rv="1",
        created=T0,
        annotations=dict(annotations or {}),
        node_name=node,
        scheduler_name=scheduler,
        pod_group=group,
        requests=requests,
        scheduling_gates=gates,
        phase=phase,
        conditions={"Ready": "True" if ready else "False"},
        priority=priority,
    )


def members(group: str, count: int, prefix: str | None = None, **kwargs: Any) -> list[Pod]:
    return [member(f"{prefix or group}-{i:02d}", group, **kwargs) for i in range(count)]


def running(
    name: str, node: str, gpus: int, priority: int = 0, group: str = "", namespace: str = NS
) -> Pod:
    """A pod of `priority` running on `node` with `gpus`: kbatchd's member of `group`, or
    without one a pod of the default scheduler."""
    return Pod(
        name=name,
        namespace=namespace,
        uid=f"uid-{name}",
        rv="1",
        created=T0,
        node_name=node,
        scheduler_name=SCHEDULER if group else "default-scheduler",
        pod_group=group,
        priority=priority,
        requests=resource_map({GPU: gpus}),
        phase="Running",
        conditions={"Ready": "True"},
    )


def blocker(name: str, node: str, gpus: int) -> Pod:
    """A pod of the default scheduler already running on `node` (not kbatchd's)."""
    return running(name, node, gpus, namespace="other")


def key(name: str, kind: str = "PodGroup") -> str:
    return f"{kind}/{CLUSTER}/{NS}/{name}"


def binds(decision: Decision | None) -> dict[str, str]:
    assert decision is not None
    return {i.name: i.node for i in decision.intents if isinstance(i, Bind)}


def deletes(decision: Decision | None) -> list[str]:
    assert decision is not None
    return sorted(i.name for i in decision.intents if isinstance(i, Delete))


def status_conditions(decision: Decision | None, group: str) -> dict[str, dict[str, Any]]:
    """The conditions a decision writes to `group`, by type."""
    assert decision is not None
    found: dict[str, dict[str, Any]] = {}
    for intent in decision.intents:
        if (
            isinstance(intent, Patch)
            and intent.subresource == "status"
            and intent.name == group
            and isinstance(intent.patch, dict)
        ):
            for item in intent.patch["status"]["conditions"]:
                found[item["type"]] = item
    return found
