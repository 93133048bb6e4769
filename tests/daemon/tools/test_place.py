"""`kbatchd place REQUEST.json`: the what-if command on request files, stdin and the examples
in config/place/."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from daemon.tools.place import main
from events.topology import DEFAULT_LEVELS

BLOCK, RACK, HOST = DEFAULT_LEVELS
EXAMPLES = Path(__file__).resolve().parents[3] / "config" / "place"


def run_cli(argv: list[str], stdin: str = "") -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, stdin=io.StringIO(stdin), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def request(count: int, **pod_set: Any) -> dict[str, Any]:
    nodes = [
        {
            "name": f"n{i}",
            "labels": {BLOCK: "b1", RACK: f"r{i // 2}", HOST: f"n{i}"},
            "allocatable": {"cpu": "96", "memory": "1Ti", "nvidia.com/gpu": "8", "pods": "110"},
        }
        for i in range(4)
    ]
    nodes[0]["used"] = {"nvidia.com/gpu": "2", "pods": "1"}
    return {
        "levels": list(DEFAULT_LEVELS),
        "nodes": nodes,
        "podSets": [
            {"name": "main", "count": count, "requests": {"nvidia.com/gpu": "1"}, **pod_set}
        ],
    }


def write(tmp_path: Path, document: dict[str, Any] | str) -> str:
    path = tmp_path / "request.json"
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return str(path)


def test_admitted_output_is_kueues_assignment_shape(tmp_path: Path) -> None:
    code, out, err = run_cli([write(tmp_path, request(14, required=RACK))])
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "admitted": True,
        "assignments": {
            "main": {
                "levels": [HOST],
                "domains": [{"values": ["n0"], "count": 6}, {"values": ["n1"], "count": 8}],
            }
        },
        "reason": None,
    }


def test_refusal_exits_0_with_the_reason_and_the_pod_set(tmp_path: Path) -> None:
    code, out, err = run_cli([write(tmp_path, request(17, required=RACK))])
    assert (code, err) == (0, "")
    assert json.loads(out) == {
        "admitted": False,
        "assignments": None,
        "reason": "allows to fit only 16 out of 17 pod(s)",
        "podSet": "main",
    }


def test_reads_the_request_from_stdin() -> None:
    code, out, _ = run_cli(["-"], stdin=json.dumps(request(4, preferred=HOST)))
    assert code == 0
    # The tightest host that takes all four: n0, with 6 of its 8 GPUs free.
    assert json.loads(out)["assignments"]["main"]["domains"] == [{"values": ["n0"], "count": 4}]


def test_algorithm_field_forces_the_algorithm(tmp_path: Path) -> None:
    document = request(10, unconstrained=True)
    auto = json.loads(run_cli([write(tmp_path, document)])[1])
    document["algorithm"] = "BestFit"
    best_fit = json.loads(run_cli([write(tmp_path, document)])[1])
    # Unconstrained defaults to LeastFreeCapacity: the fullest node (n0, 6 GPUs free) first.
    # BestFit starts from the emptiest and best-fits the remainder.
    assert auto["assignments"]["main"]["domains"] == [
        {"values": ["n0"], "count": 6},
        {"values": ["n1"], "count": 4},
    ]
    assert best_fit["assignments"]["main"]["domains"] == [
        {"values": ["n0"], "count": 2},
        {"values": ["n1"], "count": 8},
    ]


MALFORMED: list[tuple[str, dict[str, Any] | str, str]] = [
    ("unknown field", request(4, required=RACK, colour="red"), "podSets[0].colour: unknown field"),
    (
        "bad quantity",
        request(4, required=RACK) | {"nodes": [{"name": "n", "allocatable": {"cpu": "lots"}}]},
        "nodes[0].allocatable.cpu: invalid quantity 'lots'",
    ),
    (
        "two modes on one pod set",
        request(4, required=RACK, unconstrained=True),
        "podSets[0].unconstrained: required and unconstrained are mutually exclusive",
    ),
    (
        "count not a multiple of the slice size",
        request(6, required=RACK, sliceLevel=HOST, sliceSize=4),
        "podSets[0].count: 6 is not a multiple of the slice size 4",
    ),
    ("not JSON", "{", "invalid JSON: Input data was truncated"),
]


@pytest.mark.parametrize(
    ("document", "message"), [pytest.param(d, m, id=i) for i, d, m in MALFORMED]
)
def test_malformed_input_exits_2_with_one_line(
    tmp_path: Path, document: dict[str, Any] | str, message: str
) -> None:
    code, out, err = run_cli([write(tmp_path, document)])
    assert (code, out) == (2, "")
    assert err == f"kbatchd place: {message}\n"


def test_unreadable_file_exits_2(tmp_path: Path) -> None:
    code, out, err = run_cli([str(tmp_path / "missing.json")])
    assert (code, out) == (2, "")
    assert err.startswith("kbatchd place: cannot read ")
    assert err.endswith("No such file or directory\n")


@pytest.mark.parametrize(
    "argv",
    [pytest.param([], id="no argument"), pytest.param(["a.json", "b.json"], id="two arguments")],
)
def test_usage_errors_exit_2(argv: list[str]) -> None:
    code, out, err = run_cli(argv)
    assert (code, out) == (2, "")
    assert err.startswith("kbatchd place: expected one request file")
    assert err.count("\n") == 1


def test_help() -> None:
    code, out, _ = run_cli(["--help"])
    assert code == 0
    assert out.startswith("usage: kbatchd place REQUEST.json")


def _hosts(document: dict[str, Any], name: str) -> list[tuple[str, int]]:
    return [(d["values"][-1], d["count"]) for d in document["assignments"][name]["domains"]]


EXPECTED: dict[str, dict[str, list[tuple[str, int]]]] = {
    # Only b2-r2 has exactly 16 GPUs free: BestFit takes the tightest rack that fits.
    "gang-16-gpus-one-rack.json": {"trainer": [("gpu-b2-r2-n1", 8), ("gpu-b2-r2-n2", 8)]},
    # No rack has 40 GPUs free: the gang climbs to block b1 and spreads over both its racks.
    "preferred-rack-spills.json": {
        "trainer": [
            ("gpu-b1-r1-n3", 8),
            ("gpu-b1-r1-n4", 8),
            ("gpu-b1-r2-n1", 8),
            ("gpu-b1-r2-n2", 8),
            ("gpu-b1-r2-n3", 8),
        ]
    },
    # The CPU-only leader shares the first worker's node.
    "leader-workers.json": {
        "leader": [("gpu-b1-r2-n1", 1)],
        "workers": [
            ("gpu-b1-r2-n1", 1),
            ("gpu-b1-r2-n2", 1),
            ("gpu-b1-r2-n3", 1),
            ("gpu-b1-r2-n4", 1),
        ],
    },
    # Racks of 16 made of whole hosts of 8.
    "multi-layer-slices.json": {
        "trainer": [
            ("gpu-b1-r2-n1", 8),
            ("gpu-b1-r2-n2", 8),
            ("gpu-b1-r2-n3", 8),
            ("gpu-b1-r2-n4", 8),
        ]
    },
    # 20 GPUs per rack instead of BestFit's 32 + 8.
    "balanced-preferred-block.json": {
        "trainer": [
            ("gpu-b1-r1-n1", 4),
            ("gpu-b1-r1-n3", 8),
            ("gpu-b1-r1-n4", 8),
            ("gpu-b1-r2-n1", 8),
            ("gpu-b1-r2-n2", 8),
            ("gpu-b1-r2-n3", 4),
        ]
    },
}


def test_every_example_has_an_expectation() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.json")) == sorted(EXPECTED)


@pytest.mark.parametrize(("example", "expected"), list(EXPECTED.items()), ids=list(EXPECTED))
def test_examples(example: str, expected: dict[str, list[tuple[str, int]]]) -> None:
    code, out, err = run_cli([str(EXAMPLES / example)])
    assert (code, err) == (0, "")
    document = json.loads(out)
    assert document["admitted"] is True
    assert {name: _hosts(document, name) for name in expected} == expected
