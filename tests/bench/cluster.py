"""The simulated cluster and the daemon at scale: list latency at 10,000 nodes and 100,000
pods, ingest from the cluster through the log against the log's bare append rate, and pods
created per second for a 10,000-pod Job through daemon and cluster."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
from kubernetes_asyncio import client, watch

from daemon.kube.api import KubeApi
from daemon.kube.ingest import Informer
from daemon.kube.resources import RESOURCES
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import PODS
from events.schema import Event
from events.store import EventLog
from tests.bench.table import Table
from tests.processes import daemon_config, kube_client, running_daemon, simulated_cluster

NODES_SPEC = "blocks=25,racks=25,hosts=16,gpus=8"  # 10,000 nodes
PODS_AT_SCALE = 100_000
JOB_PODS = 10_000


def _pending_pod(i: int) -> dict[str, Any]:
    # Left to another scheduler they stay Pending: the list is the same on every read.
    return {
        "metadata": {"name": f"p{i:06d}", "labels": {"app": "bench", "shard": str(i % 16)}},
        "spec": {
            "schedulerName": "elsewhere",
            "containers": [{"name": "main", "image": "x", "resources": {"requests": {"cpu": "1"}}}],
        },
    }


async def _full_list(api: KubeApi, kind: str) -> tuple[float, int]:
    resource = RESOURCES[kind]
    start = time.perf_counter()
    token, items = "", 0
    while True:
        query: dict[str, str | int] = {"limit": 500}
        if token:
            query["continue"] = token
        response = await api.request("GET", resource.collection(), query=query)
        assert response.ok, response.status_message()
        page = msgspec.json.decode(response.body)
        items += len(page["items"])
        token = page["metadata"].get("continue", "")
        if not token:
            return time.perf_counter() - start, items


async def scale(table: Table) -> None:
    print(f"cluster: {NODES_SPEC} and {PODS_AT_SCALE:,} pods in the simulated cluster", flush=True)
    async with SimCluster.start(topology=NODES_SPEC, seed=1) as sim:
        for i in range(PODS_AT_SCALE):
            sim.registry.create(PODS, "default", _pending_pod(i))
        assert sim.kubeconfig_path is not None
        async with KubeApi.connect("sim-0", str(sim.kubeconfig_path), None) as api:
            nodes_s, nodes = await _full_list(api, "Node")
            pods_s, pods = await _full_list(api, "Pod")
            table.add(f"sim: list {nodes:,} nodes (pages of 500)", f"{nodes_s:.2f} s")
            table.add(f"sim: list {pods:,} pods (pages of 500)", f"{pods_s:.2f} s")
            page_start = time.perf_counter()
            for _ in range(20):
                await api.request("GET", RESOURCES["Pod"].collection(), query={"limit": 500})
            page_ms = (time.perf_counter() - page_start) / 20 * 1000
            table.add("sim: one page of 500 pods", f"{page_ms:.1f} ms")

            with tempfile.TemporaryDirectory() as tmp:
                collected: list[Event] = []
                async with EventLog.open(Path(tmp) / "ingest.db") as log:

                    async def append(events: list[Event]) -> None:
                        collected.extend(events)
                        await log.append(events)

                    informer = Informer(api, RESOURCES["Pod"], append, {})
                    start = time.perf_counter()
                    await informer.relist()
                    ingest = time.perf_counter() - start
                async with EventLog.open(Path(tmp) / "bare.db") as log:
                    start = time.perf_counter()
                    for i in range(0, len(collected), 5_000):
                        await log.append(collected[i : i + 5_000])
                    bare = time.perf_counter() - start
            count = len(collected)
            table.add(
                "ingest: sim list → decode → log", f"{count / ingest:,.0f} events/s ({count:,})"
            )
            table.add("ingest: the log's bare append", f"{count / bare:,.0f} events/s")
            table.add("ingest / bare append", f"{bare / ingest:.2f}")


async def job_pods(table: Table) -> None:
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        async with (
            simulated_cluster(tmp, topology="blocks=1,racks=2,hosts=4,gpus=8") as (_, kubeconfig),
            running_daemon(daemon_config(tmp, kubeconfig)),
            kube_client(kubeconfig) as api,
        ):
            core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
            listing = await core.list_namespaced_pod("default", label_selector="job-name=wide")
            body: Any = {
                "metadata": {"name": "wide"},
                "spec": {
                    "managedBy": "kbatchd.dev/job-controller",
                    "parallelism": JOB_PODS,
                    "completions": JOB_PODS,
                    "template": {
                        "spec": {
                            "schedulerName": "elsewhere",
                            "restartPolicy": "Never",
                            "containers": [{"name": "main", "image": "x"}],
                        }
                    },
                },
            }
            start = time.perf_counter()
            await batch.create_namespaced_job("default", body)
            seen = 0
            with anyio.fail_after(600):
                async with watch.Watch() as stream:
                    async for event in stream.stream(
                        core.list_namespaced_pod,
                        "default",
                        label_selector="job-name=wide",
                        resource_version=listing.metadata.resource_version,
                        allow_watch_bookmarks=False,
                    ):
                        if event["type"] == "ADDED":
                            seen += 1
                            if seen == JOB_PODS:
                                break
            elapsed = time.perf_counter() - start
    table.add(
        f"job: {JOB_PODS:,}-pod Job, pods created through daemon and sim",
        f"{JOB_PODS / elapsed:,.0f} pods/s ({elapsed:.1f} s)",
    )


async def run(table: Table) -> None:
    await scale(table)
    await job_pods(table)
