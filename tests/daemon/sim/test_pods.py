"""Pod update rules of the real API server: the spec is immutable but for images,
activeDeadlineSeconds, added tolerations, removed scheduling gates and, while gated, added
node selector terms; status writes cannot leave a terminal phase."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tests.daemon.sim.helpers import pod_body

pytestmark = pytest.mark.anyio
MERGE = "application/merge-patch+json"


async def refused(call: Any) -> dict[str, Any]:
    with pytest.raises(ApiException) as err:
        await call
    assert err.value.status == 422, err.value.body
    body: dict[str, Any] = json.loads(err.value.body)
    return body


async def gated_pod(core: client.CoreV1Api, name: str) -> None:
    body = pod_body(name)
    body["spec"]["schedulingGates"] = [{"name": "a"}, {"name": "b"}]
    body["spec"]["nodeSelector"] = {"pool": "gpu"}
    await core.create_namespaced_pod("default", body)


LIMIT = 256 * 1024  # all annotations of an object together, keys and values, in bytes


@pytest.mark.parametrize(
    ("on", "sizes", "accepted"),
    [
        # Each size is one annotation's key and value together.
        ("create", [LIMIT], True),
        ("create", [LIMIT + 1], False),
        ("create", [LIMIT // 2, LIMIT // 2 + 1], False),  # what counts is the sum
        ("patch", [LIMIT], True),
        ("patch", [LIMIT + 1], False),
    ],
)
async def test_annotations_are_limited_in_total(
    api: client.ApiClient, on: str, sizes: list[int], accepted: bool
) -> None:
    core = client.CoreV1Api(api)
    notes = {f"a{i}": "x" * (size - 2) for i, size in enumerate(sizes)}
    if on == "create":
        call = core.create_namespaced_pod("default", pod_body("p", **notes))
    else:
        await core.create_namespaced_pod("default", pod_body("p"))
        call = core.patch_namespaced_pod(
            "p", "default", {"metadata": {"annotations": notes}}, _content_type=MERGE
        )
    if accepted:
        await call
        return
    status = await refused(call)
    assert status["details"]["causes"] == [
        {
            "reason": "FieldValueTooLong",
            "message": f"Too long: must have at most {LIMIT} bytes",
            "field": "metadata.annotations",
        }
    ]


async def test_mutable_pod_fields(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await gated_pod(core, "p")
    patch = {
        "spec": {
            "containers": [{"name": "main", "image": "busybox:1.37"}],
            "activeDeadlineSeconds": 100,
            "nodeSelector": {"pool": "gpu", "rack": "r1"},
            # Gates merge by name under strategic merge: removing one takes a directive.
            "schedulingGates": [{"name": "a", "$patch": "delete"}],
        }
    }
    pod = await core.patch_namespaced_pod("p", "default", patch)
    assert pod.spec.containers[0].image == "busybox:1.37"
    assert pod.spec.node_selector == {"pool": "gpu", "rack": "r1"}
    assert [g.name for g in pod.spec.scheduling_gates] == ["b"]
    raw = api.sanitize_for_serialization(pod)
    raw["spec"]["tolerations"].append({"key": "gpu", "operator": "Exists", "effect": "NoSchedule"})
    pod = await core.replace_namespaced_pod("p", "default", raw)
    assert pod.spec.tolerations[-1].key == "gpu"


async def test_immutable_pod_fields(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await gated_pod(core, "p")
    status = await refused(
        core.patch_namespaced_pod("p", "default", {"spec": {"schedulingGates": [{"name": "c"}]}})
    )
    assert status["details"]["causes"][0]["field"] == "spec.schedulingGates"
    status = await refused(
        core.patch_namespaced_pod("p", "default", {"spec": {"nodeSelector": {"pool": "cpu"}}})
    )
    assert status["details"]["causes"][0]["field"] == "spec"
    status = await refused(
        core.patch_namespaced_pod(
            "p",
            "default",
            {"spec": {"containers": [{"name": "main", "env": [{"name": "A", "value": "1"}]}]}},
        )
    )
    assert "pod updates may not change fields" in status["message"]
    # Once ungated, the node selector is frozen too.
    await core.patch_namespaced_pod(
        "p", "default", {"spec": {"schedulingGates": None}}, _content_type=MERGE
    )
    await refused(
        core.patch_namespaced_pod(
            "p", "default", {"spec": {"nodeSelector": {"pool": "gpu", "x": "y"}}}
        )
    )


async def test_terminal_phase_is_final(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = pod_body("p")
    body["spec"]["schedulerName"] = "kbatchd"
    await core.create_namespaced_pod("default", body)
    await core.patch_namespaced_pod_status(
        "p", "default", {"status": {"phase": "Failed"}}, _content_type=MERGE
    )
    status = await refused(
        core.patch_namespaced_pod_status(
            "p", "default", {"status": {"phase": "Running"}}, _content_type=MERGE
        )
    )
    assert status["details"]["causes"][0]["field"] == "status.phase"
