"""What the stand-in scheduler and kubelet admission know about nodes: capacity in canonical
units, what pods request, taints, selectors and required node affinity."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
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


def _terms(spec: Obj, kind: str) -> list[Obj]:
    affinity = (spec.get("affinity") or {}).get(kind) or {}
    return [t for t in affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or ()]


def _term_matches(term: Obj, own_namespace: str, pod: Obj) -> bool:
    """Whether a pod is one the term selects: its label selector, in the term's namespaces
    (an empty namespaceSelector is every namespace; neither field: the incoming pod's)."""
    meta = pod.get("metadata") or {}
    namespaces = term.get("namespaces") or []
    if term.get("namespaceSelector") != {}:
        allowed = namespaces or [own_namespace]
        if meta.get("namespace") not in allowed:
            return False
    return selector_matches(term.get("labelSelector"), meta.get("labels") or {})


def pod_affinity_ok(
    pod: Obj,
    node: NodeInfo,
    nodes: Iterable[NodeInfo],
    lookup: Callable[[str], Obj | None],
) -> bool:
    """Required inter-pod affinity and anti-affinity: for each term, the domain is every node
    sharing the candidate node's value of the term's topologyKey, and the pods that count are
    the unfinished pods bound there. As kube-scheduler does, an affinity term that no pod in
    the cluster matches is satisfied by a pod that matches it itself (the first of a group)."""
    spec = pod.get("spec") or {}
    affinity, anti = _terms(spec, "podAffinity"), _terms(spec, "podAntiAffinity")
    if not affinity and not anti:
        return True
    namespace = (pod.get("metadata") or {}).get("namespace") or ""
    everywhere = list(nodes)

    def bound(infos: Iterable[NodeInfo]) -> Iterable[Obj]:
        for info in infos:
            for key in info.pods:
                other = lookup(key)
                phase = ((other or {}).get("status") or {}).get("phase")
                if other is not None and phase not in ("Succeeded", "Failed"):
                    yield other

    def domain(key: str, value: str) -> list[NodeInfo]:
        return [n for n in everywhere if n.labels.get(key) == value]

    for term in anti:
        key = term.get("topologyKey") or ""
        value = node.labels.get(key)
        if value is None:
            continue
        if any(_term_matches(term, namespace, o) for o in bound(domain(key, value))):
            return False
    for term in affinity:
        key = term.get("topologyKey") or ""
        value = node.labels.get(key)
        if value is None:
            return False
        if any(_term_matches(term, namespace, o) for o in bound(domain(key, value))):
            continue
        alone = not any(_term_matches(term, namespace, o) for o in bound(everywhere))
        if not (alone and _term_matches(term, namespace, pod)):
            return False
    return True
