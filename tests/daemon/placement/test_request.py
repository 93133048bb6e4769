"""Decoding and checking the `kbatchd place` request document."""

from __future__ import annotations

import json
from typing import Any

import pytest

from daemon.placement.model import NodeInfo, PodSetRequest
from daemon.placement.request import RequestError, parse_request
from events.topology import DEFAULT_LEVELS

BLOCK, RACK, HOST = DEFAULT_LEVELS


def issue_example() -> dict[str, Any]:
    """The request shown in the issue, field for field."""
    return {
        "levels": [BLOCK, RACK, HOST],
        "nodes": [
            {
                "name": "n1",
                "labels": {BLOCK: "b1", RACK: "r1", HOST: "n1"},
                "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"},
                "used": {"nvidia.com/gpu": "2"},
            }
        ],
        "podSets": [
            {
                "name": "main",
                "count": 16,
                "requests": {"nvidia.com/gpu": "1"},
                "required": RACK,
                "preferred": None,
                "unconstrained": False,
                "sliceLevel": None,
                "sliceSize": None,
                "group": None,
            }
        ],
        "algorithm": "BestFit",
    }


def decode(document: dict[str, Any]) -> Any:
    return parse_request(json.dumps(document))


def test_the_issue_example_decodes_to_canonical_units() -> None:
    request = decode(issue_example())
    assert request.levels == (BLOCK, RACK, HOST)
    assert request.algorithm == "BestFit"
    assert request.nodes == (
        NodeInfo(
            name="n1",
            labels={BLOCK: "b1", RACK: "r1", HOST: "n1"},
            allocatable={"cpu": 96_000, "memory": 2**40, "nvidia.com/gpu": 8, "pods": 110},
            used={"nvidia.com/gpu": 2},
        ),
    )
    assert request.pod_sets == (
        PodSetRequest(name="main", count=16, requests={"nvidia.com/gpu": 1}, required=RACK),
    )


def test_defaults_levels_and_algorithm() -> None:
    document = issue_example()
    del document["levels"], document["algorithm"]
    request = decode(document)
    assert request.levels == DEFAULT_LEVELS
    assert request.algorithm == "auto"


@pytest.mark.parametrize(
    ("fields", "layers"),
    [
        pytest.param({"sliceLevel": HOST, "sliceSize": 4}, ((HOST, 4),), id="slice level and size"),
        pytest.param({"sliceSize": 4}, (), id="a size without a level is ignored"),
        pytest.param(
            {"sliceLevel": HOST}, ((HOST, 0),), id="a level without a size is not provided"
        ),
        pytest.param(
            {"sliceLayers": [{"level": RACK, "size": 8}, {"level": HOST, "size": 4}]},
            ((RACK, 8), (HOST, 4)),
            id="slice layers",
        ),
    ],
)
def test_slice_fields(fields: dict[str, Any], layers: tuple[tuple[str, int], ...]) -> None:
    document = issue_example()
    document["podSets"][0].update(fields)
    assert decode(document).pod_sets[0].slice_layers == layers


def test_taints_tolerations_and_node_selector() -> None:
    document = issue_example()
    document["nodes"][0].update(
        {"taints": [{"key": "gpu", "value": "a100", "effect": "NoSchedule"}], "ready": False}
    )
    document["podSets"][0].update(
        {
            "tolerations": [{"key": "gpu", "operator": "Exists"}],
            "nodeSelector": {"pool": "a"},
            "required": None,
            "implied": True,
        }
    )
    request = decode(document)
    assert request.pod_sets[0].implied
    assert request.nodes[0].taints[0].effect == "NoSchedule"
    assert not request.nodes[0].ready
    assert request.pod_sets[0].tolerations[0].operator == "Exists"
    assert request.pod_sets[0].node_selector == {"pool": "a"}


def _set(path: str, value: Any) -> dict[str, Any]:
    document = issue_example()
    *parents, last = path.split(".")
    target: Any = document
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    target[int(last) if last.isdigit() else last] = value
    return document


def _pod_set_with(**fields: Any) -> dict[str, Any]:
    document = issue_example()
    document["podSets"][0].update(fields)
    return document


def _group(*pod_sets: dict[str, Any]) -> dict[str, Any]:
    document = issue_example()
    document["podSets"] = list(pod_sets)
    return document


def _ps(name: str, count: int, **fields: Any) -> dict[str, Any]:
    return {"name": name, "count": count, **fields}


MALFORMED: list[tuple[str, dict[str, Any] | str, str]] = [
    ("unknown top-level field", _set("extra", 1), "extra: unknown field"),
    ("unknown pod set field", _set("podSets.0.priority", 1), "podSets[0].priority: unknown field"),
    ("unknown node field", _set("nodes.0.capacity", {}), "nodes[0].capacity: unknown field"),
    (
        "unknown slice layer field",
        _set("podSets.0.sliceLayers", [{"level": HOST, "size": 1, "x": 1}]),
        "podSets[0].sliceLayers[0].x: unknown field",
    ),
    (
        "bad quantity",
        _set("podSets.0.requests", {"cpu": "abc"}),
        "podSets[0].requests.cpu: invalid quantity 'abc'",
    ),
    (
        "bad allocatable",
        _set("nodes.0.allocatable", {"memory": "1Qi"}),
        "nodes[0].allocatable.memory: invalid quantity '1Qi'",
    ),
    (
        "negative quantity",
        _set("nodes.0.used", {"cpu": "-1"}),
        "nodes[0].used.cpu: negative quantity '-1'",
    ),
    (
        "quantity of the wrong type",
        _set("podSets.0.requests", {"cpu": True}),
        "podSets[0].requests.cpu: expected int | float | str, got bool (value true)",
    ),
    (
        "a dotted resource name with a value of the wrong type",
        _set("podSets.0.requests", {"nvidia.com/gpu": [1]}),
        "podSets[0].requests.nvidia.com/gpu: expected int | float | str, got array (value [1])",
    ),
    (
        "count of the wrong type",
        _set("podSets.0.count", "16"),
        'podSets[0].count: expected int, got str (value "16")',
    ),
    (
        "negative count",
        _set("podSets.0.count", -1),
        "podSets[0].count: must be between 0 and 2147483647, got -1",
    ),
    (
        "missing count",
        _set("podSets.0", {"name": "main"}),
        "podSets[0].count: required field missing",
    ),
    ("missing nodes", {"podSets": []}, "nodes: required field missing"),
    (
        "required and preferred",
        _set("podSets.0.preferred", HOST),
        "podSets[0].preferred: required and preferred are mutually exclusive",
    ),
    (
        "required and unconstrained",
        _set("podSets.0.unconstrained", True),
        "podSets[0].unconstrained: required and unconstrained are mutually exclusive",
    ),
    (
        "implied with a topology request",
        _set("podSets.0.implied", True),
        "podSets[0].implied: "
        "an implied request has no required, preferred, unconstrained or slices",
    ),
    (
        "count not a multiple of the slice size",
        _set("podSets.0.sliceLayers", [{"level": HOST, "size": 5}]),
        "podSets[0].count: 16 is not a multiple of the slice size 5",
    ),
    (
        "slice layers with the single-layer pair",
        _pod_set_with(sliceLevel=HOST, sliceLayers=[{"level": HOST, "size": 1}]),
        "podSets[0].sliceLayers: excludes sliceLevel and sliceSize",
    ),
    (
        "no slice layers",
        _set("podSets.0.sliceLayers", []),
        "podSets[0].sliceLayers: 1 to 3 layers allowed, got 0",
    ),
    (
        "four slice layers",
        _set("podSets.0.sliceLayers", [{"level": HOST, "size": 1}] * 4),
        "podSets[0].sliceLayers: 1 to 3 layers allowed, got 4",
    ),
    (
        "unknown algorithm",
        _set("algorithm", "WorstFit"),
        "algorithm: unknown algorithm 'WorstFit' "
        "(one of auto, BestFit, LeastFreeCapacity, BalancedPlacement)",
    ),
    (
        "unknown taint effect",
        _set("nodes.0.taints", [{"key": "k", "effect": "Never"}]),
        "nodes[0].taints[0].effect: invalid value 'Never'",
    ),
    (
        "empty toleration key with Equal",
        _set("podSets.0.tolerations", [{"value": "x"}]),
        "podSets[0].tolerations[0].operator: an empty key needs operator Exists",
    ),
    (
        "duplicate node name",
        _set("nodes", issue_example()["nodes"] * 2),
        "nodes[1].name: duplicate node name 'n1'",
    ),
    (
        "duplicate pod set name",
        _group(_ps("a", 1, required=RACK), _ps("a", 1, required=RACK)),
        "podSets[1].name: duplicate pod set name 'a'",
    ),
    (
        "group of three",
        _group(*(_ps(n, 1, required=RACK, group="g") for n in "abc")),
        "podSets[2].group: group 'g' has 3 pod set(s); leader + workers needs exactly 2",
    ),
    (
        "group without a single-pod leader",
        _group(_ps("a", 2, required=RACK, group="g"), _ps("b", 4, required=RACK, group="g")),
        "podSets[1].group: group 'g' needs a leader pod set with count 1",
    ),
    (
        "group with different levels",
        _group(_ps("a", 1, required=RACK, group="g"), _ps("b", 4, required=BLOCK, group="g")),
        "podSets[1].group: group 'g': "
        "both pod sets must request the same required or preferred level",
    ),
    ("no levels", _set("levels", []), "levels: 1 to 16 levels required, got 0"),
    ("duplicate level", _set("levels", [RACK, RACK, HOST]), f"levels[1]: duplicate level '{RACK}'"),
    (
        "hostname not last",
        _set("levels", [HOST, RACK]),
        "levels[0]: kubernetes.io/hostname may only be the last level",
    ),
    ("invalid JSON", '{"nodes": [', "invalid JSON: Input data was truncated"),
    (
        "nested too deeply",
        '{"nodes": ' + "[" * 100_000 + "]" * 100_000 + ', "podSets": []}',
        "invalid JSON: nested too deeply",
    ),
    ("not an object", "[1, 2]", "request: expected a JSON object, got an array"),
]


@pytest.mark.parametrize(
    ("document", "message"), [pytest.param(d, m, id=i) for i, d, m in MALFORMED]
)
def test_malformed_requests_name_the_field(document: dict[str, Any] | str, message: str) -> None:
    with pytest.raises(RequestError) as caught:
        parse_request(document if isinstance(document, str) else json.dumps(document))
    assert str(caught.value) == message
    assert "\n" not in str(caught.value)
