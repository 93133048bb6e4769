"""`/openapi/v3`: every served kind has a schema that `kubectl explain` can walk, built from
the same field knowledge the decoder uses."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from daemon.sim import shapes
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import RESOURCES, Resource
from tests.daemon.sim.helpers import call

pytestmark = pytest.mark.anyio


def _resolve(document: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if "allOf" in schema:
        name = schema["allOf"][0]["$ref"].removeprefix("#/components/schemas/")
        resolved: dict[str, Any] = document["components"]["schemas"][name]
        return resolved
    return schema


async def _kind_schema(http: aiohttp.ClientSession, resource: Resource) -> tuple[Any, Any]:
    root = await call(http, "GET", "/openapi/v3")
    prefix = f"apis/{resource.group}/{resource.version}" if resource.group else "api/v1"
    document = (await call(http, "GET", root.body["paths"][prefix]["serverRelativeURL"])).body
    gvk = {"group": resource.group, "version": resource.version, "kind": resource.kind}
    (schema,) = [
        s
        for s in document["components"]["schemas"].values()
        if gvk in s.get("x-kubernetes-group-version-kind", ())
    ]
    return document, schema


@pytest.mark.parametrize("resource", RESOURCES, ids=lambda r: f"{r.group}/{r.kind}")
async def test_every_kind_has_a_described_schema(sim: SimCluster, resource: Resource) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        document, schema = await _kind_schema(http, resource)
    assert schema["type"] == "object"
    assert schema["description"]
    properties = schema["properties"]
    shape = shapes.object_shape(resource.kind, resource.group)
    assert shape is not None
    assert set(properties) == set(shape)
    for name in ("apiVersion", "kind"):
        assert properties[name]["type"] == "string"
        assert properties[name]["description"]
    metadata = properties["metadata"]
    assert metadata["description"]
    assert metadata["allOf"] == [
        {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    ]
    meta = _resolve(document, metadata)
    assert meta["properties"]["labels"]["additionalProperties"] == {"type": "string"}
    assert meta["properties"]["name"]["description"]


MAIN_FIELDS = [
    ("", "Pod", "spec", ["containers", "nodeName", "restartPolicy"]),
    ("", "Pod", "status", ["phase", "conditions", "podIP"]),
    ("batch", "Job", "spec", ["parallelism", "backoffLimit", "template", "podFailurePolicy"]),
    ("batch", "Job", "status", ["active", "succeeded", "conditions"]),
    ("", "Node", "spec", ["unschedulable", "taints"]),
    ("", "Node", "status", ["allocatable", "capacity", "conditions", "nodeInfo"]),
    ("jobset.x-k8s.io", "JobSet", "spec", ["replicatedJobs", "suspend", "failurePolicy"]),
    ("jobset.x-k8s.io", "JobSet", "status", ["terminalState", "restarts"]),
    ("scheduling.k8s.io", "PodGroup", "spec", ["schedulingPolicy", "podGroupTemplateRef"]),
    ("scheduling.k8s.io", "Workload", "spec", ["podGroupTemplates"]),
]


@pytest.mark.parametrize(("group", "kind", "part", "fields"), MAIN_FIELDS)
async def test_the_main_nested_types_list_their_fields_with_descriptions(
    sim: SimCluster, group: str, kind: str, part: str, fields: list[str]
) -> None:
    (resource,) = [r for r in RESOURCES if r.group == group and r.kind == kind]
    async with aiohttp.ClientSession(sim.url) as http:
        document, schema = await _kind_schema(http, resource)
    field = schema["properties"][part]
    assert field["description"]
    nested = _resolve(document, field)
    assert nested["type"] == "object"
    for name in fields:
        assert nested["properties"][name]["description"], name
    if kind == "Pod" and part == "spec":
        containers = nested["properties"]["containers"]
        assert containers["type"] == "array"
        container = _resolve(document, containers["items"])
        assert container["properties"]["image"] == {
            "description": "The image of this Container.",
            "type": "string",
        }
