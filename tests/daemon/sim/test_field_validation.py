"""`fieldValidation`: fields no Go type of the kind declares are never stored; Strict refuses
the write, Warn (the default) answers a Warning header per field, Ignore says nothing."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from daemon.sim import shapes
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import RESOURCES
from tests.daemon.sim.helpers import Answer, call, job_body, pod_body

pytestmark = pytest.mark.anyio

PODS = "/api/v1/namespaces/default/pods"
JOBSETS = "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def _with_unknown_fields() -> dict[str, Any]:
    body = pod_body("odd")
    body["spec"]["schedulerName"] = "kbatchd"  # nobody binds it: nothing else writes it
    body["metadata"]["foo"] = 1
    body["spec"]["foo"] = {"x": 1}
    body["spec"]["containers"][0]["zz"] = 2
    body["top"] = 3
    return body


# In the order of the document: `pod_body` lists the containers first.
UNKNOWN = ["metadata.foo", "spec.containers[0].zz", "spec.foo", "top"]


def warnings(answer: Answer) -> list[str]:
    return answer.headers.getall("Warning", [])


@pytest.mark.parametrize(
    ("kind", "obj", "unknown", "kept"),
    [
        (
            "Pod",
            {"spec": {"a": 1, "containers": [{"name": "c"}, {"b": None, "env": [{"c": 1}]}]}},
            ["spec.a", "spec.containers[1].b", "spec.containers[1].env[0].c"],
            {"spec": {"containers": [{"name": "c"}, {"env": [{}]}]}},
        ),
        (
            "Pod",
            {"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "securityContext": {"x": 1}}},
            [],
            {"spec": {"volumes": [{"name": "v", "emptyDir": {}}], "securityContext": {"x": 1}}},
        ),
        (
            "Job",
            {"spec": {"template": {"metadata": {"q": 1}, "spec": {"containers": []}}}},
            ["spec.template.metadata.q"],
            {"spec": {"template": {"metadata": {}, "spec": {"containers": []}}}},
        ),
        (
            "JobSet",
            {"spec": {"replicatedJobs": [{"template": {"metadata": {"generateName": "x"}}}]}},
            ["spec.replicatedJobs[0].template.metadata.generateName"],
            {"spec": {"replicatedJobs": [{"template": {"metadata": {}}}]}},
        ),
        (
            "Node",
            {"metadata": {"labels": {"any": "x"}}, "x": 1},
            ["x"],
            {"metadata": {"labels": {"any": "x"}}},
        ),
        ("PriorityClass", {"value": 1, "valu": 2}, ["valu"], {"value": 1}),
    ],
)
def test_prune_drops_undeclared_fields_in_document_order(
    kind: str, obj: dict[str, Any], unknown: list[str], kept: dict[str, Any]
) -> None:
    assert shapes.prune(kind, obj) == unknown
    assert obj == kept


def test_every_served_kind_declares_its_fields() -> None:
    for resource in RESOURCES:
        shape = shapes.object_shape(resource.kind, resource.group)
        assert shape is not None, resource.kind
        assert {"apiVersion", "kind", "metadata"} <= set(shape)


async def test_strict_create_names_every_unknown_field_and_stores_nothing(sim: SimCluster) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        answer = await call(http, "POST", PODS + "?fieldValidation=Strict", _with_unknown_fields())
        assert answer.status == 400
        assert answer.body["reason"] == "BadRequest"
        listed = ", ".join(f'unknown field "{p}"' for p in UNKNOWN)
        assert answer.body["message"] == (
            f'Pod in version "v1" cannot be handled as a Pod: strict decoding error: {listed}'
        )
        assert (await call(http, "GET", PODS + "/odd")).status == 404
        jobset = {
            "metadata": {"name": "js"},
            "spec": {"foo": 1, "replicatedJobs": [{"name": "w", "template": job_body("w")}]},
        }
        refused = await call(http, "POST", JOBSETS + "?fieldValidation=Strict", jobset)
        assert refused.status == 400
        assert refused.body["message"] == (
            'JobSet in version "v1alpha2" cannot be handled as a JobSet: strict decoding error: '
            'unknown field "spec.foo"'
        )


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("", [json.dumps(f'unknown field "{p}"') for p in UNKNOWN]),
        ("?fieldValidation=Warn", [json.dumps(f'unknown field "{p}"') for p in UNKNOWN]),
        ("?fieldValidation=Ignore", []),
    ],
)
async def test_warn_and_ignore_store_the_object_without_its_unknown_fields(
    sim: SimCluster, query: str, expected: list[str]
) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        created = await call(http, "POST", PODS + query, _with_unknown_fields())
        assert created.status == 201
        assert warnings(created) == [f"299 - {w}" for w in expected]
        stored = sim.get(PODS_RESOURCE, "default", "odd")
        assert stored is not None
        assert "top" not in stored
        assert "foo" not in stored["metadata"]
        assert "foo" not in stored["spec"]
        assert "zz" not in stored["spec"]["containers"][0]
        assert created.body == stored
        stored["spec"]["bar"] = 1
        updated = await call(http, "PUT", PODS + "/odd" + query, stored)
        assert updated.status == 200
        assert warnings(updated) == (['299 - "unknown field \\"spec.bar\\""'] if expected else [])
        assert "bar" not in updated.body["spec"]
        stored["spec"]["bar"] = 1
        strict = await call(http, "PUT", PODS + "/odd?fieldValidation=Strict", stored)
        assert strict.status == 400
        assert strict.body["message"].endswith('strict decoding error: unknown field "spec.bar"')


PODS_RESOURCE = next(r for r in RESOURCES if r.kind == "Pod")


@pytest.mark.parametrize(
    ("content_type", "patch", "quoted"),
    [
        (
            STRATEGIC,
            {"spec": {"foo": 1}, "metadata": {"bar": 1}},
            '"map[metadata:map[bar:1] spec:map[foo:1]]"',
        ),
        (MERGE, {"spec": {"foo": 1}, "metadata": {"bar": 1}}, None),
        (
            JSON_PATCH,
            [
                {"op": "add", "path": "/spec/foo", "value": 1},
                {"op": "add", "path": "/metadata/bar", "value": 1},
            ],
            None,
        ),
    ],
)
async def test_every_patch_type_checks_its_result(
    sim: SimCluster, content_type: str, patch: Any, quoted: str | None
) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        body = pod_body("p")
        body["spec"]["schedulerName"] = "kbatchd"
        assert (await call(http, "POST", PODS, body)).status == 201
        before = sim.get(PODS_RESOURCE, "default", "p")
        strict = await call(
            http, "PATCH", PODS + "/p?fieldValidation=Strict", patch, content_type=content_type
        )
        assert strict.status == 422
        assert strict.body["reason"] == "Invalid"
        text = 'strict decoding error: unknown field "metadata.bar", unknown field "spec.foo"'
        (cause,) = strict.body["details"]["causes"]
        assert cause["field"] == "patch"
        assert cause["reason"] == "FieldValueInvalid"
        assert cause["message"].endswith(text)
        assert strict.body["message"] == f' "" is invalid: patch: {cause["message"]}'
        value = cause["message"].removeprefix("Invalid value: ").removesuffix(": " + text)
        if quoted is not None:
            assert value == quoted
        else:  # the patched object, unknown fields and all
            patched = json.loads(json.loads(value))
            assert patched["spec"]["foo"] == 1
            assert patched["metadata"]["name"] == "p"
        assert sim.get(PODS_RESOURCE, "default", "p") == before
        warned = await call(http, "PATCH", PODS + "/p", patch, content_type=content_type)
        assert warned.status == 200
        assert warnings(warned) == [
            '299 - "unknown field \\"metadata.bar\\""',
            '299 - "unknown field \\"spec.foo\\""',
        ]
        assert sim.get(PODS_RESOURCE, "default", "p") == before


async def test_an_unsupported_mode_is_refused_like_the_options_decoder(sim: SimCluster) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        cases = [("POST", PODS, "CreateOptions"), ("PATCH", PODS + "/x", "PatchOptions")]
        for method, path, options in cases:
            answer = await call(
                http, method, path + "?fieldValidation=Loose", {}, content_type=MERGE
            )
            assert answer.status == 422
            assert answer.body["message"] == (
                f'{options}.meta.k8s.io "" is invalid: fieldValidation: Unsupported value: '
                '"Loose": supported values: "", "Ignore", "Strict", "Warn"'
            )
