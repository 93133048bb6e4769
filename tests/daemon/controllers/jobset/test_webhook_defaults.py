"""A replicatedJob's Job template gets JobSet's webhook defaults where a cluster has no webhook."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from daemon.controllers.jobset.spec import webhook_job_template


def template(
    job: dict[str, Any] | None = None, pod: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"parallelism": 2, **(job or {})}
    spec["template"] = {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"containers": [], **(pod or {})},
    }
    return {"metadata": {}, "spec": spec}


@pytest.mark.parametrize(
    ("given", "mode", "restart"),
    [
        pytest.param(template(), "Indexed", "OnFailure", id="nothing-set"),
        pytest.param(
            template({"completionMode": "NonIndexed"}), "NonIndexed", "OnFailure", id="mode-kept"
        ),
        pytest.param(
            template(pod={"restartPolicy": "Never"}), "Indexed", "Never", id="restart-kept"
        ),
    ],
)
def test_missing_defaults_are_filled_and_set_ones_kept(
    given: dict[str, Any], mode: str, restart: str
) -> None:
    stored = copy.deepcopy(given)
    shaped = webhook_job_template(given)
    assert shaped["spec"]["completionMode"] == mode
    assert shaped["spec"]["template"]["spec"]["restartPolicy"] == restart
    assert shaped["spec"]["parallelism"] == 2
    assert shaped["spec"]["template"]["metadata"] == {"labels": {"a": "b"}}
    assert given == stored, "the stored template was changed"


def test_a_template_with_every_default_is_returned_as_it_is() -> None:
    given = template({"completionMode": "Indexed"}, {"restartPolicy": "Never"})
    assert webhook_job_template(given) is given
