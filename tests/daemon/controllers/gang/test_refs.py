"""A PodGroup's reference to its Workload template, in either API version."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.controllers.gang.projection import workload_ref


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"workloadRef": {"workloadName": "w", "templateName": "t"}}, ("w", "t"), id="v1beta1"
        ),
        pytest.param(
            {
                "podGroupTemplateRef": {
                    "workload": {"workloadName": "w", "podGroupTemplateName": "t"}
                }
            },
            ("w", "t"),
            id="v1alpha2",
        ),
        pytest.param({}, (None, None), id="standalone"),
        pytest.param({"workloadRef": {"workloadName": ""}}, (None, None), id="empty-names"),
        pytest.param({"podGroupTemplateRef": {"workload": "w"}}, (None, None), id="not-a-map"),
    ],
)
def test_the_reference_is_read_from_either_version(
    spec: dict[str, Any], expected: tuple[str | None, str | None]
) -> None:
    assert workload_ref(spec) == expected
