"""Many objects at once: every pod reaches Running, pages cover the collection exactly once,
and every watcher sees every event (functional checks only; speed lives in the benchmarks)."""

from __future__ import annotations

import json

import aiohttp
import anyio
import pytest

from daemon.sim.cluster import SimCluster
from daemon.sim.resources import PODS
from daemon.sim.store import WatchEvent

pytestmark = pytest.mark.anyio

PODS_COUNT = 3000


async def test_thousands_of_pods_lists_and_watchers() -> None:
    async with SimCluster.start(
        topology="blocks=1,racks=5,hosts=20", seed=9, time_scale=1000.0
    ) as sim:
        running = anyio.Event()
        count = 0

        def on_event(event: WatchEvent) -> None:
            nonlocal count
            started = (
                event.resource is PODS
                and event.prev is not None
                and event.prev["status"]["phase"] == "Pending"
                and event.obj["status"]["phase"] == "Running"
            )
            if started:
                count += 1
                if count == PODS_COUNT:
                    running.set()

        sim.store.listeners.append(on_event)
        nodes = sorted(sim.agent.nodes)
        for i in range(PODS_COUNT):
            body = {
                "metadata": {"name": f"p{i:05d}", "labels": {"shard": str(i % 3)}},
                "spec": {"schedulerName": "kbatchd", "containers": [{"name": "c", "image": "i"}]},
            }
            sim.registry.create(PODS, "default", body)
            sim.registry.bind("default", f"p{i:05d}", {"target": {"name": nodes[i % len(nodes)]}})
        with anyio.fail_after(30):
            await running.wait()
        async with aiohttp.ClientSession(sim.url) as http:
            names: list[str] = []
            token = ""
            while True:
                params = {"limit": "500", "labelSelector": "shard in (0,1)"}
                if token:
                    params["continue"] = token
                async with http.get("/api/v1/namespaces/default/pods", params=params) as resp:
                    page = json.loads(await resp.read())
                names += [item["metadata"]["name"] for item in page["items"]]
                token = page["metadata"].get("continue", "")
                if not token:
                    break
            assert len(names) == len(set(names)) == 2000
            assert names == sorted(names)
            start = sim.store.rv

            async def watch() -> int:
                seen = 0
                path = f"/api/v1/pods?watch=1&resourceVersion={start}&timeoutSeconds=30"
                async with http.get(path) as resp:
                    async for _ in resp.content:
                        seen += 1
                        if seen == 500:
                            break
                return seen

            with anyio.fail_after(30):
                async with anyio.create_task_group() as group:
                    results: list[int] = []

                    async def run() -> None:
                        results.append(await watch())

                    for _ in range(5):
                        group.start_soon(run)
                    for i in range(500):
                        stored = sim.store.get(PODS, "default", f"p{i:05d}")
                        assert stored is not None
                        obj = stored.copy()
                        obj["metadata"]["labels"]["touched"] = "yes"
                        # Watchers replay from `start`, so it does not matter when they connect.
                        sim.registry.update(PODS, "default", f"p{i:05d}", obj)
            assert results == [500] * 5
