"""Exclusive placement of a JobSet's child Jobs, default strategy (spec B6): one child Job per
topology domain (rack, node pool, …) within a priority level.

Upstream does this with a pod webhook and a pod reconciler. kbatchd creates the pods of its
Jobs itself, so the Job reconciler shapes each pod as the webhook would before creating it:

- every pod of a JobSet (unless the node-selector strategy is used) gets the label
  `jobset.sigs.k8s.io/priority`, so that only Jobs of the same priority exclude each other;
- the leader (completion index 0) gets a required pod affinity to its own Job's pods and a
  required anti-affinity to other Jobs' pods of the same priority, over the topology key;
- a follower is created only once the leader is bound, with a nodeSelector for the leader's
  domain. Upstream's webhook rejects a follower created too early and the Job controller
  retries; kbatchd holds the follower back instead, which is the same outcome without the
  failing call.

And, as upstream's pod reconciler: when a follower's nodeSelector names another domain than
the one its leader is bound in (a new leader after a failure, say), every follower of the Job
is deleted so it is recreated in the right domain; each first gets the pod condition
`DisruptionTarget=True` reason `ExclusivePlacementViolation`, so that a Job podFailurePolicy
rule can ignore these deletions.

The node-selector strategy (the annotation `alpha.jobset.sigs.k8s.io/node-selector`) needs
nothing here: the JobSet reconciler writes its nodeSelector and toleration into the Job's
template (`jobsetjobs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from daemon.controllers.job.pods import completion_index, is_active
from daemon.controllers.labels import (
    EXCLUSIVE_TOPOLOGY,
    JOB_KEY,
    JOBSET_NAME,
    JOBSET_PREFIX,
    NODE_SELECTOR_STRATEGY,
)
from events.objects import Node, Pod

PRIORITY: Final = JOBSET_PREFIX + "priority"
DISRUPTION_TARGET: Final = "DisruptionTarget"
VIOLATION_REASON: Final = "ExclusivePlacementViolation"
VIOLATION_MESSAGE: Final = "Pod violated JobSet exclusive placement policy"


def shaped(template_meta: dict[str, Any]) -> bool:
    """Whether pods from this template are a JobSet's and shaped here (not the node-selector
    strategy)."""
    notes = template_meta.get("annotations") or {}
    return JOBSET_NAME in notes and NODE_SELECTOR_STRATEGY not in notes


def topology_key(template_meta: dict[str, Any]) -> str | None:
    """The exclusive topology key of the default strategy, None when not used."""
    if not shaped(template_meta):
        return None
    value = (template_meta.get("annotations") or {}).get(EXCLUSIVE_TOPOLOGY)
    return value if isinstance(value, str) and value else None


def priority_label(spec: dict[str, Any]) -> str:
    """The pod's priority as a label value; a negative one as `n<abs>` because a label value
    may not start with `-`. The API server resolves `priorityClassName` only after kbatchd has
    built the pod, so a template naming a class without `priority` reads as 0."""
    priority = spec.get("priority")
    value = priority if isinstance(priority, int) and not isinstance(priority, bool) else 0
    return f"n{-value}" if value < 0 else str(value)


@dataclass(frozen=True)
class Leader:
    """The Job's leader pod as followers see it: the domain it is bound in, or why there is
    none to follow yet."""

    domain: str | None
    waiting: str


def find_leader(pods: list[Pod], nodes: dict[str, Node], cluster: str, key: str) -> Leader:
    """The one active pod of index 0 and the value of `key` on its node (upstream's webhook
    accepts a follower only when there is exactly one)."""
    leaders = [p for p in pods if is_active(p) and completion_index(p) == 0]
    if len(leaders) != 1:
        return Leader(None, f"expected 1 active leader pod (index 0), found {len(leaders)}")
    leader = leaders[0]
    if not leader.node_name:
        return Leader(None, f"leader pod {leader.name} is not bound to a node yet")
    node = nodes.get(f"{cluster}//{leader.node_name}")
    if node is None:
        return Leader(None, f"node {leader.node_name} of leader pod {leader.name} is unknown")
    domain = node.labels.get(key)
    if domain is None:
        return Leader(None, f"node {leader.node_name} has no label {key}")
    return Leader(domain, "")


def shape_pod(
    body: dict[str, Any], index: int | None, key: str | None, leader: Leader | None
) -> bool:
    """Give a pod body what upstream's webhook would; False when it must not be created yet
    (a follower whose leader is not bound)."""
    meta, spec = body["metadata"], body["spec"]
    meta["labels"][PRIORITY] = priority_label(spec)
    if key is None:
        return True
    if index == 0:
        job_key = meta["labels"].get(JOB_KEY, "")
        affinity = spec.setdefault("affinity", {})
        affinity.setdefault("podAffinity", {}).setdefault(
            "requiredDuringSchedulingIgnoredDuringExecution", []
        ).append(
            {
                "labelSelector": {
                    "matchExpressions": [{"key": JOB_KEY, "operator": "In", "values": [job_key]}]
                },
                "topologyKey": key,
                "namespaceSelector": {},
            }
        )
        affinity.setdefault("podAntiAffinity", {}).setdefault(
            "requiredDuringSchedulingIgnoredDuringExecution", []
        ).append(
            {
                "labelSelector": {
                    "matchExpressions": [
                        {"key": JOB_KEY, "operator": "Exists"},
                        {"key": JOB_KEY, "operator": "NotIn", "values": [job_key]},
                        {
                            "key": PRIORITY,
                            "operator": "In",
                            "values": [meta["labels"][PRIORITY]],
                        },
                    ]
                },
                "topologyKey": key,
                "namespaceSelector": {},
            }
        )
        return True
    if leader is None or leader.domain is None:
        return False
    spec["nodeSelector"] = {**(spec.get("nodeSelector") or {}), key: leader.domain}
    return True


def misplaced_followers(pods: list[Pod], key: str, leader: Leader) -> list[Pod]:
    """Every active follower when one of them is sent to another domain than the leader's
    (upstream deletes them all so that they are recreated together); else none."""
    if leader.domain is None:
        return []
    followers = [p for p in pods if is_active(p) and completion_index(p) != 0]
    wrong = any(key in p.node_selector and p.node_selector[key] != leader.domain for p in followers)
    return followers if wrong else []


def disruption_patch(pod: Pod, stamp: str) -> dict[str, Any]:
    """The pod status patch (strategic merge: conditions merge by type) marking a pod about
    to be deleted for a placement violation."""
    return {
        "metadata": {"uid": pod.uid},
        "status": {
            "conditions": [
                {
                    "type": DISRUPTION_TARGET,
                    "status": "True",
                    "reason": VIOLATION_REASON,
                    "message": VIOLATION_MESSAGE,
                    "lastTransitionTime": stamp,
                }
            ]
        },
    }
