"""Patch semantics: JSON merge patch, strategic merge patch directives, JSON patch."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.sim.errors import ApiError
from daemon.sim.patch import PatchError, json_patch, merge_patch, strategic_merge_patch


def test_merge_patch() -> None:
    target = {"a": {"b": 1, "c": 2}, "l": [1, 2], "x": 1}
    assert merge_patch(target, {"a": {"b": None, "d": 3}, "l": [3], "x": None}) == {
        "a": {"c": 2, "d": 3},
        "l": [3],
    }
    assert target == {"a": {"b": 1, "c": 2}, "l": [1, 2], "x": 1}  # not mutated


def pod_spec() -> dict[str, Any]:
    return {
        "containers": [
            {
                "name": "a",
                "image": "1",
                "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "1"}],
            },
            {"name": "b", "image": "1"},
        ],
        "tolerations": [{"key": "k1", "operator": "Exists"}],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }


def test_strategic_merge_by_key() -> None:
    patched = strategic_merge_patch(
        {"spec": pod_spec()},
        {
            "spec": {
                "containers": [
                    {
                        "name": "a",
                        "env": [{"name": "Y", "value": "2"}, {"name": "Z", "value": "3"}],
                    },
                    {"name": "c", "image": "new"},
                ],
                "tolerations": [{"key": "k2", "operator": "Exists"}],
            }
        },
    )
    containers = patched["spec"]["containers"]
    assert [c["name"] for c in containers] == ["a", "b", "c"]
    assert containers[0]["image"] == "1"
    assert containers[0]["env"] == [
        {"name": "X", "value": "1"},
        {"name": "Y", "value": "2"},
        {"name": "Z", "value": "3"},
    ]
    # Tolerations are an atomic list in the real API: replaced, not merged.
    assert patched["spec"]["tolerations"] == [{"key": "k2", "operator": "Exists"}]


def test_strategic_directives() -> None:
    target = {
        "spec": pod_spec(),
        "metadata": {
            "finalizers": ["a", "b"],
            "ownerReferences": [{"uid": "1", "name": "x"}, {"uid": "2", "name": "y"}],
        },
    }
    patched = strategic_merge_patch(
        target,
        {
            "metadata": {
                "$deleteFromPrimitiveList/finalizers": ["a"],
                "ownerReferences": [{"uid": "1", "$patch": "delete"}],
            },
            "spec": {
                "containers": [{"name": "b", "$patch": "delete"}],
                "volumes": [{"$patch": "replace"}, {"name": "w", "hostPath": {"path": "/x"}}],
                "$setElementOrder/containers": [{"name": "a"}],
            },
        },
    )
    assert patched["metadata"]["finalizers"] == ["b"]
    assert patched["metadata"]["ownerReferences"] == [{"uid": "2", "name": "y"}]
    assert [c["name"] for c in patched["spec"]["containers"]] == ["a"]
    assert patched["spec"]["volumes"] == [{"name": "w", "hostPath": {"path": "/x"}}]
    replaced = strategic_merge_patch({"a": {"x": 1, "y": 2}}, {"a": {"$patch": "replace", "z": 3}})
    assert replaced == {"a": {"z": 3}}
    retained = strategic_merge_patch(
        {"v": {"emptyDir": {}, "name": "v"}},
        {"v": {"$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/"}}},
    )
    assert retained == {"v": {"name": "v", "hostPath": {"path": "/"}}}
    with pytest.raises(ApiError) as err:
        strategic_merge_patch(
            {"spec": pod_spec()}, {"spec": {"containers": [{"image": "no-name"}]}}
        )
    assert err.value.code == 422


def test_json_patch_operations() -> None:
    doc = {"a": {"b": [1, 2, 3]}, "c": "x", "k~/": 1}
    ops = [
        {"op": "add", "path": "/a/b/1", "value": 9},
        {"op": "add", "path": "/a/b/-", "value": 7},
        {"op": "remove", "path": "/a/b/0"},
        {"op": "replace", "path": "/c", "value": "y"},
        {"op": "copy", "from": "/c", "path": "/d"},
        {"op": "move", "from": "/d", "path": "/e"},
        {"op": "test", "path": "/k~0~1", "value": 1},
    ]
    assert json_patch(doc, ops) == {"a": {"b": [9, 2, 3, 7]}, "c": "y", "e": "y", "k~/": 1}
    assert doc["a"]["b"] == [1, 2, 3]
    with pytest.raises(PatchError, match="test failed"):
        json_patch(doc, [{"op": "test", "path": "/c", "value": "z"}])
    with pytest.raises(PatchError, match="missing"):
        json_patch(doc, [{"op": "replace", "path": "/nope/x", "value": 1}])
    with pytest.raises(ApiError):
        json_patch(doc, [{"op": "frobnicate", "path": "/c"}])
    with pytest.raises(ApiError):
        json_patch(doc, {"op": "add"})
