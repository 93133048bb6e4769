"""`clone`: a deep copy of JSON data."""

from __future__ import annotations

from typing import Any

import pytest

from events.jsondata import clone


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({}, id="empty"),
        pytest.param(
            {"containers": [{"name": "main", "resources": {"limits": {"cpu": "1"}}}]},
            id="pod-spec",
        ),
        pytest.param([1, 2.5, True, None, "ü", {"a": [[]]}], id="mixed-list"),
        pytest.param({"n": 2**53, "neg": -1, "f": 1e-7}, id="numbers"),
    ],
)
def test_clone_is_equal_and_shares_nothing(value: Any) -> None:
    copied = clone(value)
    assert copied == value
    if isinstance(value, dict) and value:
        first = next(iter(value))
        copied[first] = "changed"
        assert value[first] != "changed"


def test_nested_containers_are_new() -> None:
    spec = {"containers": [{"env": [{"name": "A"}]}]}
    copied = clone(spec)
    copied["containers"][0]["env"].append({"name": "B"})
    assert spec == {"containers": [{"env": [{"name": "A"}]}]}
