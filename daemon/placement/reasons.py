"""Failure reasons, in Kueue's wording (TAS spec sections 3.3 and 12).

Kueue starts its fit messages with ``topology "<name>"``; a what-if request has no topology
name, so that prefix is left out and the message starts at the verb. Everything after it is
Kueue's text, numbers and exclusion suffix included, so the reasons stay machine-readable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

LEVEL_NOT_SPECIFIED: Final = "topology level not specified"
SLICE_SIZE_NOT_PROVIDED: Final = "slice topology requested, but slice size not provided"


def no_level(level: str) -> str:
    return f"no requested topology level: {level}"


def no_slice_level(level: str) -> str:
    return f"no requested topology level for slices: {level}"


def slice_above_level(slice_level: str, level: str) -> str:
    return f"podset slice topology {slice_level} is above the podset topology {level}"


def no_layer_level(level: str) -> str:
    return f"no requested topology level for additional slice layer: {level}"


def layer_not_lower(level: str, previous: str) -> str:
    return f"additional slice layer topology {level} must be at a lower level than {previous}"


def layer_not_dividing(size: int, parent_size: int) -> str:
    return f"additional slice layer size {size} must evenly divide parent layer size {parent_size}"


def no_domains(level: str) -> str:
    return f"no topology domains at level: {level}"


def incomplete(level: str) -> str:
    """kbatchd's own: a distribution step ran out of room (Kueue logs and admits nothing)."""
    return f"assignment could not be completed at level: {level}"


class Exclusions:
    """Why leaves could not take a single pod, for the ``Total nodes`` suffix."""

    __slots__ = ("node_selector", "resources", "taints", "total")

    def __init__(self, total: int) -> None:
        self.total = total
        self.node_selector = 0
        self.taints: dict[str, int] = {}
        self.resources: dict[str, int] = {}

    def add_taint(self, taint: str) -> None:
        self.taints[taint] = self.taints.get(taint, 0) + 1

    def add_resource(self, resource: str) -> None:
        self.resources[resource] = self.resources.get(resource, 0) + 1

    def remove_resource(self, resource: str) -> None:
        left = self.resources[resource] - 1
        if left:
            self.resources[resource] = left
        else:
            del self.resources[resource]

    def copy(self) -> Exclusions:
        clone = Exclusions(self.total)
        clone.node_selector = self.node_selector
        clone.taints = dict(self.taints)
        clone.resources = dict(self.resources)
        return clone

    def suffix(self) -> str:
        items: list[str] = []
        if self.node_selector:
            items.append(f"nodeSelector: {self.node_selector}")
        items.extend(f'taint "{taint}": {count}' for taint, count in self.taints.items())
        items.extend(f'resource "{name}": {count}' for name, count in self.resources.items())
        if not items:
            return ""
        return f". Total nodes: {self.total}; excluded: {', '.join(sorted(items))}"


def not_fit(fit: int, needed: int, slice_size: int, exclusions: Exclusions) -> str:
    """``allows to fit only K out of N pod(s)`` or ``doesn't allow to fit any of N ...``;
    slices instead of pods when the slice size is above 1."""
    unit = "pod" if slice_size == 1 else "slice"
    if fit == 0:
        head = f"doesn't allow to fit any of {needed} {unit}(s)"
    else:
        head = f"allows to fit only {fit} out of {needed} {unit}(s)"
    return head + exclusions.suffix()


def multi_layer_not_fit(layers: Sequence[tuple[str, int, int]], exclusions: Exclusions) -> str:
    """Per-layer message: `layers` holds (level label, slices that fit, slices needed)."""
    parts = "".join(
        f"; {fit}/{needed} slice(s) fit on level {level}" for level, fit, needed in layers
    )
    return "doesn't allow to fit" + parts + exclusions.suffix()
