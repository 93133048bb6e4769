"""A pod set's topology request resolved against the levels (TAS spec sections 3.2, 3.3, 4)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final, Literal

import msgspec

from daemon.placement import reasons
from daemon.placement.model import Algorithm, PodSetRequest

Engine = Literal["BestFit", "LeastFreeCapacity", "BalancedPlacement"]
BEST_FIT: Final = "BestFit"
LEAST_FREE: Final = "LeastFreeCapacity"
BALANCED: Final = "BalancedPlacement"


class Plan(msgspec.Struct, frozen=True):
    """Everything phase 2 needs: Kueue's `topologyAssignmentParameters` plus the algorithm.

    `level` is the search level L and `slice_level` the slice level S, as indexes; `inner`
    maps each level below S that an inner slice layer covers to that layer's size; `layers`
    lists every slice layer as (level index, size) when there is more than one, which is
    when Kueue reports per-layer failure counts.
    """

    count: int
    leader: int
    slice_size: int
    level: int
    slice_level: int
    inner: dict[int, int]
    layers: tuple[tuple[int, int], ...]
    required: bool
    unconstrained: bool
    engine: Engine

    @property
    def need(self) -> int:
        """The number of slices to place (`count / sliceSize`)."""
        return self.count // self.slice_size

    @property
    def least_free(self) -> bool:
        return self.engine == LEAST_FREE


def engine_for(algorithm: Algorithm, required: bool, unconstrained: bool) -> Engine:
    """Kueue's profile matrix: by default BestFit for required and preferred requests and
    LeastFreeCapacity for unconstrained, implied and slice-only ones; BalancedPlacement only
    ever applies to preferred requests (the rest keep what the balanced-gate row gives them)."""
    if algorithm == "BestFit" or algorithm == "LeastFreeCapacity":
        return algorithm
    if algorithm == "BalancedPlacement" and not required and not unconstrained:
        return BALANCED
    return LEAST_FREE if unconstrained else BEST_FIT


def resolve(
    levels: Sequence[str], pod_set: PodSetRequest, leader: bool, algorithm: Algorithm
) -> Plan | str:
    """The plan for `pod_set` (the workers of a group), or Kueue's request-shape reason, checked
    in Kueue's order."""
    layers = pod_set.slice_layers
    slice_size = layers[0][1] if layers else 1
    if slice_size <= 0:
        return reasons.SLICE_SIZE_NOT_PROVIDED
    slice_only = bool(layers) and pod_set.required is None and pod_set.preferred is None
    required = pod_set.required is not None
    unconstrained = pod_set.unconstrained or pod_set.implied or slice_only

    key: str | None
    if pod_set.required is not None:
        key = pod_set.required
    elif pod_set.preferred is not None:
        key = pod_set.preferred
    elif slice_only:
        key = levels[0]
    elif pod_set.unconstrained or pod_set.implied:
        key = levels[-1]
    else:
        return reasons.LEVEL_NOT_SPECIFIED
    if key not in levels:
        return reasons.no_level(key)
    level = levels.index(key)

    slice_key = layers[0][0] if layers else levels[-1]
    if slice_key not in levels:
        return reasons.no_slice_level(slice_key)
    slice_level = levels.index(slice_key)
    if level > slice_level:
        return reasons.slice_above_level(slice_key, key)

    inner: dict[int, int] = {}
    previous_size, previous_level = slice_size, slice_level
    for layer_key, size in layers[1:]:
        if layer_key not in levels:
            return reasons.no_layer_level(layer_key)
        layer_level = levels.index(layer_key)
        if layer_level <= previous_level:
            return reasons.layer_not_lower(layer_key, levels[previous_level])
        if size <= 0:
            return reasons.SLICE_SIZE_NOT_PROVIDED
        if previous_size % size:
            return reasons.layer_not_dividing(size, previous_size)
        for covered in range(previous_level + 1, layer_level + 1):
            inner[covered] = size
        previous_size, previous_level = size, layer_level

    return Plan(
        count=pod_set.count,
        leader=1 if leader else 0,
        slice_size=slice_size,
        level=level,
        slice_level=slice_level,
        inner=inner,
        layers=tuple((levels.index(k), s) for k, s in layers) if len(layers) > 1 else (),
        required=required,
        unconstrained=unconstrained,
        engine=engine_for(algorithm, required, unconstrained),
    )
