"""The topology generator and topology files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from daemon.sim import topology


def test_generated_names_labels_and_capacity() -> None:
    nodes = topology.generate("blocks=2,racks=4,hosts=8,gpus=8,cpu=96,memory=1Ti")
    assert len(nodes) == 64
    names = [n["metadata"]["name"] for n in nodes]
    assert names[0] == "b0-r0-h0"
    assert "b0-r1-h3" in names
    assert names[-1] == "b1-r3-h7"
    node = next(n for n in nodes if n["metadata"]["name"] == "b1-r2-h5")
    labels = node["metadata"]["labels"]
    assert labels[topology.BLOCK_LABEL] == "b1"
    assert labels[topology.RACK_LABEL] == "b1-r2"
    assert labels[topology.HOST_LABEL] == "b1-r2-h5"
    assert node["status"]["allocatable"] == {
        "cpu": "96",
        "memory": "1Ti",
        "pods": "110",
        "nvidia.com/gpu": "8",
    }
    ready = node["status"]["conditions"][0]
    assert (ready["type"], ready["status"]) == ("Ready", "True")


def test_pods_capacity_and_cpu_only_nodes() -> None:
    nodes = topology.generate("blocks=1,racks=1,hosts=1,gpus=0,pods=8")
    assert nodes[0]["status"]["allocatable"]["pods"] == "8"
    assert "nvidia.com/gpu" not in nodes[0]["status"]["allocatable"]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("blocks=0", ["blocks", "'0'"]),
        ("racks=two", ["racks", "'two'"]),
        ("memory=lots", ["memory", "'lots'"]),
        ("gpus=-1", ["gpus", "'-1'"]),
        ("zones=3", ["zones", "'3'"]),
        ("blocks", ["blocks"]),
    ],
)
def test_bad_specs_name_key_and_value(spec: str, words: list[str]) -> None:
    with pytest.raises(ValueError, match="topology") as err:
        topology.load(spec if "=" in spec else spec + "=")
    for word in words:
        assert word in str(err.value)


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(
        json.dumps(
            {
                "nodes": [
                    {
                        "name": "gpu-1",
                        "labels": {"pool": "a"},
                        "allocatable": {"nvidia.com/gpu": "4"},
                    },
                    {
                        "name": "cpu-1",
                        "taints": [{"key": "dedicated", "value": "x", "effect": "NoSchedule"}],
                        "unschedulable": True,
                    },
                    {"metadata": {"name": "raw"}, "status": {"allocatable": {"cpu": "1"}}},
                ]
            }
        )
    )
    nodes = topology.load(str(path))
    assert [n["metadata"]["name"] for n in nodes] == ["gpu-1", "cpu-1", "raw"]
    assert nodes[0]["metadata"]["labels"]["pool"] == "a"
    assert nodes[0]["status"]["allocatable"]["nvidia.com/gpu"] == "4"
    assert nodes[1]["spec"]["unschedulable"] is True
    assert nodes[2]["kind"] == "Node"


def test_yaml_file(tmp_path: Path) -> None:
    pytest.importorskip("yaml")
    path = tmp_path / "nodes.yaml"
    path.write_text("nodes:\n- name: n1\n  allocatable: {cpu: '4'}\n")
    assert topology.load(str(path))[0]["status"]["allocatable"]["cpu"] == "4"


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("{not json", ["invalid JSON"]),
        ('{"nodes": [{"labels": {}}]}', ["nodes[0].name"]),
        (
            '{"nodes": [{"name": "x", "allocatable": {"cpu": "many"}}]}',
            ["allocatable.cpu", "'many'"],
        ),
        ('{"nodes": 3}', ["expected a list"]),
    ],
)
def test_bad_files(tmp_path: Path, content: str, words: list[str]) -> None:
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="topology") as err:
        topology.load(str(path))
    for word in words:
        assert word in str(err.value)


def test_missing_file() -> None:
    with pytest.raises(ValueError, match="cannot read"):
        topology.load("/nonexistent/topology.json")
