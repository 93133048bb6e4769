"""Cross-cluster preemption without wasted evictions: one workload dispatched to three worker
clusters, each of them full, so that it fits in none without preemption.

- **Coordinated** (kbatchd's dispatcher): the Job goes to the manager; kbatchd claims the
  lightest preemption in one worker, evicts there, and commits.
- **Uncoordinated AllAtOnce** (the same planner with coordination off, as MultiKueue without
  orchestrated preemption): a copy goes to every worker at once, as a gang of its own there
  (PodGroup and pods, kbatchd's gang scheduler preempting in each worker for its copy); the
  first copy whose pods all run wins and the others are deleted, as MultiKueue removes the
  copies that lost. Every eviction in a worker that does not run it is wasted.

Per mode, over `RUNS` runs, each on fresh simulated clusters (one manager and three workers of
two racks of two 8-GPU hosts, every host held by one low-priority 8-GPU pod): the pods
evicted, those wasted, and the time from submission to the workload's pods all Running.
`python -m tests.bench.multicluster` runs it alone."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
from kubernetes_asyncio import client

from daemon.runtime import eventloop
from tests.bench.table import Table
from tests.daemon.test_gang_preemption import pod as gang_pod
from tests.daemon.test_gang_preemption import podgroup
from tests.daemon.test_multicluster import (
    ALL_FILLS,
    MANAGER,
    NS,
    WORKERS,
    Side,
    clusters,
    config,
    fills_left,
    job,
    running_in,
    submit,
)
from tests.processes import eventually, kube_client, running_daemon

RUNS = 3
GROUP, VERSION = "scheduling.k8s.io", "v1alpha2"  # what the simulated cluster serves


async def _coordinated(tmp: Path) -> tuple[float, set[tuple[str, str]], str]:
    async with clusters(tmp, cheap=False) as sides, running_daemon(config(tmp, sides)):
        start = time.perf_counter()
        await submit(sides[MANAGER].admin, job("big", "high"))
        worker = await running_in(sides, "big")
        took = time.perf_counter() - start
        return took, ALL_FILLS - await fills_left(sides), worker


def _copy(name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The workload as a worker's gang: a PodGroup of two (one rack) and its two 8-GPU pods
    at priority high, for kbatchd's gang scheduler."""
    pods = [gang_pod(f"{name}-{i}", 8, "high", group=name) for i in range(2)]
    return podgroup(VERSION, name, 2, "high"), pods


async def _uncoordinated(tmp: Path) -> tuple[float, set[tuple[str, str]], str]:
    async with clusters(tmp, cheap=False) as sides:
        path = config(tmp, sides)
        # The dispatcher off: the bench dispatches, as an uncoordinated AllAtOnce would.
        path.write_text(path.read_text().replace("enabled = true", "enabled = false"))
        async with running_daemon(path):
            start = time.perf_counter()
            group, pods = _copy("big")
            for worker in WORKERS:
                async with kube_client(sides[worker].admin) as api:
                    custom = client.CustomObjectsApi(api)
                    await custom.create_namespaced_custom_object(
                        GROUP, VERSION, NS, "podgroups", group
                    )
                    for pod in pods:
                        body: Any = pod
                        await client.CoreV1Api(api).create_namespaced_pod(NS, body)

            async def first_running() -> str | None:
                for worker in WORKERS:
                    async with kube_client(sides[worker].admin) as api:
                        found = (await client.CoreV1Api(api).list_namespaced_pod(NS)).items
                    mine = [p for p in found if p.metadata.name.startswith("big-")]
                    if len(mine) == 2 and all(p.status.phase == "Running" for p in mine):
                        return worker
                return None

            winner: str = await eventually(first_running, within=60, what="a copy running")
            took = time.perf_counter() - start
            for worker in WORKERS:
                if worker == winner:
                    continue
                async with kube_client(sides[worker].admin) as api:
                    for pod in pods:
                        await client.CoreV1Api(api).delete_namespaced_pod(
                            pod["metadata"]["name"], NS, grace_period_seconds=0
                        )
                    await client.CustomObjectsApi(api).delete_namespaced_custom_object(
                        GROUP, VERSION, NS, "podgroups", "big"
                    )
            return took, ALL_FILLS - await _settled(sides), winner


async def _settled(sides: dict[str, Side]) -> set[tuple[str, str]]:
    """The fill pods left once none has gone for 2 s (victims marked before the losing copies
    were removed are still deleted afterwards)."""
    last: set[tuple[str, str]] | None = None
    since = time.perf_counter()
    while True:
        left = await fills_left(sides)
        if left != last:
            last, since = left, time.perf_counter()
        elif time.perf_counter() - since >= 2.0:
            return left
        await anyio.sleep(0.2)


def _row(times: list[float], evicted: list[set[tuple[str, str]]], winners: list[str]) -> str:
    wasted = [sum(w != winner for w, _ in e) for e, winner in zip(evicted, winners, strict=True)]
    return (
        f"evicted {sum(map(len, evicted))} pods ({sum(wasted)} wasted) over {len(times)} runs; "
        f"submission to running median {statistics.median(times):.2f} s, "
        f"max {max(times):.2f} s"
    )


async def run(table: Table) -> None:
    print("multicluster: one workload, three full workers, coordinated vs not", flush=True)
    results: dict[str, tuple[list[float], list[set[tuple[str, str]]], list[str]]] = {}
    for mode, play in (("coordinated", _coordinated), ("uncoordinated", _uncoordinated)):
        times, evicted, winners = [], [], []
        for _ in range(RUNS):
            with tempfile.TemporaryDirectory() as tmp:
                took, gone, winner = await play(Path(tmp))
            times.append(took)
            evicted.append(gone)
            winners.append(winner)
        results[mode] = (times, evicted, winners)
    where = "cross-cluster preemption, 1 workload × 3 full workers"
    times, evicted, winners = results["coordinated"]
    wasted = sum(sum(w != winner for w, _ in e) for e, winner in zip(evicted, winners, strict=True))
    table.add(
        f"{where}: kbatchd, coordinated", _row(*results["coordinated"]), "0 wasted", wasted == 0
    )
    table.add(f"{where}: uncoordinated AllAtOnce, same planner", _row(*results["uncoordinated"]))


if __name__ == "__main__":
    table = Table()
    eventloop.run(run, table)
    print(table.render())
