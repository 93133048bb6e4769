"""Watch through kubernetes-asyncio: initial state, resume from a resourceVersion, bookmarks,
timeoutSeconds, selectors (objects entering and leaving them) and 410 Expired."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import anyio
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from daemon.sim.cluster import SimCluster
from daemon.sim.resources import PODS
from tests.daemon.sim.helpers import pod_body

pytestmark = pytest.mark.anyio


def unbound(name: str, **labels: str) -> dict[str, Any]:
    body = pod_body(name)
    body["metadata"]["labels"] = labels
    body["spec"]["schedulerName"] = "kbatchd"  # stays Pending: no agent writes interleave
    return body


async def collect(stream: watch.Watch, count: int) -> list[tuple[str, dict[str, Any]]]:
    events: list[tuple[str, dict[str, Any]]] = []
    async for event in stream:
        events.append((event["type"], event["raw_object"]))
        if len(events) == count:
            break
    return events


async def test_watch_from_zero_lists_then_follows(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    await core.create_namespaced_pod("default", unbound("a"))
    with anyio.fail_after(5):
        async with watch.Watch() as w:
            stream = w.stream(core.list_namespaced_pod, "default", resource_version="0")
            first = await collect(stream, 1)
            assert first[0][0] == "ADDED"
            assert first[0][1]["metadata"]["name"] == "a"
            await core.create_namespaced_pod("default", unbound("b"))
            await core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
            await core.delete_namespaced_pod("b", "default")
            events = await collect(stream, 3)
    assert [(t, o["metadata"]["name"]) for t, o in events] == [
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
    ]
    rvs = [int(o["metadata"]["resourceVersion"]) for _, o in events]
    assert rvs == sorted(rvs)
    assert len(set(rvs)) == 3


async def test_watch_resumes_after_resource_version(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    a = await core.create_namespaced_pod("default", unbound("a"))
    await core.create_namespaced_pod("default", unbound("b"))
    await core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    with anyio.fail_after(5):
        async with watch.Watch() as w:
            stream = w.stream(
                core.list_namespaced_pod, "default", resource_version=a.metadata.resource_version
            )
            events = await collect(stream, 2)
    assert [(t, o["metadata"]["name"]) for t, o in events] == [("ADDED", "b"), ("MODIFIED", "a")]


async def test_bookmarks_and_timeout(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    listed = await core.list_namespaced_pod("default")
    seen: list[str] = []
    with anyio.fail_after(10):
        async with watch.Watch() as w:
            async for event in w.stream(
                core.list_namespaced_pod,
                "default",
                resource_version=listed.metadata.resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=1,
            ):
                seen.append(event["type"])
                obj = event["raw_object"]
                if event["type"] == "BOOKMARK":
                    assert set(obj["metadata"]) <= {"resourceVersion", "creationTimestamp"}
                    assert obj["kind"] == "Pod"
    # The stream ended by itself (timeoutSeconds) after a few bookmarks (every 0.2 s here).
    assert seen
    assert set(seen) == {"BOOKMARK"}
    assert w.resource_version is not None


async def test_selector_watch_sees_objects_enter_and_leave(api: client.ApiClient) -> None:
    core = client.CoreV1Api(api)
    listed = await core.list_namespaced_pod("default")
    await core.create_namespaced_pod("default", unbound("a", team="x"))
    await core.create_namespaced_pod("default", unbound("b", team="y"))
    await core.patch_namespaced_pod("b", "default", {"metadata": {"labels": {"team": "x"}}})
    await core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"team": "y"}}})
    with anyio.fail_after(5):
        async with watch.Watch() as w:
            stream = w.stream(
                core.list_namespaced_pod,
                "default",
                label_selector="team=x",
                resource_version=listed.metadata.resource_version,
            )
            events = await collect(stream, 3)
    assert [(t, o["metadata"]["name"]) for t, o in events] == [
        ("ADDED", "a"),
        ("ADDED", "b"),  # moved into the selector
        ("DELETED", "a"),  # moved out of it: reported with its old labels
    ]
    assert events[2][1]["metadata"]["labels"] == {"team": "x"}


async def test_field_selector_watch_on_node_name(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    listed = await core.list_pod_for_all_namespaces()
    await core.create_namespaced_pod("default", unbound("a"))
    binding = {"metadata": {"name": "a"}, "target": {"kind": "Node", "name": "b0-r1-h0"}}
    await core.create_namespaced_pod_binding("a", "default", binding, _preload_content=False)
    with anyio.fail_after(5):
        async with watch.Watch() as w:
            stream = w.stream(
                core.list_pod_for_all_namespaces,
                field_selector="spec.nodeName=b0-r1-h0",
                resource_version=listed.metadata.resource_version,
            )
            events = await collect(stream, 1)
    assert events[0][0] == "ADDED"
    assert events[0][1]["spec"]["nodeName"] == "b0-r1-h0"


async def test_watch_from_expired_version_is_410(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    old = await core.create_namespaced_pod("default", unbound("a"))
    await core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "1"}}})
    sim.faults.expire_history_now()

    async def watch_all() -> None:
        async with watch.Watch() as w:
            async for _ in w.stream(
                core.list_namespaced_pod,
                "default",
                resource_version=old.metadata.resource_version,
                timeout_seconds=5,
            ):
                pass

    with anyio.fail_after(5), pytest.raises(ApiException) as err:
        await watch_all()
    assert err.value.status == 410
    assert "too old resource version" in str(err.value.reason)


async def test_expired_watch_is_one_error_event_then_end(sim: SimCluster) -> None:
    sim.registry.create(PODS, "default", unbound("a"))
    sim.faults.expire_history_now()
    floor = sim.store.rv
    async with aiohttp.ClientSession(sim.url) as http:
        with anyio.fail_after(5):
            async with http.get(
                "/api/v1/namespaces/default/pods?watch=true&resourceVersion=2"
            ) as resp:
                assert resp.status == 200
                lines = [line async for line in resp.content]
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    status = event["object"]
    assert status["kind"] == "Status"
    assert status["code"] == 410
    assert status["reason"] == "Expired"
    assert status["message"] == f"too old resource version: 2 ({floor})"


async def test_small_history_expires_old_versions() -> None:
    async with SimCluster.start(seed=1, history=3) as sim:
        pods = PODS
        first = sim.registry.create(pods, "default", unbound("a"))
        for i in range(5):
            obj = sim.store.get(pods, "default", "a")
            assert obj is not None
            body = obj.copy()
            body["metadata"]["labels"] = {"i": str(i)}
            sim.registry.update(pods, "default", "a", body)
        async with aiohttp.ClientSession(sim.url) as http:
            with anyio.fail_after(5):
                path = f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={first.rv}"
                async with http.get(path) as resp:
                    line = await resp.content.readline()
        assert json.loads(line)["object"]["code"] == 410
        # The newest versions are still in the history.
        recent = sim.store.table(pods).history[0].rv
        watcher = sim.store.watch(pods, None, None, recent)
        assert len(watcher.pending) == 2
        sim.store.unwatch(watcher)


async def test_dropped_watches_end_cleanly(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    listed = await core.list_namespaced_pod("default")
    with anyio.fail_after(5):
        async with watch.Watch() as w:
            stream = w.stream(
                core.list_namespaced_pod,
                "default",
                resource_version=listed.metadata.resource_version,
                timeout_seconds=30,
            )
            await core.create_namespaced_pod("default", unbound("a"))
            first = await collect(stream, 1)
            assert first[0][0] == "ADDED"
            assert sim.faults.drop_watches() >= 1
            rest = [e async for e in stream]
    assert rest == []


async def test_send_initial_events_ends_with_a_marked_bookmark(sim: SimCluster) -> None:
    sim.registry.create(PODS, "default", unbound("a"))
    query = (
        "watch=1&sendInitialEvents=true&allowWatchBookmarks=true&resourceVersionMatch=NotOlderThan"
    )
    async with aiohttp.ClientSession(sim.url) as http:
        with anyio.fail_after(5):
            async with http.get(f"/api/v1/namespaces/default/pods?{query}") as resp:
                first = json.loads(await resp.content.readline())
                second = json.loads(await resp.content.readline())
    assert first["type"] == "ADDED"
    assert second["type"] == "BOOKMARK"
    assert second["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}


async def test_watch_from_the_future_is_refused(sim: SimCluster) -> None:
    async with aiohttp.ClientSession(sim.url) as http:
        path = f"/api/v1/pods?watch=1&resourceVersion={sim.store.rv + 100}"
        async with http.get(path) as resp:
            assert resp.status == 504
            assert (await resp.json())["details"]["causes"][0][
                "reason"
            ] == "ResourceVersionTooLarge"
