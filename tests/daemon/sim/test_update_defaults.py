"""Defaulting runs on every decoded object, so an update or a patch that drops a defaulted
field gets it back (and, changing nothing else, writes nothing)."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS, PODS
from tests.daemon.sim.helpers import call, job_body, pod_body

pytestmark = pytest.mark.anyio

POD = "/api/v1/namespaces/default/pods/p"
JOB = "/apis/batch/v1/namespaces/default/jobs/j"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _without_pod_defaults(pod: dict[str, Any]) -> dict[str, Any]:
    del pod["spec"]["restartPolicy"]
    container = pod["spec"]["containers"][0]
    del container["imagePullPolicy"]
    del container["terminationMessagePath"]
    return pod


@pytest.mark.parametrize(
    ("method", "content_type", "body"),
    [
        ("PUT", "application/json", _without_pod_defaults),
        (
            "PATCH",
            JSON_PATCH,
            [
                {"op": "remove", "path": "/spec/restartPolicy"},
                {"op": "remove", "path": "/spec/containers/0/imagePullPolicy"},
                {"op": "remove", "path": "/spec/containers/0/terminationMessagePath"},
            ],
        ),
        (
            "PATCH",
            MERGE,
            {
                "spec": {
                    "restartPolicy": None,
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                }
            },
        ),
        (
            "PATCH",
            STRATEGIC,
            {
                "spec": {
                    "restartPolicy": None,
                    "containers": [
                        {"name": "main", "imagePullPolicy": None, "terminationMessagePath": None}
                    ],
                }
            },
        ),
    ],
)
async def test_a_pod_gets_its_defaults_back(
    sim: SimCluster, method: str, content_type: str, body: Any
) -> None:
    created = pod_body("p")
    created["spec"]["schedulerName"] = "kbatchd"  # nobody binds it: nothing else writes it
    async with aiohttp.ClientSession(sim.url) as http:
        assert (await call(http, "POST", POD.rsplit("/", 1)[0], created)).status == 201
        before = sim.get(PODS, "default", "p")
        assert before is not None
        payload = body(sim.get(PODS, "default", "p")) if callable(body) else body
        answer = await call(http, method, POD, payload, content_type=content_type)
    assert answer.status == 200, answer.body
    assert answer.body["spec"]["restartPolicy"] == "Always"
    container = answer.body["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "IfNotPresent"
    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert sim.get(PODS, "default", "p") == before  # nothing changed: nothing written


@pytest.mark.parametrize("content_type", [MERGE, STRATEGIC])
async def test_a_job_patch_is_defaulted_again(sim: SimCluster, content_type: str) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        jobs = JOB.rsplit("/", 1)[0]
        assert (await call(http, "POST", jobs, job_body("j", suspend=True))).status == 201
        before = sim.get(JOBS, "default", "j")
        assert before is not None
        dropped = dict.fromkeys(
            ("completionMode", "backoffLimit", "podReplacementPolicy", "parallelism"), None
        )
        answer = await call(http, "PATCH", JOB, {"spec": dropped}, content_type=content_type)
    assert answer.status == 200, answer.body
    spec = answer.body["spec"]
    assert spec["completionMode"] == "NonIndexed"
    assert spec["backoffLimit"] == 6
    assert spec["podReplacementPolicy"] == "TerminatingOrFailed"
    assert spec["parallelism"] == 1
    assert sim.get(JOBS, "default", "j") == before
