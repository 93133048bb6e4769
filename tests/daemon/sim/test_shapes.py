"""The decoder's type checks: the Go field path and types in the 400 a wrong JSON type gets."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.sim import shapes
from daemon.sim.errors import ApiError


def _message(obj: Any) -> str:
    with pytest.raises(ApiError) as err:
        shapes.check("Pod", "v1", obj)
    assert err.value.code == 400
    return str(err.value)


@pytest.mark.parametrize(
    ("obj", "tail"),
    [
        ({"metadata": {"name": 3}}, "number into Go struct field Pod.metadata.name of type string"),
        (
            {"metadata": {"labels": {"a": 1}}},
            "number into Go struct field Pod.metadata.labels[a] of type string",
        ),
        (
            {"spec": {"containers": [{"name": "a"}, {"resources": {"requests": {"cpu": True}}}]}},
            "bool into Go struct field Pod.spec.containers[1].resources.requests[cpu] of type "
            "string",
        ),
        (
            {"spec": {"containers": "x"}},
            "string into Go struct field Pod.spec.containers of type []struct",
        ),
        (
            {"status": {"conditions": [{"type": 3}]}},
            "number into Go struct field Pod.status.conditions[0].type of type string",
        ),
        ({"status": "x"}, "string into Go struct field Pod.status of type struct"),
    ],
)
def test_a_wrong_type_names_its_field_path(obj: Any, tail: str) -> None:
    assert _message(obj).endswith("cannot unmarshal " + tail)


def test_nulls_and_unknown_fields_pass() -> None:
    shapes.check("Pod", "v1", {"metadata": {"name": None, "x": 1}, "spec": {"containers": None}})
    shapes.check("Widget", "v1", {"spec": {"anything": [1, "a"]}})


def test_a_status_alone_is_checked_like_the_status_of_an_object() -> None:
    status = {"conditions": [{"type": "Ready", "status": False}]}
    with pytest.raises(ApiError) as alone:
        shapes.check_status("Pod", "v1", status)
    with pytest.raises(ApiError) as whole:
        shapes.check("Pod", "v1", {"status": status})
    assert str(alone.value) == str(whole.value)
    assert str(alone.value).endswith("Pod.status.conditions[0].status of type string")
    shapes.check_status("Pod", "v1", {"phase": "Running", "conditions": []})


@pytest.mark.parametrize(
    ("kind", "obj", "tail"),
    [
        (
            "PodGroup",
            {"spec": {"schedulingPolicy": {"gang": {"minCount": "4"}}}},
            "string into Go struct field PodGroup.spec.schedulingPolicy.gang.minCount of type "
            "int32",
        ),
        (
            "PodGroup",
            {"spec": {"schedulingConstraints": {"topology": [{"key": 7}]}}},
            "number into Go struct field PodGroup.spec.schedulingConstraints.topology[0].key of "
            "type string",
        ),
        (
            "Workload",
            {"spec": {"podGroupTemplates": [{"name": "w", "schedulingPolicy": {"gang": 2}}]}},
            "number into Go struct field Workload.spec.podGroupTemplates[0].schedulingPolicy.gang "
            "of type struct",
        ),
    ],
)
def test_scheduling_objects_are_typed_as_the_server_decodes_them(
    kind: str, obj: Any, tail: str
) -> None:
    with pytest.raises(ApiError) as err:
        shapes.check(kind, "v1alpha2", obj)
    assert err.value.code == 400
    assert str(err.value).endswith("cannot unmarshal " + tail)
