"""What the stand-in scheduler and kubelet admission know about nodes: capacity in canonical
units, what pods request, taints, selectors and required node affinity."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from daemon.sim.selectors import selector_matches
from events.quantity import QuantityError, to_units

Obj = dict[str, Any]


def quantities(raw: Any) -> dict[str, int]:
    result: dict[str, int] = {}
    if not isinstance(raw, dict):
        return result
    for name, value in raw.items():
        with contextlib.suppress(QuantityError, TypeError):
            result[name] = to_units(name, value)
    return result


def pod_requests(spec: Obj) -> dict[str, int]:
    """What the scheduler counts: app containers (plus sidecars) or the largest init
    container, whichever is larger, plus the pod itself."""
    total: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        requests = quantities((container.get("resources") or {}).get("requests"))
        if container.get("restartPolicy") == "Always":
            for k, v in requests.items():
                total[k] = total.get(k, 0) + v
        else:
            for k, v in requests.items():
                init_peak[k] = max(init_peak.get(k, 0), v)
    for container in spec.get("containers") or ():
        for k, v in quantities((container.get("resources") or {}).get("requests")).items():
            total[k] = total.get(k, 0) + v
    for k, v in init_peak.items():
        total[k] = max(total.get(k, 0), v)
    total["pods"] = 1
    return total


@dataclass
class NodeInfo:
    name: str
    labels: dict[str, str]
    allocatable: dict[str, int]
    taints: list[dict[str, Any]]
    ready: bool
    unschedulable: bool
    used: dict[str, int] = field(default_factory=dict)
    pods: set[str] = field(default_factory=set)  # keys of pods bound here
    # The kubelet's admission counts only the pods it already admitted (Running ones): kept
    # here as they change so that admitting one pod does not look at every other.
    running: set[str] = field(default_factory=set)
    running_used: dict[str, int] = field(default_factory=dict)


def node_info(obj: Obj, old: NodeInfo | None) -> NodeInfo:
    status = obj.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )
    info = NodeInfo(
        name=obj["metadata"]["name"],
        labels=dict(obj["metadata"].get("labels") or {}),
        allocatable=quantities(status.get("allocatable")),
        taints=list((obj.get("spec") or {}).get("taints") or ()),
        ready=ready,
        unschedulable=bool((obj.get("spec") or {}).get("unschedulable")),
    )
    if old is not None:
        info.used, info.pods = old.used, old.pods
        info.running, info.running_used = old.running, old.running_used
    return info


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("operator") == "Exists":
            if not t.get("key") or t.get("key") == taint.get("key"):
                return True
        elif t.get("key") == taint.get("key") and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def affinity_ok(spec: Obj, labels: dict[str, str]) -> bool:
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    if not terms:
        return True
    for term in terms:
        expressions = term.get("matchExpressions") or []
        if selector_matches({"matchExpressions": expressions}, labels):
            return True
    return False


def fits(info: NodeInfo, spec: Obj, requests: dict[str, int]) -> bool:
    """Whether a pod may go to a node: ready, schedulable, taints tolerated, selector and
    required node affinity matched, and room for its requests."""
    if not info.ready or info.unschedulable:
        return False
    tolerations = spec.get("tolerations") or []
    for taint in info.taints:
        if taint.get("effect") in ("NoSchedule", "NoExecute") and not tolerates(tolerations, taint):
            return False
    for k, v in (spec.get("nodeSelector") or {}).items():
        if info.labels.get(k) != v:
            return False
    if not affinity_ok(spec, info.labels):
        return False
    return all(info.used.get(k, 0) + v <= info.allocatable.get(k, 0) for k, v in requests.items())
