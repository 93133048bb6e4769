"""Slices and multi-layer slices (TAS spec 2.4, 11), with Kueue's slice test cases as rows."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from daemon.placement import NodeInfo, PodSetRequest
from tests.daemon.placement.builders import (
    BLOCK,
    HOST,
    RACK,
    THREE_LEVELS,
    cpu_hosts,
    domains,
    kueue_default_nodes,
    kueue_scattered_nodes,
    node,
    pod_set,
    reason,
    run,
)

CPU1 = {"cpu": "1"}
DC = "cloud.com/datacenter"
AIZONE = "cloud.com/aizone"
SWITCH = "cloud.com/topology-switch"

UNEVEN_RACKS = {"b1/r1/x1": "1", "b1/r1/x2": "4", "b1/r2/x3": "3", "b1/r2/x4": "4"}


def gb200() -> list[NodeInfo]:
    """Kueue's GB200/NVL36 mimic: 1 dc x 2 aizones x 2 blocks x 2 racks, 18 two-GPU nodes per
    rack; the lowest level is the rack, so each rack's nodes merge into one leaf."""
    levels = (DC, AIZONE, BLOCK, RACK)
    racks = [
        ("dc0", "aizone0", "block0", "r0"),
        ("dc0", "aizone0", "block0", "r1"),
        ("dc0", "aizone0", "block1", "r2"),
        ("dc0", "aizone0", "block1", "r3"),
        ("dc0", "aizone1", "block2", "r4"),
        ("dc0", "aizone1", "block2", "r5"),
        ("dc0", "aizone1", "block3", "r6"),
        ("dc0", "aizone1", "block3", "r7"),
    ]
    return [
        node(
            "/".join(rack),
            levels,
            name=f"{rack[3]}-n{i}",
            pods="110",
            resources={"nvidia.com/gpu": "2"},
        )
        for rack in racks
        for i in range(18)
    ]


ADMITTED: list[tuple[str, Sequence[str], list[NodeInfo], PodSetRequest, list[tuple[str, int]]]] = [
    (
        "block required for podset; host required for slices",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x3": "3", "b1/r1/x5": "3", "b1/r1/x1": "3"}),
        pod_set(6, CPU1, required=BLOCK, slices=[(HOST, 2)]),
        [("x1", 2), ("x3", 2), ("x5", 2)],
    ),
    (
        "block required for podset; host required for slices; select domains with tight fit",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x3": "3", "b1/r1/x5": "2", "b1/r1/x1": "2"}),
        pod_set(4, CPU1, required=BLOCK, slices=[(HOST, 2)]),
        [("x1", 2), ("x5", 2)],
    ),
    (
        "block required for podset; host required for slices; optimize last domain",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x3": "4", "b1/r1/x5": "3", "b1/r1/x1": "2"}),
        pod_set(6, CPU1, required=BLOCK, slices=[(HOST, 2)]),
        [("x1", 2), ("x3", 4)],
    ),
    (
        "block required for podset; rack required for slices",
        THREE_LEVELS,
        cpu_hosts(
            {
                "b1/r1/x3": "1",
                "b1/r1/x5": "1",
                "b1/r2/x1": "1",
                "b1/r2/x6": "1",
                "b1/r2/x2": "1",
                "b2/r1/x4": "1",
                "b2/r1/x7": "1",
            }
        ),
        pod_set(4, CPU1, required=BLOCK, slices=[(RACK, 2)]),
        [("x3", 1), ("x5", 1), ("x1", 1), ("x2", 1)],
    ),
    (
        "block preferred for podset; rack required for slices",
        THREE_LEVELS,
        kueue_default_nodes(),
        pod_set(4, CPU1, preferred=BLOCK, slices=[(RACK, 2)]),
        [("x1", 1), ("x5", 1), ("x4", 2)],
    ),
    (
        "block preferred for podset; host required for slices; 2 blocks with unbalanced subdomains",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x3": "3", "b1/r1/x5": "3", "b1/r1/x1": "3", "b2/r1/x6": "6"}),
        pod_set(12, CPU1, preferred=BLOCK, slices=[(HOST, 3)]),
        [("x1", 3), ("x3", 3), ("x6", 6)],
    ),
    (
        "block required; rack slices; podset fits in both blocks, slices in one",
        THREE_LEVELS,
        cpu_hosts(
            {"b1/r1/x3": "2", "b1/r2/x5": "2", "b1/r3/x1": "2", "b2/r4/x6": "3", "b2/r5/x2": "3"}
        ),
        pod_set(6, CPU1, required=BLOCK, slices=[(RACK, 3)]),
        [("x6", 3), ("x2", 3)],
    ),
    (
        "no topology for podset; host required for slices (slice-only is unconstrained)",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x3": "3", "b1/r1/x5": "3", "b1/r1/x1": "3"}),
        pod_set(6, CPU1, slices=[(HOST, 2)]),
        [("x1", 2), ("x3", 2), ("x5", 2)],
    ),
    (
        "no topology for podset; host required for slices; multiple blocks",
        THREE_LEVELS,
        kueue_scattered_nodes(),
        pod_set(6, CPU1, slices=[(HOST, 2)]),
        [("x3", 4), ("x6", 2)],
    ),
    (
        "no topology for podset; rack required for slices; multiple blocks",
        THREE_LEVELS,
        kueue_default_nodes(),
        pod_set(4, CPU1, slices=[(RACK, 2)]),
        [("x1", 1), ("x5", 1), ("x4", 2)],
    ),
    (
        "single slice layer: below the slice level children are taken smallest first",
        THREE_LEVELS,
        cpu_hosts(UNEVEN_RACKS),
        pod_set(8, CPU1, required=BLOCK, slices=[(RACK, 4)]),
        [("x1", 1), ("x2", 3), ("x3", 3), ("x4", 1)],
    ),
    (
        "multi-layer: block required; rack slices of 4; host slices of 2",
        THREE_LEVELS,
        cpu_hosts(UNEVEN_RACKS),
        pod_set(8, CPU1, required=BLOCK, slices=[(RACK, 4), (HOST, 2)]),
        [("x2", 4), ("x3", 2), ("x4", 2)],
    ),
    (
        "multi-layer: GB200 NVL36; dc required; aizone slices of 48; rack slices of 16",
        (DC, AIZONE, BLOCK, RACK),
        gb200(),
        pod_set(96, {"nvidia.com/gpu": "2"}, required=DC, slices=[(AIZONE, 48), (RACK, 16)]),
        [
            ("dc0/aizone0/block0/r0", 16),
            ("dc0/aizone0/block0/r1", 16),
            ("dc0/aizone0/block1/r2", 16),
            ("dc0/aizone1/block2/r4", 16),
            ("dc0/aizone1/block2/r5", 16),
            ("dc0/aizone1/block3/r6", 16),
        ],
    ),
    (
        "multi-layer: an inner layer rounds every level between it and the outer layer",
        (BLOCK, RACK, SWITCH, HOST),
        [
            node("b1/r1/s1/x1", (BLOCK, RACK, SWITCH, HOST), cpu="3", pods="10"),
            node("b1/r1/s2/x2", (BLOCK, RACK, SWITCH, HOST), cpu="2", pods="10"),
            node("b1/r2/s3/x3", (BLOCK, RACK, SWITCH, HOST), cpu="4", pods="10"),
        ],
        pod_set(4, CPU1, required=BLOCK, slices=[(BLOCK, 4), (HOST, 2)]),
        [("x1", 2), ("x2", 2)],
    ),
]


@pytest.mark.parametrize(
    ("levels", "nodes", "request_", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in ADMITTED],
)
def test_slices_admitted(
    levels: Sequence[str],
    nodes: list[NodeInfo],
    request_: PodSetRequest,
    expected: list[tuple[str, int]],
) -> None:
    assert domains(run(levels, nodes, request_)) == expected


REFUSED: list[tuple[str, Sequence[str], list[NodeInfo], PodSetRequest, str]] = [
    (
        "block required; rack slices; podset fits in a block, but slices do not fit in racks",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x3": "2", "b1/r2/x5": "2", "b1/r3/x1": "2"}),
        pod_set(6, CPU1, required=BLOCK, slices=[(RACK, 3)]),
        "doesn't allow to fit any of 2 slice(s)",
    ),
    (
        "block required; rack slices; only 1 out of 2 slices fit the topology",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x3": "3", "b1/r2/x5": "1", "b1/r3/x1": "1", "b1/r4/x6": "1"}),
        pod_set(6, CPU1, required=BLOCK, slices=[(RACK, 3)]),
        "allows to fit only 1 out of 2 slice(s)",
    ),
    (
        "multi-layer: small host kills rack slices despite enough total capacity",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x1": "7", "b1/r1/x2": "4", "b1/r2/x3": "7", "b1/r2/x4": "3"}),
        pod_set(16, CPU1, required=BLOCK, slices=[(RACK, 8), (HOST, 4)]),
        "doesn't allow to fit; 1/2 slice(s) fit on level cloud.com/topology-rack; "
        "3/4 slice(s) fit on level kubernetes.io/hostname",
    ),
    (
        "multi-layer: enough hostname slices but not enough rack slices",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x1": "4", "b1/r2/x2": "4", "b1/r3/x3": "4"}),
        pod_set(12, CPU1, required=BLOCK, slices=[(RACK, 6), (HOST, 2)]),
        "doesn't allow to fit; 0/2 slice(s) fit on level cloud.com/topology-rack; "
        "6/6 slice(s) fit on level kubernetes.io/hostname",
    ),
    (
        "multi-layer: host slice rounding makes rack slice impossible",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x1": "3", "b1/r1/x2": "3", "b1/r1/x3": "0"}),
        pod_set(6, CPU1, required=BLOCK, slices=[(RACK, 6), (HOST, 2)]),
        "doesn't allow to fit; 0/1 slice(s) fit on level cloud.com/topology-rack; "
        "2/3 slice(s) fit on level kubernetes.io/hostname. "
        'Total nodes: 3; excluded: resource "cpu": 1',
    ),
    (
        "multi-layer: 3-layer negative case with small hosts cascading up",
        (DC, BLOCK, RACK, HOST),
        [
            node(f"dc1/{path}", (DC, BLOCK, RACK, HOST), cpu=cpu, pods="10")
            for path, cpu in {
                "b1/r1/x1": "4",
                "b1/r1/x2": "4",
                "b1/r2/x3": "4",
                "b1/r2/x4": "4",
                "b2/r3/x5": "4",
                "b2/r3/x6": "4",
                "b2/r4/x7": "1",
                "b2/r4/x8": "1",
            }.items()
        ],
        pod_set(24, CPU1, required=DC, slices=[(BLOCK, 12), (RACK, 6), (HOST, 3)]),
        "doesn't allow to fit; 1/2 slice(s) fit on level cloud.com/topology-block; "
        "3/4 slice(s) fit on level cloud.com/topology-rack; "
        "6/8 slice(s) fit on level kubernetes.io/hostname",
    ),
    (
        "multi-layer: the per-layer message also reports a preferred request spreading short",
        THREE_LEVELS,
        cpu_hosts({"b1/r1/x1": "3", "b2/r1/x2": "3"}),
        pod_set(8, CPU1, preferred=RACK, slices=[(RACK, 4), (HOST, 2)]),
        "doesn't allow to fit; 0/2 slice(s) fit on level cloud.com/topology-rack; "
        "1/4 slice(s) fit on level kubernetes.io/hostname",
    ),
]


@pytest.mark.parametrize(
    ("levels", "nodes", "request_", "expected"),
    [pytest.param(*row[1:], id=row[0]) for row in REFUSED],
)
def test_slices_refused(
    levels: Sequence[str], nodes: list[NodeInfo], request_: PodSetRequest, expected: str
) -> None:
    assert reason(run(levels, nodes, request_)) == expected


@pytest.mark.parametrize(
    ("count", "size", "admitted"),
    [
        pytest.param(8, 4, True, id="8 pods in slices of 4"),
        pytest.param(6, 4, False, id="6 pods do not divide into slices of 4"),
        pytest.param(6, 3, True, id="6 pods in slices of 3"),
    ],
)
def test_count_must_divide_into_slices(count: int, size: int, admitted: bool) -> None:
    """kbatchd refuses a count that is not a whole number of slices (spec 3.3, Observation)
    instead of quietly placing floor(count / size) slices as Kueue would."""
    nodes = cpu_hosts({"b1/r1/x1": "8", "b1/r1/x2": "8"})
    result = run(THREE_LEVELS, nodes, pod_set(count, CPU1, required=BLOCK, slices=[(HOST, size)]))
    assert result.admitted is admitted
    if not admitted:
        assert reason(result) == f"count: {count} is not a multiple of the slice size {size}"


def test_slices_never_straddle_two_slice_domains() -> None:
    """Leftover pods in a slice-level domain are wasted for the pod set (spec 2.4)."""
    nodes = cpu_hosts({"b1/r1/x1": "3", "b1/r1/x2": "5"})
    assert reason(
        run(THREE_LEVELS, nodes, pod_set(8, CPU1, required=BLOCK, slices=[(HOST, 4)]))
    ) == ("allows to fit only 1 out of 2 slice(s)")
