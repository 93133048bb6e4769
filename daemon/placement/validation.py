"""Request shapes that are malformed rather than unplaceable: what Kueue's CEL rules and its
job validation (`tas_validation.go`) reject before placement ever runs, plus kbatchd's rule
that a slice layer's size must divide the pod count (TAS spec 3.3, "Observation")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

from daemon.placement.counts import MAX_PODS
from daemon.placement.model import HOSTNAME_LABEL, PodSetRequest

MAX_LEVELS: Final = 16
MAX_SLICE_LAYERS: Final = 3


class Problem(msgspec.Struct, frozen=True):
    """What is wrong, where: `pod_set` is an index into the pod sets (None for the levels),
    `field` the request field (camelCase, as in a request file)."""

    field: str
    message: str
    pod_set: int | None = None


def level_problem(levels: Sequence[str]) -> Problem | None:
    if not 1 <= len(levels) <= MAX_LEVELS:
        return Problem("levels", f"1 to {MAX_LEVELS} levels required, got {len(levels)}")
    seen: set[str] = set()
    for index, level in enumerate(levels):
        if not level:
            return Problem(f"levels[{index}]", "empty level")
        if level in seen:
            return Problem(f"levels[{index}]", f"duplicate level {level!r}")
        seen.add(level)
        if level == HOSTNAME_LABEL and index != len(levels) - 1:
            return Problem(f"levels[{index}]", f"{HOSTNAME_LABEL} may only be the last level")
    return None


def pod_set_problem(index: int, pod_set: PodSetRequest) -> Problem | None:
    def problem(field: str, message: str) -> Problem:
        return Problem(field, message, index)

    if not pod_set.name:
        return problem("name", "empty pod set name")
    if not 0 <= pod_set.count <= MAX_PODS:
        return problem("count", f"must be between 0 and {MAX_PODS}, got {pod_set.count}")
    for name, amount in pod_set.requests.items():
        if amount < 0:
            return problem(f"requests.{name}", f"negative request {amount}")
    modes = [
        field
        for field, chosen in (
            ("required", pod_set.required is not None),
            ("preferred", pod_set.preferred is not None),
            ("unconstrained", pod_set.unconstrained),
        )
        if chosen
    ]
    if len(modes) > 1:
        return problem(modes[1], f"{' and '.join(modes)} are mutually exclusive")
    layers = pod_set.slice_layers
    if pod_set.implied and (modes or layers):
        # Kueue implies TAS only for a pod set without any topology request.
        return problem(
            "implied", "an implied request has no required, preferred, unconstrained or slices"
        )
    if len(layers) > MAX_SLICE_LAYERS:
        return problem("sliceLayers", f"1 to {MAX_SLICE_LAYERS} layers allowed, got {len(layers)}")
    if layers and layers[0][1] > 0 and pod_set.count % layers[0][1]:
        return problem(
            "count", f"{pod_set.count} is not a multiple of the slice size {layers[0][1]}"
        )
    return None


def group_problem(pod_sets: Sequence[PodSetRequest]) -> Problem | None:
    """A group is a leader and its workers: exactly two pod sets, one of them a single pod
    (the leader), both asking for the same required or preferred level."""
    members: dict[str, list[int]] = {}
    for index, pod_set in enumerate(pod_sets):
        if pod_set.group is not None:
            members.setdefault(pod_set.group, []).append(index)
    for name, indexes in members.items():
        last = indexes[-1]
        if len(indexes) != 2:
            return Problem(
                "group",
                f"group {name!r} has {len(indexes)} pod set(s); leader + workers needs exactly 2",
                last,
            )
        first, second = (pod_sets[i] for i in indexes)
        if min(first.count, second.count) != 1:
            return Problem("group", f"group {name!r} needs a leader pod set with count 1", last)
        if (first.required, first.preferred) != (second.required, second.preferred):
            return Problem(
                "group",
                f"group {name!r}: both pod sets must request the same required or preferred level",
                last,
            )
    return None


def first_problem(levels: Sequence[str], pod_sets: Sequence[PodSetRequest]) -> Problem | None:
    problem = level_problem(levels)
    if problem is not None:
        return problem
    names: set[str] = set()
    for index, pod_set in enumerate(pod_sets):
        problem = pod_set_problem(index, pod_set)
        if problem is not None:
            return problem
        if pod_set.name in names:
            return Problem("name", f"duplicate pod set name {pod_set.name!r}", index)
        names.add(pod_set.name)
    return group_problem(pod_sets)
