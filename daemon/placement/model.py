"""What goes into a placement and what comes out of it.

Quantities are canonical integers (`events.quantity.to_units`: CPU in millicores, everything
else in base units), so every capacity computation is exact integer arithmetic.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec

# Taints and tolerations are the slim objects' own: placement reads them as the fold keeps
# them (only NoSchedule and NoExecute taints keep pods away, Kueue's rule: see `counts`).
from events.objects import NodeSelectorRequirement
from events.objects import Taint as Taint
from events.objects import Toleration as Toleration

Algorithm = Literal["auto", "BestFit", "LeastFreeCapacity", "BalancedPlacement"]
ALGORITHMS: Final[tuple[Algorithm, ...]] = (
    "auto",
    "BestFit",
    "LeastFreeCapacity",
    "BalancedPlacement",
)
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"


class NodeInfo(msgspec.Struct, frozen=True):
    """A node as placement sees it. `used` is what pods not in the request already take
    (their requests plus one ``pods`` each)."""

    name: str
    labels: dict[str, str] = {}
    allocatable: dict[str, int] = {}
    used: dict[str, int] = {}
    ready: bool = True
    unschedulable: bool = False
    taints: tuple[Taint, ...] = ()


class PodSetRequest(msgspec.Struct, frozen=True):
    """`count` identical pods and their topology request.

    `required`, `preferred` and `unconstrained` are mutually exclusive. `slice_layers` holds
    ``(level, size)`` pairs, outermost first: one pair is Kueue's slice-required-topology plus
    slice-size, several are its multi-layer constraints. A size of 0 means "not provided".
    `implied` stands for Kueue's implicit TAS (no annotation on a TAS-only ClusterQueue).
    Pod sets sharing `group` are placed together as leader + workers.
    """

    name: str
    count: int
    requests: dict[str, int] = {}
    required: str | None = None
    preferred: str | None = None
    unconstrained: bool = False
    implied: bool = False
    slice_layers: tuple[tuple[str, int], ...] = ()
    group: str | None = None
    tolerations: tuple[Toleration, ...] = ()
    node_selector: dict[str, str] = {}
    # Required node affinity terms (`daemon.placement.affinity`); () when there are none.
    node_affinity: tuple[tuple[NodeSelectorRequirement, ...], ...] = ()


class Domain(msgspec.Struct, frozen=True):
    values: tuple[str, ...]
    count: int


class TopologyAssignment(msgspec.Struct, frozen=True):
    """Kueue's internal TopologyAssignment: only the hostname level when the topology ends
    in ``kubernetes.io/hostname``, the full level list otherwise; leaves in topology-path
    order."""

    levels: tuple[str, ...]
    domains: tuple[Domain, ...]


class PlacementResult(msgspec.Struct, frozen=True):
    """All-or-nothing outcome. When not admitted, `pod_set` names the first pod set of the
    unit (a pod set, or a leader + workers group) that could not be placed."""

    admitted: bool
    assignments: dict[str, TopologyAssignment] | None = None
    reason: str | None = None
    pod_set: str | None = None
