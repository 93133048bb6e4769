"""Fault injection: the spec string, determinism under a seed, and each fault as a client
sees it."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import anyio
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from daemon.sim.cluster import SimCluster
from daemon.sim.faults import Faults
from daemon.sim.resources import JOBS, PODS
from tests.daemon.sim.helpers import pod_body


def test_parse_spec() -> None:
    faults = Faults.parse(
        "drop-watch=0.01,expire-history=30s,error-429=0.05,error-500=0.02,error-409=0.01,"
        "drop-request=0.03,latency=5ms"
    )
    assert faults.drop_watch == 0.01
    assert faults.drop_request == 0.03
    assert faults.expire_history == 30.0
    assert (faults.error_429, faults.error_500, faults.error_409) == (0.05, 0.02, 0.01)
    assert faults.latency == pytest.approx(0.005)
    assert Faults.parse("").error_429 == 0.0
    assert Faults.parse("expire-history=2m").expire_history == 120.0
    assert (Faults.parse("").retry_after, Faults.parse("retry-after=0").retry_after) == (1, 0)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("bogus=1", ["bogus", "'1'"]),
        ("error-429=2", ["error-429", "'2'"]),
        ("error-500=often", ["error-500", "'often'"]),
        ("latency=5", ["latency", "'5'"]),
        ("drop-watch", ["drop-watch"]),
        ("retry-after=0.5", ["retry-after", "'0.5'"]),
        ("retry-after=-1", ["retry-after", "'-1'"]),
        ("retry-after=\u00b2", ["retry-after", "'\u00b2'"]),
    ],
)
def test_bad_spec_names_key_and_value(spec: str, words: list[str]) -> None:
    with pytest.raises(ValueError, match="faults") as err:
        Faults.parse(spec)
    for word in words:
        assert word in str(err.value)


def test_same_seed_same_faults() -> None:
    def run(seed: int) -> list[int | None]:
        faults = Faults.parse("error-429=0.3,error-500=0.2,error-409=0.2", seed=seed)
        out = []
        for i in range(200):
            error = faults.request_error("PUT" if i % 2 else "GET", PODS, "p")
            out.append(None if error is None else error.code)
        return out

    assert run(1) == run(1)
    assert run(1) != run(2)
    codes = set(run(1))
    assert {None, 429, 500, 409} == codes


def test_conflicts_only_for_writes() -> None:
    faults = Faults.parse("error-409=1", seed=0)
    assert faults.request_error("GET", JOBS, "j") is None
    error = faults.request_error("PATCH", JOBS, "j")
    assert error is not None
    assert error.code == 409
    assert error.reason == "Conflict"
    assert error.message.startswith('Operation cannot be fulfilled on jobs.batch "j"')


@pytest.mark.anyio
async def test_errors_as_clients_see_them(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    sim.faults.set(error_429=1.0)
    with pytest.raises(ApiException) as err:
        await core.list_namespaced_pod("default")
    assert err.value.status == 429
    assert err.value.headers["Retry-After"] == "1"
    sim.faults.set(error_429=0.0, error_500=1.0)
    with pytest.raises(ApiException) as err:
        await core.read_namespaced_pod("p", "default")
    assert err.value.status == 500
    sim.faults.set(error_500=0.0, error_409=1.0)
    await core.list_namespaced_pod("default")  # reads are unaffected
    with pytest.raises(ApiException) as err:
        await core.create_namespaced_pod("default", pod_body("p"))
    assert err.value.status == 409
    assert sim.get(PODS, "default", "p") is None  # the failed request had no effect
    sim.faults.clear()
    await core.create_namespaced_pod("default", pod_body("p"))
    # Discovery is never failed: clients must be able to start.
    sim.faults.set(error_500=1.0)
    assert (await client.VersionApi(api).get_code()).major == "1"


@pytest.mark.anyio
async def test_a_delete_of_what_carries_the_refused_label_is_answered_422(
    api: client.ApiClient, sim: SimCluster
) -> None:
    core = client.CoreV1Api(api)
    sim.faults.refuse_delete = Faults.parse("refuse-delete=example.com/keep").refuse_delete
    kept = pod_body("kept")
    kept["metadata"]["labels"] = {"example.com/keep": ""}
    await core.create_namespaced_pod("default", kept)
    await core.create_namespaced_pod("default", pod_body("other"))
    with pytest.raises(ApiException) as err:
        await core.delete_namespaced_pod("kept", "default")
    assert err.value.status == 422
    assert json.loads(err.value.body)["message"] == (
        'pods "kept" is forbidden: injected fault: refuse-delete=example.com/keep'
    )
    assert sim.get(PODS, "default", "kept") is not None
    await core.delete_namespaced_pod("other", "default", grace_period_seconds=0)
    assert sim.get(PODS, "default", "other") is None


@pytest.mark.anyio
async def test_dropped_requests_get_no_answer_and_some_took_effect(
    api: client.ApiClient, sim: SimCluster
) -> None:
    """Every request is cut without an answer: a client cannot tell whether it took effect,
    and some did (cut after) while others did not (cut before). Watches are left alone."""
    core = client.CoreV1Api(api)
    start = (await core.list_namespaced_pod("default")).metadata.resource_version
    sim.faults.set(drop_request=1.0)
    names = [f"p{i}" for i in range(20)]
    for name in names:
        with pytest.raises(aiohttp.ClientError):
            await core.create_namespaced_pod("default", pod_body(name))
    created = {name for name in names if sim.get(PODS, "default", name) is not None}
    assert 0 < len(created) < len(names)
    with pytest.raises(aiohttp.ClientError):
        await core.list_namespaced_pod("default")
    with anyio.fail_after(5):
        async with watch.Watch() as w:
            seen = set()
            async for event in w.stream(
                core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=30
            ):
                seen.add(event["object"].metadata.name)
                if seen == created:
                    break
    sim.faults.clear()
    assert {p.metadata.name for p in (await core.list_namespaced_pod("default")).items} == created


@pytest.mark.anyio
async def test_drop_watch_closes_streams(api: client.ApiClient, sim: SimCluster) -> None:
    core = client.CoreV1Api(api)
    start = (await core.list_namespaced_pod("default")).metadata.resource_version
    body = pod_body("a")
    body["spec"]["schedulerName"] = "kbatchd"
    await core.create_namespaced_pod("default", body)
    sim.faults.set(drop_watch=1.0)
    with anyio.fail_after(5):
        async with watch.Watch() as w:
            events = [
                e["type"]
                async for e in w.stream(
                    core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=30
                )
            ]
    assert events == ["ADDED"]  # then the server hung up


@pytest.mark.anyio
async def test_periodic_history_expiry() -> None:
    async with SimCluster.start(seed=2, time_scale=100.0, faults="expire-history=1s") as sim:
        compacted = asyncio.Event()
        sim.store.compaction_listeners.append(compacted.set)
        before = sim.store.rv
        sim.registry.create(PODS, "default", pod_body("p"))
        with anyio.fail_after(5):
            await compacted.wait()
        assert sim.store.table(PODS).floor > before


@pytest.mark.anyio
async def test_latency_still_serves() -> None:
    async with SimCluster.start(seed=2, faults="latency=1ms") as sim:
        configuration = client.Configuration()
        configuration.host = sim.url
        async with client.ApiClient(configuration) as api:
            nodes = await client.CoreV1Api(api).list_node()
    assert nodes.items == []


@pytest.mark.anyio
async def test_a_stalled_watch_stays_open_and_silent_while_the_events_wait_in_the_history(
    api: client.ApiClient, sim: SimCluster
) -> None:
    core = client.CoreV1Api(api)
    start = (await core.list_namespaced_pod("default")).metadata.resource_version
    body = pod_body("a")
    body["spec"]["schedulerName"] = "kbatchd"
    await core.create_namespaced_pod("default", body)
    sim.faults.set(stall_watch=1.0)
    seen: list[str] = []
    with anyio.move_on_after(1.5) as waited:
        async with watch.Watch() as w:
            async for event in w.stream(
                core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=30
            ):
                seen.append(event["object"].metadata.name)
                sim.registry.create(PODS, "default", pod_body("b"))
    assert waited.cancelled_caught, "the stream ended instead of stalling"
    assert seen == ["a"]  # b was never sent, though the stream stayed open
    assert sim.faults.hits["stall-watch"] == 1
    sim.faults.clear()
    with anyio.fail_after(5):
        async with watch.Watch() as w:
            async for event in w.stream(
                core.list_namespaced_pod, "default", resource_version=start, timeout_seconds=30
            ):
                if event["object"].metadata.name == "b":
                    break
