"""What a decision's reason says, for `kbatchd replay --explain` and `--timeline`.

Reconcilers write reasons machine-readable first: ``Head: detail`` parts joined by ``"; "``
(`daemon.controllers.base.Decision`). The head decides the category; a reason with several
headed parts (a coordinated Workload's groups, a Job sync's notes) takes the most significant
category among them, in the order of `CATEGORIES`:

==============  ===========================================================================
category        heads
==============  ===========================================================================
preempted       ``Preempt*`` (Preempted, Preempting, PreemptLowerPriority...),
                DisruptionTarget, Disrupted
restarted       ``Restart*`` (RestartInPlace, RestartAllContainers, RestartJobSet...),
                PodsReadyTimeout, LeaderLost, Requeued
admitted        Admitted, Extended, Scheduled, ``Admit*``
not-admitted    NotAdmitted, NotEnoughMembers, BindingsInFlight (older logs), WaitingForLeader,
                WaitingForWorkload, WaitingForPreemption, NotPreempting, InvalidRequest,
                InvalidSpec, SchedulerNameMismatch,
                TopologyPlacementFailed, NodeAssignmentFailed, InsufficientRoom,
                ``*Unschedulable``
finished        CompletionsReached, SuccessPolicy, BackoffLimitExceeded, DeadlineExceeded,
                PodFailurePolicy, MaxFailedIndexesExceeded, FailedIndexes,
                RequeuingLimitExceeded, FailJobSet, Finished, Complete(d), Failed
started         CreatePods, PodsReady
suspended       Suspended
backoff         BackOff, BackingOff
other           anything else (Status, TrackPods, DeletePods, Waiting, ...)
==============  ===========================================================================

A reconciler that adds a head for one of the first three categories should add it here.
Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any, Final

CATEGORIES: Final = (
    "preempted",
    "restarted",
    "admitted",
    "not-admitted",
    "finished",
    "started",
    "suspended",
    "backoff",
    "other",
)

_EXACT: Final = {
    "DisruptionTarget": "preempted",
    "Disrupted": "preempted",
    "WaitingForPreemption": "not-admitted",
    "NotPreempting": "not-admitted",
    "PodsReadyTimeout": "restarted",
    "LeaderLost": "restarted",
    "Requeued": "restarted",
    "Admitted": "admitted",
    "Extended": "admitted",
    "Scheduled": "admitted",
    "NotAdmitted": "not-admitted",
    "NotEnoughMembers": "not-admitted",
    "BindingsInFlight": "not-admitted",
    "WaitingForLeader": "not-admitted",
    "WaitingForWorkload": "not-admitted",
    "InvalidRequest": "not-admitted",
    "InvalidSpec": "not-admitted",
    "SchedulerNameMismatch": "not-admitted",
    "TopologyPlacementFailed": "not-admitted",
    "NodeAssignmentFailed": "not-admitted",
    "InsufficientRoom": "not-admitted",
    "CompletionsReached": "finished",
    "SuccessPolicy": "finished",
    "BackoffLimitExceeded": "finished",
    "DeadlineExceeded": "finished",
    "PodFailurePolicy": "finished",
    "MaxFailedIndexesExceeded": "finished",
    "FailedIndexes": "finished",
    "RequeuingLimitExceeded": "finished",
    "FailJobSet": "finished",
    "Finished": "finished",
    "Complete": "finished",
    "Completed": "finished",
    "Failed": "finished",
    "CreatePods": "started",
    "PodsReady": "started",
    "Suspended": "suspended",
    "BackOff": "backoff",
    "BackingOff": "backoff",
}
# Checked in order after the exact names.
_PREFIXES: Final = (("Preempt", "preempted"), ("Restart", "restarted"), ("Admit", "admitted"))
_SUFFIXES: Final = (("Unschedulable", "not-admitted"),)

_HEAD: Final = re.compile(r"([A-Z][A-Za-z0-9]*)(?::|$)")


def heads(reason: str) -> list[str]:
    """The heads of a reason's parts, in order: ``"CreatePods: x; 1 done"`` → [CreatePods]."""
    found = []
    for part in reason.split("; "):
        match = _HEAD.match(part)
        if match is not None:
            found.append(match[1])
    return found


def category_of_head(head: str) -> str:
    exact = _EXACT.get(head)
    if exact is not None:
        return exact
    for prefix, category in _PREFIXES:
        if head.startswith(prefix):
            return category
    for suffix, category in _SUFFIXES:
        if head.endswith(suffix):
            return category
    return "other"


def categorize(reason: str) -> str:
    """The most significant category of a reason's parts (see the table above)."""
    found = {category_of_head(head) for head in heads(reason)}
    return next((c for c in CATEGORIES if c in found), "other")


# ---------------------------------------------------------------------------------------------
# Placement details: the numbers inside a "not admitted" reason (Kueue's wording, see
# daemon.placement.reasons), pulled out so that --explain can state them and --json carries them.

_LEVEL: Final = re.compile(r"\b(required|preferred) ([^\s:;,]+)")
_FIT_ONLY: Final = re.compile(r"allows to fit only (\d+) out of (\d+) (pod|slice)\(s\)")
_FIT_NONE: Final = re.compile(r"doesn't allow to fit any of (\d+) (pod|slice)\(s\)")
_LAYER: Final = re.compile(r"(\d+)/(\d+) slice\(s\) fit on level ([^\s;.,]+)")
_UNITS: Final = re.compile(r"only (\d+) of (\d+) unit\(s\) of .* fit, each within one ([^\s;,]+)")
_NODE: Final = re.compile(r"(\d+) of (\d+) pod\(s\) for domain (\S+) fit on no single node")
_MEMBERS: Final = re.compile(r"NotEnoughMembers: (\d+) of minCount (\d+)")
_EXCLUDED: Final = re.compile(r'(resource|taint) "([^"]+)": (\d+)')
_SELECTOR: Final = re.compile(r"nodeSelector: (\d+)")
_TOTAL: Final = re.compile(r"Total nodes: (\d+)")


def placement(reason: str) -> dict[str, Any] | None:
    """What a not-admitted reason says about placement: the level asked for, how many pods
    (or slices, or units) fit of how many, and how many nodes each resource, taint or node
    selector excluded. None when the reason says none of it."""
    found: dict[str, Any] = {}
    if (match := _LEVEL.search(reason)) is not None:
        found["mode"], found["level"] = match[1], match[2]
    if (match := _FIT_ONLY.search(reason)) is not None:
        found |= {"fit": int(match[1]), "needed": int(match[2]), "unit": match[3]}
    elif (match := _FIT_NONE.search(reason)) is not None:
        found |= {"fit": 0, "needed": int(match[1]), "unit": match[2]}
    elif (match := _UNITS.search(reason)) is not None:
        found |= {"fit": int(match[1]), "needed": int(match[2]), "unit": "unit"}
        found["level"] = match[3]
    elif (match := _NODE.search(reason)) is not None:
        needed = int(match[2])
        found |= {"fit": needed - int(match[1]), "needed": needed, "unit": "pod"}
        found["domain"] = match[3]
    elif (match := _MEMBERS.search(reason)) is not None:
        found |= {"members": int(match[1]), "min_count": int(match[2])}
    layers = [
        {"level": level, "fit": int(fit), "needed": int(needed)}
        for fit, needed, level in _LAYER.findall(reason)
    ]
    if layers:
        found["layers"] = layers
    excluded: dict[str, int] = {}
    for what, name, count in _EXCLUDED.findall(reason):
        excluded[f"{what} {name}"] = int(count)
    if (match := _SELECTOR.search(reason)) is not None:
        excluded["nodeSelector"] = int(match[1])
    if excluded:
        found["excluded_nodes"] = excluded
    if (match := _TOTAL.search(reason)) is not None:
        found["total_nodes"] = int(match[1])
    return found or None


def render_placement(found: dict[str, Any]) -> str:
    """One line: ``at level rack (required): 3 of 4 pod(s) fit; nodes excluded ...``."""
    parts = []
    if "needed" in found:
        parts.append(f"{found['fit']} of {found['needed']} {found['unit']}(s) fit")
    if "domain" in found:
        parts.append(f"in domain {found['domain']}")
    if "min_count" in found:
        parts.append(f"{found['members']} member(s) of minCount {found['min_count']}")
    parts.extend(
        f"{layer['fit']} of {layer['needed']} slice(s) fit on level {layer['level']}"
        for layer in found.get("layers", ())
    )
    excluded = found.get("excluded_nodes")
    if excluded:
        total = f" of {found['total_nodes']}" if "total_nodes" in found else ""
        items = ", ".join(f"{count} by {what}" for what, count in excluded.items())
        parts.append(f"nodes excluded{total}: {items}")
    text = "; ".join(parts)
    if "level" in found:
        mode = f" ({found['mode']})" if "mode" in found else ""
        text = f"at level {found['level']}{mode}" + (f": {text}" if text else "")
    return text
