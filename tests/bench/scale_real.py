"""The scale section's load on a real control plane (`tests/realcluster`: kube-apiserver
1.36.3, etcd, kube-scheduler, kube-controller-manager, and kwok as the kubelets), as far as the
2 cores it shares with the daemon take it.

The plan is `tests.bench.scale`'s shrunk by `--scale` (by default `SCALE`: 10 hosts a rack,
1,000 nodes, 10,000 pods, one gang of 1,000), the daemon runs with the same settings, and the
figures are read the same way, from its log and its `/metrics` (`tests.bench.scale.drive`,
`report`). What differs is the cluster: the objects are created through kube-apiserver with
admin credentials by `CREATORS` tasks (a workload's objects in order by one task),
kube-scheduler binds the Job and JobSet pods while kbatchd binds the gangs', kwok runs every
pod its 2 s, and the pods' phases are read from one watch of the namespace. The cluster's CPU
is its five processes'; this process (the creators and the watch) is not counted.

`python -m tests.bench.scale_real --scale F` runs another size."""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio
import msgspec
from kubernetes_asyncio import client

from daemon.runtime import eventloop
from tests.bench.phases import PhaseCount
from tests.bench.proc import cpu_seconds
from tests.bench.realplane import WatchEvent, list_version, ok, schedulable, watch_namespace
from tests.bench.scale import (
    NS,
    Plan,
    Workload,
    describe,
    drive,
    plan,
    read_figures,
    report,
    workloads,
)
from tests.bench.table import Table
from tests.processes import daemon_config, kube_client
from tests.realcluster.controlplane import ControlPlane, ControlPlaneError

VERSION: Final = "1.36.3"  # serves scheduling.k8s.io/v1alpha2, the PodGroups the plan makes
SCALE: Final = 0.1
CREATORS: Final = 8
COMPONENTS: Final = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
WHERE: Final = f"scale on kube-apiserver {VERSION}"


class _Meta(msgspec.Struct):
    name: str = ""
    resourceVersion: str = ""


class _Status(msgspec.Struct):
    phase: str = ""
    reason: str = ""
    message: str = ""


class _Pod(msgspec.Struct):
    metadata: _Meta
    status: _Status = msgspec.field(default_factory=_Status)


@dataclass
class PlaneLoad:
    """The plane as `tests.bench.scale.LoadCluster`: created through its API, watched."""

    plane: ControlPlane
    api: client.ApiClient
    phases: dict[str, str] = field(default_factory=dict)
    failed: dict[str, _Status] = field(default_factory=dict)
    counts: list[PhaseCount] = field(default_factory=list)

    def seen(self, kind: str, pod: _Pod) -> None:
        name, phase = pod.metadata.name, pod.status.phase
        if kind == "DELETED" or self.phases.get(name) == phase:
            return
        self.phases[name] = phase
        if phase == "Failed":
            self.failed[name] = pod.status
        for count in self.counts:
            count.see(phase)

    def daemon_config(self, tmp: Path) -> Path:
        return daemon_config(tmp, self.plane.kbatchd_kubeconfig, cluster="real")

    def reached(self, count: int, phase: str) -> PhaseCount:
        waiter = PhaseCount(count, phase)
        self.counts.append(waiter)
        return waiter

    def failed_pod(self) -> str:
        name, status = next(iter(self.failed.items()))
        return f"{name}: {status.reason} {status.message}"

    async def create(self, workload: Workload) -> None:
        core, batch = client.CoreV1Api(self.api), client.BatchV1Api(self.api)
        custom = client.CustomObjectsApi(self.api)
        for plural, body in workload.objects:
            raw: Any = body  # the generated models' types; the client sends a dict as it is
            answer: Any
            if plural == "pods":
                answer = await core.create_namespaced_pod(NS, raw, _preload_content=False)
            elif plural == "jobs":
                answer = await batch.create_namespaced_job(NS, raw, _preload_content=False)
            else:
                group = "scheduling.k8s.io" if plural == "podgroups" else "jobset.x-k8s.io"
                answer = await custom.create_namespaced_custom_object(
                    group, "v1alpha2", NS, plural, body, _preload_content=False
                )
            await ok(answer, f"{plural} {body['metadata']['name']}")

    async def create_all(self, the: Plan) -> None:
        # One creator alone waits on every round trip; each takes the next whole workload.
        items = workloads(the)

        async def creator() -> None:
            for workload in items:
                await self.create(workload)

        async with anyio.create_task_group() as creators:
            for _ in range(CREATORS):
                creators.start_soon(creator)

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(self.plane.pid(name)) for name in COMPONENTS)


@asynccontextmanager
async def watched(
    plane: ControlPlane, api: client.ApiClient, nodes: int
) -> AsyncIterator[PlaneLoad]:
    """The plane with every node schedulable and its pods watched while in use."""
    # Taken off at about 5 nodes a second (`schedulable`): 2,000 nodes took over 300 s.
    await schedulable(api, within=max(300.0, nodes / 2))
    load = PlaneLoad(plane, api)
    core = client.CoreV1Api(api)
    version = await list_version(await core.list_namespaced_pod(NS, _preload_content=False))
    decoder = msgspec.json.Decoder(WatchEvent[_Pod])
    async with anyio.create_task_group() as tasks:
        tasks.start_soon(watch_namespace, core.list_namespaced_pod, NS, version, decoder, load.seen)
        yield load
        tasks.cancel_scope.cancel()


async def run(table: Table, scale: float = SCALE) -> None:
    the = plan(scale)
    print(f"scale_real: {describe(the)}, on kube-apiserver {VERSION} + kwok", flush=True)
    with tempfile.TemporaryDirectory(prefix="kbatchd-scale-real-") as tmp_name:
        tmp = Path(tmp_name)
        try:
            plane = await anyio.to_thread.run_sync(
                lambda: ControlPlane.start(VERSION, tmp / "plane", topology=the.topology)
            )
        except ControlPlaneError as exc:
            table.add(WHERE, f"not run: {exc}")
            return
        try:
            async with (
                kube_client(plane.admin_kubeconfig) as api,
                watched(plane, api, the.nodes) as load,
            ):
                done = await drive(the, tmp, load)
        finally:
            await anyio.to_thread.run_sync(plane.stop)
        figures = await read_figures(tmp / "kbatchd.db", the, done)
    report(table, the, done, figures, WHERE, f"the control plane ({', '.join(COMPONENTS)})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--scale", type=float, default=SCALE, help="fraction of full size")
    args = parser.parse_args()
    table = Table()
    eventloop.run(run, table, args.scale)
    print()
    print(table.render())
