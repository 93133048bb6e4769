"""Small builders for placement tests: topologies written as ``"b1/r1/x3"`` paths with
Kubernetes quantities, pod sets with quantity strings, and compact views of results."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from daemon.placement import NodeInfo, PlacementResult, PodSetRequest, Taint, place
from daemon.placement.model import Algorithm
from events.quantity import resource_map

BLOCK = "cloud.com/topology-block"
SUBBLOCK = "cloud.com/topology-subblock"
RACK = "cloud.com/topology-rack"
HOST = "kubernetes.io/hostname"
GPU = "example.com/gpu"

ONE_LEVEL = (HOST,)
TWO_LEVELS = (BLOCK, RACK)
THREE_LEVELS = (BLOCK, RACK, HOST)
FOUR_LEVELS = (BLOCK, SUBBLOCK, RACK, HOST)

Quantities = Mapping[str, str | int]


def node(
    path: str,
    levels: Sequence[str] = THREE_LEVELS,
    *,
    name: str | None = None,
    used: Quantities | None = None,
    ready: bool = True,
    unschedulable: bool = False,
    taints: Sequence[Taint] = (),
    labels: Mapping[str, str] | None = None,
    resources: Quantities | None = None,
    **allocatable: str | int,
) -> NodeInfo:
    """A node labelled along `path` (``"b1/r1/x3"``, one value per level, widest first);
    allocatable from the keyword arguments plus `resources` (for names like ``nvidia.com/gpu``)."""
    values = path.split("/")
    assert len(values) == len(levels), f"{path} does not match {levels}"
    all_labels = dict(zip(levels, values, strict=True))
    all_labels.update(labels or {})
    return NodeInfo(
        name=name or path.replace("/", "-"),
        labels=all_labels,
        allocatable=resource_map(_quantities({**allocatable, **(resources or {})})),
        used=resource_map(_quantities(used or {})),
        ready=ready,
        unschedulable=unschedulable,
        taints=tuple(taints),
    )


def gpu_hosts(
    capacities: Mapping[str, int], pods: int = 100, levels: Sequence[str] = THREE_LEVELS
) -> list[NodeInfo]:
    """Hosts with only GPUs (and pods) to give, as in Kueue's balanced-placement tests."""
    return [
        node(path, levels, pods=pods, resources={GPU: gpus}) for path, gpus in capacities.items()
    ]


def cpu_hosts(
    capacities: Mapping[str, str | int], pods: int = 10, levels: Sequence[str] = THREE_LEVELS
) -> list[NodeInfo]:
    return [node(path, levels, cpu=cpu, pods=pods) for path, cpu in capacities.items()]


def pod_set(
    count: int,
    requests: Quantities | None = None,
    *,
    name: str = "main",
    required: str | None = None,
    preferred: str | None = None,
    unconstrained: bool = False,
    implied: bool = False,
    slices: Sequence[tuple[str, int]] = (),
    group: str | None = None,
    **kwargs: Any,
) -> PodSetRequest:
    return PodSetRequest(
        name=name,
        count=count,
        requests=resource_map(_quantities(requests or {})),
        required=required,
        preferred=preferred,
        unconstrained=unconstrained,
        implied=implied,
        slice_layers=tuple(slices),
        group=group,
        **kwargs,
    )


def run(
    levels: Sequence[str],
    nodes: Sequence[NodeInfo],
    *pod_sets: PodSetRequest,
    algorithm: Algorithm = "auto",
) -> PlacementResult:
    return place(levels, nodes, pod_sets, algorithm)


def domains(result: PlacementResult, name: str = "main") -> list[tuple[str, int]]:
    """The assignment of `name` as ``("x3", 2)`` pairs (values joined by "/"), in output order."""
    assert result.admitted, result.reason
    assert result.assignments is not None
    return [("/".join(d.values), d.count) for d in result.assignments[name].domains]


def levels_of(result: PlacementResult, name: str = "main") -> tuple[str, ...]:
    assert result.assignments is not None
    return result.assignments[name].levels


def reason(result: PlacementResult) -> str:
    assert not result.admitted, "expected a refusal"
    assert result.reason is not None
    return result.reason


def _quantities(raw: Quantities) -> dict[str, str | int | float]:
    return {name: str(value) if isinstance(value, int) else value for name, value in raw.items()}


# Kueue's `defaultNodes` (tas_cache_test.go):
#      b1                   b2
#   /      \             /      \
#  r1       r2          r1       r2
#  |      /  |  \       |         |
#  x3    x5  x1  x6     x2       x4
def kueue_default_nodes(levels: Sequence[str] = THREE_LEVELS) -> list[NodeInfo]:
    small = {"cpu": "1", "memory": "1Gi", "pods": "10"}
    paths = ["b1/r1/x3", "b1/r2/x5", "b1/r2/x1", "b1/r2/x6", "b2/r1/x2"]
    if len(levels) == 2:
        # Two-level tests label the same nodes with block and rack only; leaves merge.
        nodes = [node("/".join(p.split("/")[:2]), levels, name=p, resources=small) for p in paths]
        nodes.append(node("b2/r2", levels, name="b2/r2/x4", cpu="2", memory="4Gi", pods="40"))
        return nodes
    nodes = [node(p, levels, resources=small) for p in paths]
    nodes.append(node("b2/r2/x4", levels, cpu="2", memory="4Gi", pods="40"))
    return nodes


# Kueue's `scatteredNodes`: b1/r1 {x3: 4 cpu, x5: 1, x1: 1}, b2/r1 {x6: 2, x2: 1}.
def kueue_scattered_nodes() -> list[NodeInfo]:
    return cpu_hosts(
        {"b1/r1/x3": "4", "b1/r1/x5": "1", "b1/r1/x1": "1", "b2/r1/x6": "2", "b2/r1/x2": "1"}
    )


# Kueue's `binaryTreesNodes`: two blocks, two racks each, two 1-cpu hosts per rack.
def kueue_binary_tree_nodes() -> list[NodeInfo]:
    paths = [
        "b1/r1/x3",
        "b1/r1/x5",
        "b1/r2/x1",
        "b1/r2/x6",
        "b2/r1/x2",
        "b2/r1/x4",
        "b2/r2/x7",
        "b2/r2/x8",
    ]
    return cpu_hosts(dict.fromkeys(paths, "1"))
