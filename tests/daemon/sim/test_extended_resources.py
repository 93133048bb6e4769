"""An extended resource (a GPU) is never overcommitted: the real API server wants its limit,
equal to the request; native resources may be requested alone."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.sim.validation import pod_spec


def spec(resources: dict[str, Any]) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "busybox", "resources": resources}]}


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        pytest.param({"requests": {"cpu": "1", "memory": "1Gi"}}, [], id="native-alone"),
        pytest.param(
            {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}},
            [],
            id="gpu-with-its-limit",
        ),
        pytest.param(
            {"requests": {"nvidia.com/gpu": "2"}},
            [
                (
                    "spec.containers[0].resources.limits",
                    "Limit must be set for non overcommitable resources",
                )
            ],
            id="gpu-without-a-limit",
        ),
        pytest.param(
            {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "2"}},
            [
                (
                    "spec.containers[0].resources.requests[nvidia.com/gpu]",
                    "must be equal to nvidia.com/gpu limit of 2",
                )
            ],
            id="gpu-request-below-its-limit",
        ),
        pytest.param({"limits": {"nvidia.com/gpu": "1"}}, [], id="gpu-limit-alone"),
    ],
)
def test_an_extended_resource_needs_an_equal_limit(
    resources: dict[str, Any], expected: list[tuple[str, str]]
) -> None:
    errors = pod_spec(spec(resources), "spec")
    assert [(e.path, e.detail) for e in errors] == expected
