"""Topology-aware placement: Kueue's TAS algorithms as a pure library.

Nodes with labels and free capacity plus pod set requests go in; a topology assignment per
pod set (Kueue's ``levels`` / ``domains`` shape) or a machine-readable reason comes out. The
gang admission reconciler and ``kbatchd place`` both call `place`.
"""

from __future__ import annotations

from daemon.placement.model import (
    ALGORITHMS,
    HOSTNAME_LABEL,
    Algorithm,
    Domain,
    NodeInfo,
    PlacementResult,
    PodSetRequest,
    Taint,
    Toleration,
    TopologyAssignment,
)
from daemon.placement.place import place, place_on
from daemon.placement.tree import Topology, build_topology

__all__ = [
    "ALGORITHMS",
    "HOSTNAME_LABEL",
    "Algorithm",
    "Domain",
    "NodeInfo",
    "PlacementResult",
    "PodSetRequest",
    "Taint",
    "Toleration",
    "Topology",
    "TopologyAssignment",
    "build_topology",
    "place",
    "place_on",
]
