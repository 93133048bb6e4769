"""Gang admission end to end on the real control plane (`tests/realcluster`: kube-apiserver with
TLS, RBAC and a ServiceAccount token, kwok as the kubelets): the gang section's workload shapes,
fewer of them, from the first object created to the last pod finished, and the daemon's CPU
time per admitted workload. Every workload is created before the clock stops, so each is
admitted once; the CPU is the daemon's from start to stop (its start-up and watches included).
`python -m tests.bench.gang_real N` runs N workloads."""

from __future__ import annotations

import resource
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import msgspec
from kubernetes_asyncio import client

from daemon.runtime import eventloop
from tests.bench.gang import SHAPES, _objects
from tests.bench.table import Table
from tests.processes import daemon_config, eventually, kube_client, running_daemon
from tests.realcluster.controlplane import ControlPlane, ControlPlaneError

VERSION = "1.36.3"  # serves scheduling.k8s.io/v1alpha2, the version the gang section's objects use
TOPOLOGY = "blocks=1,racks=4,hosts=8,gpus=8,cpu=96,memory=256Gi"
WORKLOADS = 150
NAMESPACE = "default"
CREATORS = 8


class _Names(msgspec.Struct):
    items: list[msgspec.Raw]


async def _all_finished(core: client.CoreV1Api) -> bool:
    """Whether every pod has Succeeded (the answer decoded raw: the generated models would
    cost this process more than the poll)."""
    answer: Any = await core.list_namespaced_pod(
        NAMESPACE, field_selector="status.phase!=Succeeded", _preload_content=False
    )
    return not msgspec.json.decode(await answer.read(), type=_Names).items


async def _create(api: client.ApiClient, workloads: range) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    for i in workloads:
        group, members = _objects(i)
        pods: list[Any] = members
        await custom.create_namespaced_custom_object(
            "scheduling.k8s.io", "v1alpha2", NAMESPACE, "podgroups", group
        )
        for member in pods:
            await core.create_namespaced_pod(NAMESPACE, member)


async def run(table: Table, workloads: int = WORKLOADS) -> None:
    print(f"gang_real: {workloads:,} TAS workloads on kube-apiserver {VERSION} + kwok", flush=True)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        try:
            plane = await anyio.to_thread.run_sync(
                lambda: ControlPlane.start(VERSION, tmp / "plane", topology=TOPOLOGY)
            )
        except ControlPlaneError as exc:
            table.add("gang (real control plane)", f"not run: {exc}")
            return
        try:
            total = sum(SHAPES[i % 3][0] for i in range(workloads))
            children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
            config = daemon_config(tmp, plane.kbatchd_kubeconfig, cluster="real")
            async with kube_client(plane.admin_kubeconfig) as api, running_daemon(config):
                start = time.perf_counter()
                # A few creators at once: one alone waits on every round trip.
                async with anyio.create_task_group() as creators:
                    for k in range(CREATORS):
                        creators.start_soon(_create, api, range(k, workloads, CREATORS))
                created = time.perf_counter() - start
                await eventually(
                    lambda: _all_finished(client.CoreV1Api(api)),
                    within=1_800,
                    what="every pod Succeeded",
                )
                elapsed = time.perf_counter() - start
            # The daemon has exited (and been waited for); the control plane still runs.
            children = resource.getrusage(resource.RUSAGE_CHILDREN)
        finally:
            await anyio.to_thread.run_sync(plane.stop)
    daemon_cpu = (children.ru_utime + children.ru_stime) - (
        children_before.ru_utime + children_before.ru_stime
    )
    where = f"on kube-apiserver {VERSION}"
    table.add(f"gang {where}: create {workloads:,} workloads ({total:,} pods)", f"{created:.1f} s")
    table.add(
        f"gang {where}: {workloads:,} workloads, end to end",
        f"{elapsed:.1f} s ({workloads / elapsed:.1f} workloads/s)",
    )
    table.add(
        f"gang {where}: daemon CPU per admitted workload",
        f"{daemon_cpu / workloads * 1000:.1f} ms ({daemon_cpu:.1f} s for {workloads:,})",
    )


if __name__ == "__main__":
    import sys

    eventloop.run(run, Table(), int(sys.argv[1]) if len(sys.argv) > 1 else WORKLOADS)
