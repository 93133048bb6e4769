"""Resolving a request against the levels (TAS spec 3.2), its shape errors (3.3) and the
algorithm each pod set gets (4)."""

from __future__ import annotations

import pytest

from daemon.placement import PodSetRequest
from daemon.placement.model import Algorithm
from daemon.placement.plan import Plan, engine_for, resolve
from tests.daemon.placement.builders import (
    BLOCK,
    HOST,
    RACK,
    THREE_LEVELS,
    cpu_hosts,
    pod_set,
    reason,
    run,
)

SWITCH = "cloud.com/topology-switch"
FOUR = (BLOCK, RACK, SWITCH, HOST)


def plan(request: PodSetRequest, levels: tuple[str, ...] = THREE_LEVELS) -> Plan:
    resolved = resolve(levels, request, leader=False, algorithm="auto")
    assert isinstance(resolved, Plan), resolved
    return resolved


# Spec 3.2: (search level L, slice level S, slice size, unconstrained, required).
LEVELS: list[tuple[str, PodSetRequest, tuple[int, int, int, bool, bool]]] = [
    ("required = X", pod_set(4, required=RACK), (1, 2, 1, False, True)),
    ("preferred = X", pod_set(4, preferred=RACK), (1, 2, 1, False, False)),
    (
        "slice constraint only: top level, unconstrained",
        pod_set(4, slices=[(RACK, 2)]),
        (0, 1, 2, True, False),
    ),
    ("unconstrained: lowest level", pod_set(4, unconstrained=True), (2, 2, 1, True, False)),
    ("implied: lowest level, unconstrained", pod_set(4, implied=True), (2, 2, 1, True, False)),
    (
        "unconstrained with a slice layer searches from the top",
        pod_set(4, unconstrained=True, slices=[(HOST, 2)]),
        (0, 2, 2, True, False),
    ),
    (
        "slice level is the first layer's",
        pod_set(8, required=BLOCK, slices=[(RACK, 4), (HOST, 2)]),
        (0, 1, 4, False, True),
    ),
]


@pytest.mark.parametrize(("request_", "expected"), [pytest.param(r, e, id=i) for i, r, e in LEVELS])
def test_level_resolution(
    request_: PodSetRequest, expected: tuple[int, int, int, bool, bool]
) -> None:
    resolved = plan(request_)
    assert (
        resolved.level,
        resolved.slice_level,
        resolved.slice_size,
        resolved.unconstrained,
        resolved.required,
    ) == expected


def test_inner_layers_cover_every_level_down_to_them() -> None:
    resolved = plan(pod_set(16, required=BLOCK, slices=[(BLOCK, 8), (SWITCH, 4), (HOST, 2)]), FOUR)
    assert resolved.inner == {1: 4, 2: 4, 3: 2}
    assert resolved.layers == ((0, 8), (2, 4), (3, 2))
    assert plan(pod_set(8, required=BLOCK, slices=[(RACK, 4)])).layers == ()


# Spec 3.3 and Kueue's own cases ("slice required topology level cannot be above the main
# required topology level", "slice size is required when slice topology is requested",
# "cannot request not existing slice topology").
SHAPES: list[tuple[str, PodSetRequest, str]] = [
    ("no level could be derived", pod_set(1), "topology level not specified"),
    ("level not in the topology", pod_set(1, required="zone"), "no requested topology level: zone"),
    (
        "slice level not in the topology",
        pod_set(1, required=BLOCK, slices=[("not-existing-topology-level", 1)]),
        "no requested topology level for slices: not-existing-topology-level",
    ),
    (
        "slice level above the pod set level",
        pod_set(1, required=HOST, slices=[(BLOCK, 1)]),
        "podset slice topology cloud.com/topology-block is above "
        "the podset topology kubernetes.io/hostname",
    ),
    (
        "slice size not provided",
        pod_set(1, required=BLOCK, slices=[(HOST, 0)]),
        "slice topology requested, but slice size not provided",
    ),
    (
        "inner layer with an unknown level",
        pod_set(4, required=BLOCK, slices=[(RACK, 4), ("gpu-island", 2)]),
        "no requested topology level for additional slice layer: gpu-island",
    ),
    (
        "inner layer not deeper than the previous one",
        pod_set(4, required=BLOCK, slices=[(RACK, 4), (RACK, 2)]),
        "additional slice layer topology cloud.com/topology-rack "
        "must be at a lower level than cloud.com/topology-rack",
    ),
    (
        "inner layer above the previous one",
        pod_set(4, required=BLOCK, slices=[(RACK, 4), (BLOCK, 2)]),
        "additional slice layer topology cloud.com/topology-block "
        "must be at a lower level than cloud.com/topology-rack",
    ),
    (
        "inner layer size not dividing the parent size",
        pod_set(6, required=BLOCK, slices=[(RACK, 6), (HOST, 4)]),
        "additional slice layer size 4 must evenly divide parent layer size 6",
    ),
    (
        "inner layer size not provided",
        pod_set(6, required=BLOCK, slices=[(RACK, 6), (HOST, 0)]),
        "slice topology requested, but slice size not provided",
    ),
]


@pytest.mark.parametrize(("request_", "expected"), [pytest.param(r, e, id=i) for i, r, e in SHAPES])
def test_request_shape_reasons(request_: PodSetRequest, expected: str) -> None:
    assert resolve(THREE_LEVELS, request_, leader=False, algorithm="auto") == expected
    result = run(THREE_LEVELS, cpu_hosts({"b1/r1/x1": "8"}), request_)
    assert reason(result) == expected
    assert result.pod_set == "main"


# Spec 4: the profile matrix, plus what forcing an algorithm does.
ENGINES: list[tuple[Algorithm, str, str, str]] = [
    # algorithm, required, preferred, unconstrained / implied / slice-only
    ("auto", "BestFit", "BestFit", "LeastFreeCapacity"),
    ("BestFit", "BestFit", "BestFit", "BestFit"),
    ("LeastFreeCapacity", "LeastFreeCapacity", "LeastFreeCapacity", "LeastFreeCapacity"),
    ("BalancedPlacement", "BestFit", "BalancedPlacement", "LeastFreeCapacity"),
]


@pytest.mark.parametrize(
    ("algorithm", "required", "preferred", "unconstrained"),
    ENGINES,
    ids=[row[0] for row in ENGINES],
)
def test_engine_matrix(
    algorithm: Algorithm, required: str, preferred: str, unconstrained: str
) -> None:
    assert engine_for(algorithm, required=True, unconstrained=False) == required
    assert engine_for(algorithm, required=False, unconstrained=False) == preferred
    assert engine_for(algorithm, required=False, unconstrained=True) == unconstrained


@pytest.mark.parametrize(
    ("request_", "engine"),
    [
        pytest.param(pod_set(1, required=RACK), "BestFit", id="required"),
        pytest.param(pod_set(1, preferred=RACK), "BestFit", id="preferred"),
        pytest.param(pod_set(1, unconstrained=True), "LeastFreeCapacity", id="unconstrained"),
        pytest.param(pod_set(1, implied=True), "LeastFreeCapacity", id="implied"),
        pytest.param(pod_set(2, slices=[(HOST, 2)]), "LeastFreeCapacity", id="slice-only"),
    ],
)
def test_auto_gives_kueues_default_profile(request_: PodSetRequest, engine: str) -> None:
    assert plan(request_).engine == engine


def test_forced_least_free_on_a_required_request_reports_slices() -> None:
    """Kueue's required branch of LeastFreeCapacity (dead at its default gates) reports a pod
    count; kbatchd reports the most slices a domain holds, in the unit the message names."""
    nodes = cpu_hosts({"b1/r1/x1": "5", "b1/r2/x2": "3"})
    request = pod_set(8, {"cpu": "1"}, required=RACK, slices=[(HOST, 2)])
    assert reason(run(THREE_LEVELS, nodes, request, algorithm="LeastFreeCapacity")) == (
        "allows to fit only 2 out of 4 slice(s)"
    )
