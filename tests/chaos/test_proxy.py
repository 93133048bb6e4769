"""The fault proxy, in front of a simulated cluster with no faults of its own: what it passes
on arrives as the server answered it, and each fault strikes as `Faults` describes it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import aiohttp
import anyio
import pytest

from daemon.sim.cluster import SimCluster
from daemon.sim.faults import Faults
from daemon.sim.resources import Resource, lookup
from tests.chaos.proxy import fault_proxy

pytestmark = pytest.mark.anyio

PATH = "/apis/coordination.k8s.io/v1/namespaces/default/leases"


def _leases() -> Resource:
    found = lookup("coordination.k8s.io", "v1", "leases")
    assert found is not None
    return found


LEASES: Final = _leases()


@asynccontextmanager
async def proxied(spec: str) -> AsyncIterator[tuple[SimCluster, Faults, aiohttp.ClientSession]]:
    """A simulated cluster, the proxy in front of it striking `spec`, and a client of the
    proxy."""
    faults = Faults.parse(spec, seed=1)
    async with (
        SimCluster.start(seed=1) as sim,
        fault_proxy(sim.url, faults) as url,
        aiohttp.ClientSession(base_url=url) as client,
    ):
        yield sim, faults, client


def lease(name: str) -> dict[str, object]:
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": name}}


async def test_requests_pass_through_as_the_server_answers_them() -> None:
    async with proxied("") as (sim, faults, client):
        async with client.post(PATH, json=lease("a")) as created:
            assert created.status == 201
            assert (await created.json())["metadata"]["name"] == "a"
        async with client.post(PATH, json=lease("a")) as again:
            assert again.status == 409
            assert (await again.json())["reason"] == "AlreadyExists"
        async with client.get("/api/v1") as discovery:
            assert discovery.status == 200
        assert sim.get(LEASES, "default", "a") is not None
        assert not faults.hits


async def test_an_injected_409_answers_in_the_servers_place() -> None:
    async with proxied("error-409=1") as (sim, faults, client):
        async with client.post(PATH, json=lease("a")) as refused:
            assert refused.status == 409
            assert (await refused.json())["reason"] == "Conflict"
        async with client.get(PATH) as listed:  # reads are not refused with 409
            assert listed.status == 200
        assert sim.get(LEASES, "default", "a") is None
        assert faults.hits["error-409"] == 1


async def test_a_cut_request_gets_no_answer_before_or_after_the_server_acted() -> None:
    async with proxied("drop-request=1") as (sim, faults, client):
        for name in "abcdefgh":
            with pytest.raises(aiohttp.ServerDisconnectedError):
                async with client.post(PATH, json=lease(name)):
                    pass
        acted = [n for n in "abcdefgh" if sim.get(LEASES, "default", n) is not None]
        # Seed 1 cuts some before and some after: neither kind is missing.
        assert 0 < len(acted) < 8, acted
        assert faults.hits["drop-request"] == 8


async def read_events(response: aiohttp.ClientResponse, count: int) -> list[dict[str, object]]:
    return [json.loads(await response.content.readline()) for _ in range(count)]


async def test_a_dropped_watch_ends_after_a_batch_of_whole_events() -> None:
    async with proxied("") as (_, faults, client):
        async with client.post(PATH, json=lease("a")):
            pass
        faults.set(drop_watch=1.0)
        async with client.get(PATH, params={"watch": "true"}) as watch:
            (event,) = await read_events(watch, 1)
            assert event["type"] == "ADDED"
            with anyio.fail_after(10):
                assert await watch.content.read() == b""  # ended, not hung
        assert faults.hits["drop-watch"] == 1


async def test_a_stalled_watch_stays_open_and_silent_until_the_client_leaves() -> None:
    async with proxied("") as (_, faults, client):
        async with client.post(PATH, json=lease("a")):
            pass
        faults.set(stall_watch=1.0)
        async with client.get(PATH, params={"watch": "true"}) as watch:
            await read_events(watch, 1)
            async with client.post(PATH, json=lease("b")) as created:
                assert created.status == 201
            # b's ADDED reached the proxy; the stalled stream passes nothing on.
            with anyio.move_on_after(1.0) as silent:
                await watch.content.readline()
            assert silent.cancelled_caught
        assert faults.hits["stall-watch"] == 1


async def test_latency_delays_each_request() -> None:
    async with proxied("latency=300ms") as (_, _, client):
        started = anyio.current_time()
        async with client.get(PATH) as listed:
            assert listed.status == 200
        assert anyio.current_time() - started >= 0.3
