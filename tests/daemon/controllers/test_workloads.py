"""Workload and PodGroup names and bodies (`daemon.controllers.workloads`). The names are the
ones upstream's Job controller gave on the real control planes (1.36.3 and 1.37.2)."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.controllers.workloads import (
    V1ALPHA2,
    V1BETA1,
    GroupTemplate,
    OwnerRef,
    podgroup_body,
    podgroup_name,
    template_name,
    workload_body,
    workload_name,
)


@pytest.mark.parametrize(
    ("job", "uid", "name"),
    [
        pytest.param(
            "gang-job-with-a-name",
            "3fce18ec-5063-4c22-9605-6e9cf9580618",
            "gang-job-with-a-name-564fb49f46",
            id="kube-controller-manager-1.37.2",
        ),
        pytest.param("j" * 253, "u", "j" * 242 + "-548bf4f8b6", id="cut-to-a-name"),
    ],
)
def test_workload_name_is_upstreams(job: str, uid: str, name: str) -> None:
    assert workload_name(job, uid) == name
    assert len(workload_name(job, uid)) <= 253


@pytest.mark.parametrize(
    ("workload", "template", "name"),
    [
        pytest.param(
            "gang-job-with-a-name-85f5845888",
            "gang-job-with-a-name-pgt-0",
            "gang-job-with-a-name-85f5845888-gang-job-with-a-name-pgt-0-58f5b7c9fb",
            id="kube-controller-manager-1.37.2",
        ),
        pytest.param(
            "gang-job-with-a-name-7c497c8dc",
            "gang-job-with-a-name-pgt-0",
            "gang-job-with-a-name-7c497c8dc-gang-job-with-a-name-pgt-0-5f5f59645f",
            id="kube-controller-manager-1.36.3",
        ),
    ],
)
def test_podgroup_name_is_upstreams(workload: str, template: str, name: str) -> None:
    assert podgroup_name(workload, template) == name


@pytest.mark.parametrize(
    ("workload", "template", "kept"),
    [
        pytest.param("w" * 200, "t" * 20, (200 - 0, 20), id="short-template-keeps-its-length"),
        pytest.param("w" * 20, "t" * 200, (20, 200), id="short-workload-keeps-its-length"),
        pytest.param("w" * 240, "t" * 60, (240 - 59, 60), id="workload-gives-way"),
        pytest.param("w" * 60, "t" * 240, (60, 240 - 59), id="template-gives-way"),
        pytest.param("w" * 200, "t" * 200, (121, 120), id="both-long-split-evenly"),
    ],
)
def test_podgroup_name_fits(workload: str, template: str, kept: tuple[int, int]) -> None:
    name = podgroup_name(workload, template)
    assert len(name) <= 253
    kept_workload, kept_template = kept
    assert name.count("w") == min(kept_workload, len(workload))
    assert name.count("t") == min(kept_template, len(template))


def test_template_name() -> None:
    assert template_name("train") == "train-pgt-0"


GANG = GroupTemplate("t", 4, "topology.kubernetes.io/rack", "all", "high")
BASIC = GroupTemplate("t", None)
JOB = OwnerRef("batch/v1", "Job", "train", "uid-1", controller=True)


@pytest.mark.parametrize(
    ("version", "template", "spec"),
    [
        pytest.param(
            V1BETA1,
            GANG,
            {
                "workloadRef": {"workloadName": "w", "templateName": "t"},
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
                "disruptionMode": {"all": {}},
                "priorityClassName": "high",
            },
            id="v1beta1-gang",
        ),
        pytest.param(
            V1ALPHA2,
            GANG,
            {
                "podGroupTemplateRef": {
                    "workload": {"workloadName": "w", "podGroupTemplateName": "t"}
                },
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
            },
            id="v1alpha2-leaves-out-what-a-gate-forbids",
        ),
        pytest.param(
            V1BETA1,
            BASIC,
            {
                "workloadRef": {"workloadName": "w", "templateName": "t"},
                "schedulingPolicy": {"basic": {}},
            },
            id="v1beta1-basic",
        ),
    ],
)
def test_podgroup_body(version: str, template: GroupTemplate, spec: dict[str, Any]) -> None:
    body = podgroup_body(version, "w", template, [JOB])
    assert body["apiVersion"] == version
    assert body["kind"] == "PodGroup"
    assert body["spec"] == spec
    assert body["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "train",
            "uid": "uid-1",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def test_workload_body_names_its_controller_and_templates() -> None:
    body = workload_body(V1BETA1, ("batch", "Job", "train"), [GANG], JOB)
    assert body["spec"] == {
        "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "train"},
        "podGroupTemplates": [
            {
                "name": "t",
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "schedulingConstraints": {"topology": [{"key": "topology.kubernetes.io/rack"}]},
                "disruptionMode": {"all": {}},
                "priorityClassName": "high",
            }
        ],
    }
