"""The simulated API server through kubernetes-asyncio: CRUD, patches, conflicts, lists with
selectors and pages, status subresources, binding, and the shape of errors."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from daemon.sim.cluster import SimCluster
from daemon.sim.resources import PODS
from tests.daemon.sim.helpers import job_body, pod_body

pytestmark = pytest.mark.anyio


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


async def test_discovery_and_version(api: client.ApiClient) -> None:
    version = await client.VersionApi(api).get_code()
    assert version.major == "1"
    core = await client.CoreV1Api(api).get_api_resources()
    names = {r.name for r in core.resources}
    assert {"pods", "pods/status", "pods/binding", "pods/eviction", "nodes", "namespaces"} <= names
    groups = await client.ApisApi(api).get_api_versions()
    assert {"batch", "jobset.x-k8s.io", "scheduling.k8s.io", "coordination.k8s.io"} <= {
        g.name for g in groups.groups
    }
    batch = await client.BatchV1Api(api).get_api_resources()
    assert {"jobs", "jobs/status"} <= {r.name for r in batch.resources}


async def test_pod_create_defaults_get_list_delete(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    body = pod_body("p1")
    body["spec"]["schedulerName"] = "kbatchd"  # nobody binds it: stays Pending
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "2", "memory": "1Gi"}}
    pod = await core.create_namespaced_pod("default", body)
    assert pod.metadata.uid
    assert pod.metadata.resource_version
    assert pod.metadata.creation_timestamp
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.spec.restart_policy == "Always"
    assert pod.status.phase == "Pending"
    assert pod.spec.containers[0].resources.requests == {"cpu": "2", "memory": "1Gi"}
    assert pod.status.qos_class == "Guaranteed"
    got = await core.read_namespaced_pod("p1", "default")
    assert got.metadata.uid == pod.metadata.uid
    listed = await core.list_namespaced_pod("default")
    assert [p.metadata.name for p in listed.items] == ["p1"]
    assert int(listed.metadata.resource_version) >= int(pod.metadata.resource_version)
    everywhere = await core.list_pod_for_all_namespaces()
    assert [p.metadata.name for p in everywhere.items] == ["p1"]
    await core.delete_namespaced_pod("p1", "default")  # unbound: gone at once
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_pod("p1", "default")
    assert err.value.status == 404
    status = status_of(err.value)
    assert status["kind"] == "Status"
    assert status["reason"] == "NotFound"
    assert status["message"] == 'pods "p1" not found'
    assert status["details"] == {"name": "p1", "kind": "pods"}


async def test_create_conflicts_and_missing_namespace(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_body("dup"))
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", pod_body("dup"))
    assert err.value.status == 409
    assert status_of(err.value)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("nowhere", pod_body("x"))
    assert err.value.status == 404
    assert status_of(err.value)["message"] == 'namespaces "nowhere" not found'
    await core.create_namespace({"metadata": {"name": "team-a"}})
    pod = await core.create_namespaced_pod("team-a", pod_body("x"))
    assert pod.metadata.namespace == "team-a"


async def test_generate_name(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = pod_body("")
    body["metadata"] = {"generateName": "worker-"}
    pod = await core.create_namespaced_pod("default", body)
    assert pod.metadata.name.startswith("worker-")
    assert len(pod.metadata.name) == len("worker-") + 5


async def test_stale_put_is_409(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", pod_body("p"))
    first = await core.read_namespaced_pod("p", "default")
    first.metadata.labels = {"a": "1"}
    updated = await core.replace_namespaced_pod("p", "default", first)
    assert updated.metadata.labels == {"a": "1"}
    assert updated.metadata.resource_version != first.metadata.resource_version
    first.metadata.labels = {"a": "2"}  # still carries the old resourceVersion
    with pytest.raises(ApiException) as err:
        await core.replace_namespaced_pod("p", "default", first)
    assert err.value.status == 409
    status = status_of(err.value)
    assert status["reason"] == "Conflict"
    assert "the object has been modified" in status["message"]


async def test_three_patch_types(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = pod_body("p")
    body["spec"]["containers"] = [
        {"name": "a", "image": "img:1", "env": [{"name": "X", "value": "1"}]},
        {"name": "b", "image": "img:1"},
    ]
    body["metadata"]["finalizers"] = ["example.com/keep"]
    # No scheduler serves it, so nothing but these patches changes it: the agent binding and
    # starting the pod between two patches moved its resourceVersion past the JSON patch's
    # `test` operation below, about half of the runs.
    body["spec"]["schedulerName"] = "nobody"
    await core.create_namespaced_pod("default", body)
    # JSON merge patch: maps merge, null deletes.
    merged = await core.patch_namespaced_pod(
        "p",
        "default",
        {"metadata": {"labels": {"x": "1", "y": "2"}}},
        _content_type="application/merge-patch+json",
    )
    assert merged.metadata.labels == {"x": "1", "y": "2"}
    merged = await core.patch_namespaced_pod(
        "p",
        "default",
        {"metadata": {"labels": {"y": None}}},
        _content_type="application/merge-patch+json",
    )
    assert merged.metadata.labels == {"x": "1"}
    # Strategic merge: containers and env merge by name, finalizers merge as a set.
    patched = await core.patch_namespaced_pod(
        "p",
        "default",
        {
            "metadata": {"finalizers": ["example.com/other"]},
            "spec": {"containers": [{"name": "a", "image": "img:2"}]},
        },
    )
    images = {c.name: c.image for c in patched.spec.containers}
    assert images == {"a": "img:2", "b": "img:1"}
    assert [e.name for e in patched.spec.containers[0].env] == ["X"]
    assert patched.metadata.finalizers == ["example.com/keep", "example.com/other"]
    patched = await core.patch_namespaced_pod(
        "p", "default", {"metadata": {"$deleteFromPrimitiveList/finalizers": ["example.com/keep"]}}
    )
    assert patched.metadata.finalizers == ["example.com/other"]
    # JSON patch, with a passing and a failing test operation.
    rv = patched.metadata.resource_version
    patched = await core.patch_namespaced_pod(
        "p",
        "default",
        [
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "add", "path": "/metadata/labels/z", "value": "3"},
            {"op": "remove", "path": "/metadata/finalizers"},
        ],
    )
    assert patched.metadata.labels == {"x": "1", "z": "3"}
    assert patched.metadata.finalizers is None
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod(
            "p", "default", [{"op": "test", "path": "/metadata/labels/x", "value": "nope"}]
        )
    assert err.value.status == 422
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod(
            "p",
            "default",
            [{"op": "replace", "path": "/metadata/labels/x", "value": "9"}],
            _content_type="application/apply-patch+yaml",
        )
    assert err.value.status == 415


async def test_patch_with_stale_resource_version_is_409(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    pod = await core.create_namespaced_pod("default", pod_body("p"))
    await core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"a": "1"}}})
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod(
            "p",
            "default",
            {"metadata": {"resourceVersion": pod.metadata.resource_version, "labels": {"a": "2"}}},
            _content_type="application/merge-patch+json",
        )
    assert err.value.status == 409


async def test_status_subresource_is_separate(api: client.ApiClient) -> None:
    batch = client.BatchV1Api(api)
    job = await batch.create_namespaced_job("default", job_body("j", suspend=True))
    assert job.metadata.generation == 1
    # Status written through the main resource is ignored.
    raw = api.sanitize_for_serialization(job)
    raw["status"] = {"active": 5}
    raw["metadata"]["labels"]["extra"] = "1"
    updated = await batch.replace_namespaced_job("j", "default", raw)
    assert updated.status.active is None
    assert updated.metadata.generation == 1  # metadata-only change
    # The status subresource changes status only.
    patched = await batch.patch_namespaced_job_status(
        "j",
        "default",
        {"spec": {"parallelism": 9}, "status": {"active": 1, "ready": 0}},
        _content_type="application/merge-patch+json",
    )
    assert (patched.status.active, patched.status.ready) == (1, 0)
    assert patched.spec.parallelism == 1
    assert patched.metadata.generation == 1
    # A spec change bumps the generation.
    patched = await batch.patch_namespaced_job(
        "j", "default", {"spec": {"parallelism": 3}}, _content_type="application/merge-patch+json"
    )
    assert patched.spec.parallelism == 3
    assert patched.metadata.generation == 2
    # A no-op update writes nothing.
    same = await batch.patch_namespaced_job(
        "j", "default", {"spec": {"parallelism": 3}}, _content_type="application/merge-patch+json"
    )
    assert same.metadata.resource_version == patched.metadata.resource_version


async def test_list_pages_are_consistent(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    for i in range(7):
        body = pod_body(f"p{i}")
        body["spec"]["schedulerName"] = "kbatchd"
        await core.create_namespaced_pod("default", body)
    first = await core.list_namespaced_pod("default", limit=3)
    assert [p.metadata.name for p in first.items] == ["p0", "p1", "p2"]
    assert first.metadata._continue
    # Changes after the first page do not show in the later pages of the same list.
    await core.delete_namespaced_pod("p4", "default")
    await core.patch_namespaced_pod("p5", "default", {"metadata": {"labels": {"late": "1"}}})
    body = pod_body("p3a")
    body["spec"]["schedulerName"] = "kbatchd"
    await core.create_namespaced_pod("default", body)
    second = await core.list_namespaced_pod("default", limit=3, _continue=first.metadata._continue)
    assert [p.metadata.name for p in second.items] == ["p3", "p4", "p5"]
    assert second.items[2].metadata.labels is None
    assert second.metadata.resource_version == first.metadata.resource_version
    third = await core.list_namespaced_pod("default", limit=3, _continue=second.metadata._continue)
    assert [p.metadata.name for p in third.items] == ["p6"]
    assert not third.metadata._continue
    fresh = await core.list_namespaced_pod("default")
    assert [p.metadata.name for p in fresh.items] == ["p0", "p1", "p2", "p3", "p3a", "p5", "p6"]
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_pod("default", limit=3, _continue="not-a-token")
    assert err.value.status == 400


async def test_expired_continue_is_410(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    for i in range(4):
        await core.create_namespaced_pod("default", pod_body(f"p{i}"))
    first = await core.list_namespaced_pod("default", limit=2)
    await core.patch_namespaced_pod("p3", "default", {"metadata": {"labels": {"a": "b"}}})
    sim.faults.expire_history_now()
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_pod("default", limit=2, _continue=first.metadata._continue)
    assert err.value.status == 410
    assert status_of(err.value)["reason"] == "Expired"


async def test_label_and_field_selectors(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    labels = {"a": {"tier": "web", "env": "prod"}, "b": {"tier": "db"}, "c": {}}
    for name, pod_labels in labels.items():
        body = pod_body(name)
        body["metadata"]["labels"] = pod_labels
        body["spec"]["schedulerName"] = "kbatchd"
        await core.create_namespaced_pod("default", body)

    async def names(**kwargs: str) -> list[str]:
        result = await core.list_namespaced_pod("default", **kwargs)
        return [p.metadata.name for p in result.items]

    assert await names(label_selector="tier=web") == ["a"]
    assert await names(label_selector="tier==db") == ["b"]
    assert await names(label_selector="tier!=web") == ["b", "c"]
    assert await names(label_selector="tier in (web,db)") == ["a", "b"]
    assert await names(label_selector="tier notin (web)") == ["b", "c"]
    assert await names(label_selector="tier") == ["a", "b"]
    assert await names(label_selector="!tier") == ["c"]
    assert await names(label_selector="tier,env=prod") == ["a"]
    assert await names(field_selector="metadata.name=b") == ["b"]
    assert await names(field_selector="status.phase=Pending,metadata.name!=a") == ["b", "c"]
    assert await names(field_selector="spec.nodeName=") == ["a", "b", "c"]
    with pytest.raises(ApiException) as err:
        await names(field_selector="spec.bogus=1")
    assert err.value.status == 400
    with pytest.raises(ApiException) as err:
        await names(label_selector="tier in (web")
    assert err.value.status == 400


async def test_binding(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    body = pod_body("p")
    body["spec"]["schedulerName"] = "kbatchd"
    await core.create_namespaced_pod("default", body)
    binding = {"metadata": {"name": "p"}, "target": {"kind": "Node", "name": "b0-r0-h1"}}
    await core.create_namespaced_pod_binding("p", "default", binding, _preload_content=False)
    pod = await core.read_namespaced_pod("p", "default")
    assert pod.spec.node_name == "b0-r0-h1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in pod.status.conditions)
    # The client cannot decode the Status a binding answers; read the raw response instead.
    again = await core.create_namespaced_pod_binding(
        "p", "default", binding, _preload_content=False
    )
    assert again.status == 409
    assert (await again.json())["reason"] == "Conflict"
    # nodeName cannot be set by an update, only by binding.
    gated = pod_body("g")
    gated["spec"]["schedulingGates"] = [{"name": "example.com/gate"}]
    await core.create_namespaced_pod("default", gated)
    gated_binding = await core.create_namespaced_pod_binding(
        "g",
        "default",
        {"metadata": {"name": "g"}, "target": {"name": "b0-r0-h0"}},
        _preload_content=False,
    )
    assert gated_binding.status == 409
    with pytest.raises(ApiException) as err:
        await core.patch_namespaced_pod("g", "default", {"spec": {"nodeName": "b0-r0-h0"}})
    assert err.value.status == 422
    assert status_of(err.value)["details"]["causes"][0]["field"] == "spec"


async def test_bad_input_is_a_status_never_a_500(sim: SimCluster) -> None:
    async with aiohttp.ClientSession(sim.url) as http:

        async def call(
            method: str, path: str, data: bytes = b"", ctype: str = "application/json"
        ) -> tuple[int, dict[str, Any]]:
            async with http.request(
                method, path, data=data, headers={"Content-Type": ctype}
            ) as resp:
                return resp.status, await resp.json(content_type=None)

        code, body = await call("POST", "/api/v1/namespaces/default/pods", b"{not json")
        assert code == 400
        assert body["reason"] == "BadRequest"
        assert body["kind"] == "Status"
        code, body = await call("POST", "/api/v1/namespaces/default/pods", b"[1, 2]")
        assert code == 400
        code, body = await call("GET", "/api/v1/namespaces/default/widgets")
        assert code == 404
        assert body["reason"] == "NotFound"
        code, body = await call("GET", "/apis/nope/v1")
        assert code == 404
        code, body = await call(
            "POST",
            "/api/v1/namespaces/default/pods",
            b'{"metadata": {"name": "Bad_Name"}, "spec": {}}',
        )
        assert code == 422
        assert body["reason"] == "Invalid"
        fields = {c["field"] for c in body["details"]["causes"]}
        assert fields == {"metadata.name", "spec.containers"}
        assert body["message"].startswith('Pod "Bad_Name" is invalid: [')
        code, body = await call(
            "POST",
            "/api/v1/namespaces/default/pods",
            b'{"metadata": {"name": "ok"}, "spec": {"containers": [{"name": "c", "image": "i"}]}}',
        )
        assert code == 201
        code, body = await call(
            "PATCH", "/api/v1/namespaces/default/pods/ok", b'{"metadata": 1}', "text/plain"
        )
        assert code == 415
        assert body["reason"] == "UnsupportedMediaType"
        code, body = await call(
            "PATCH",
            "/api/v1/namespaces/default/pods/ok",
            b'[{"op": "explode"}]',
            "application/json-patch+json",
        )
        assert code == 400
        code, body = await call(
            "PATCH",
            "/api/v1/namespaces/default/pods/ok",
            b'{"spec": {"containers": [{"image": "x"}]}}',
            "application/strategic-merge-patch+json",
        )
        assert code == 422
        code, body = await call(
            "PUT", "/api/v1/namespaces/default/pods/ok", b'{"metadata": {"name": "other"}}'
        )
        assert code == 400
        code, body = await call(
            "DELETE", "/api/v1/namespaces/default/pods/ok", b'{"gracePeriodSeconds": "soon"}'
        )
        assert code == 400
        code, body = await call("GET", "/api/v1/namespaces/default/pods?limit=many")
        assert code == 400
        code, body = await call(
            "PATCH",
            "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets/x",
            b"{}",
            "application/strategic-merge-patch+json",
        )
        assert code == 404


MALFORMED = [
    b"",
    b"null",
    b"1",
    b"[]",
    b'{"metadata": 1}',
    b'{"metadata": null}',
    b'{"metadata": {"name": 5}}',
    b'{"metadata": {"name": "x"}, "spec": "s"}',
    b'{"metadata": {"name": "x"}, "spec": {"containers": [1]}}',
    b'{"metadata": {"name": "x", "labels": [1]}}',
    b'{"metadata": {"name": "x"}, "spec": {"template": {"spec": 1}}}',
    b'{"metadata": {"name": "x"}, "spec": {"replicatedJobs": 1}}',
    b'{"metadata": {"name": "x"}, "status": 1}',
    b'{"status": null}',
    b'{"metadata": {"name": "x", "ownerReferences": [1]}}',
    b'[{"op": "replace", "path": "/spec", "value": 1}]',
    b'{"target": {"name": 1}}',
    b'{"propagationPolicy": "Sideways"}',
]


async def test_malformed_bodies_never_cause_a_500(sim: SimCluster) -> None:
    paths = {
        "Pod": "/api/v1/namespaces/default/pods",
        "Namespace": "/api/v1/namespaces",
        "Job": "/apis/batch/v1/namespaces/default/jobs",
        "JobSet": "/apis/jobset.x-k8s.io/v1alpha2/namespaces/default/jobsets",
    }
    content_types = (
        "application/json",
        "application/merge-patch+json",
        "application/strategic-merge-patch+json",
        "application/json-patch+json",
    )
    async with aiohttp.ClientSession(sim.url) as http:
        for base in paths.values():
            for body in MALFORMED:
                for ctype in content_types:
                    for method, path in (
                        ("POST", base),
                        ("PUT", f"{base}/x"),
                        ("PATCH", f"{base}/x"),
                        ("PATCH", f"{base}/x/status"),
                        ("POST", f"{base}/x/binding"),
                        ("DELETE", f"{base}/x"),
                    ):
                        async with http.post(base, json={"metadata": {"name": "x"}}):
                            pass
                        headers = {"Content-Type": ctype}
                        async with http.request(method, path, data=body, headers=headers) as resp:
                            assert resp.status < 500, (method, path, body, await resp.text())
                            assert (await resp.json(content_type=None)).get("kind")


async def test_priority_class_admission(api: client.ApiClient) -> None:
    scheduling = client.SchedulingV1Api(api)
    core = client.CoreV1Api(api)
    await scheduling.create_priority_class({"metadata": {"name": "high"}, "value": 1000})
    body = pod_body("p")
    body["spec"]["priorityClassName"] = "high"
    pod = await core.create_namespaced_pod("default", body)
    assert pod.spec.priority == 1000
    assert pod.spec.preemption_policy == "PreemptLowerPriority"
    plain = await core.create_namespaced_pod("default", pod_body("q"))
    assert plain.spec.priority == 0
    body = pod_body("r")
    body["spec"]["priorityClassName"] = "missing"
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", body)
    assert err.value.status == 403
    assert "no PriorityClass with name missing was found" in status_of(err.value)["message"]
    builtin = await scheduling.read_priority_class("system-node-critical")
    assert builtin.value == 2000001000


async def test_priority_class_admission_of_podgroups(api: client.ApiClient) -> None:
    """A PodGroup's spec.priority comes from its priorityClassName; none gives none."""
    scheduling = client.SchedulingV1Api(api)
    custom = client.CustomObjectsApi(api)
    await scheduling.create_priority_class({"metadata": {"name": "high"}, "value": 1000})

    def group(name: str, priority_class: str | None) -> dict[str, Any]:
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": 1}}}
        if priority_class is not None:
            spec["priorityClassName"] = priority_class
        return {"metadata": {"name": name}, "spec": spec}

    args = ("scheduling.k8s.io", "v1alpha2", "default", "podgroups")
    made = await custom.create_namespaced_custom_object(*args, group("g", "high"))
    assert made["spec"]["priority"] == 1000
    plain = await custom.create_namespaced_custom_object(*args, group("h", None))
    assert "priority" not in plain["spec"]
    with pytest.raises(ApiException) as err:
        await custom.create_namespaced_custom_object(*args, group("i", "missing"))
    assert err.value.status == 403
    assert status_of(err.value)["message"] == (
        'podgroups.scheduling.k8s.io "i" is forbidden: no PriorityClass with name missing was found'
    )


async def test_delete_collection(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    for name, team in (("a", "x"), ("b", "x"), ("c", "y")):
        body = pod_body(name)
        body["metadata"]["labels"] = {"team": team}
        body["spec"]["schedulerName"] = "kbatchd"
        await core.create_namespaced_pod("default", body)
    await core.delete_collection_namespaced_pod("default", label_selector="team=x")
    left = await core.list_namespaced_pod("default")
    assert [p.metadata.name for p in left.items] == ["c"]


async def test_jobset_defaults(api: client.ApiClient) -> None:
    custom = client.CustomObjectsApi(api)
    body = {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "js"},
        "spec": {
            "failurePolicy": {"maxRestarts": 2, "rules": [{"action": "FailJobSet"}]},
            "replicatedJobs": [
                {
                    "name": "w",
                    "template": {
                        "spec": {
                            "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}
                        }
                    },
                }
            ],
        },
    }
    created = await custom.create_namespaced_custom_object(
        "jobset.x-k8s.io", "v1alpha2", "default", "jobsets", body
    )
    spec = created["spec"]
    assert spec["successPolicy"] == {"operator": "All"}
    assert spec["startupPolicy"] == {"startupPolicyOrder": "AnyOrder"}
    assert spec["network"] == {"enableDNSHostnames": True, "publishNotReadyAddresses": True}
    assert spec["failurePolicy"]["restartStrategy"] == "Recreate"
    assert spec["failurePolicy"]["rules"][0]["name"] == "failurePolicyRule0"
    replicated = spec["replicatedJobs"][0]
    assert (replicated["replicas"], replicated["groupName"]) == (1, "default")
    assert replicated["template"]["spec"]["completionMode"] == "Indexed"
    assert replicated["template"]["spec"]["template"]["spec"]["restartPolicy"] == "OnFailure"
    assert "status" not in created
    # A CRD update must carry a resourceVersion; strategic merge is not offered for it.
    with pytest.raises(ApiException) as err:
        await custom.replace_namespaced_custom_object(
            "jobset.x-k8s.io",
            "v1alpha2",
            "default",
            "jobsets",
            "js",
            {**created, "metadata": {"name": "js"}},
        )
    assert err.value.status == 422
    status = await custom.patch_namespaced_custom_object_status(
        "jobset.x-k8s.io",
        "v1alpha2",
        "default",
        "jobsets",
        "js",
        {"status": {"restarts": 1}},
        _content_type="application/merge-patch+json",
    )
    assert status["status"] == {"restarts": 1}
    assert status["metadata"]["generation"] == 1


async def test_a_body_over_aiohttps_default_limit_is_taken(
    api: client.ApiClient, sim: SimCluster
) -> None:
    # 1.25 MiB: aiohttp's default refuses 1 MiB and more; the real server takes up to 3 MB (and
    # etcd 1.5 MiB). In an environment value: annotations are limited to 256 KiB.
    body = pod_body("large")
    body["spec"]["containers"][0]["env"] = [{"name": "BULK", "value": "x" * (5 << 18)}]
    created = await client.CoreV1Api(api).create_namespaced_pod("default", body)
    assert created.metadata.name == "large"
    stored = sim.get(PODS, "default", "large")
    assert stored is not None
    assert len(stored["spec"]["containers"][0]["env"][0]["value"]) == 5 << 18
