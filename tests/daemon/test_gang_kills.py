"""A gang's admission killed in the middle of its binds: SIGKILL after the first bind, after
half of them, and after all of them but before the status that announces them. After a
restart every gang ends fully bound, each member where the admission first put it and bound
once; never partly (issue: a crash left 32-pod gangs half bound for good)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from events.intents import Bind
from events.schema import Decided
from tests.backends import on_cluster
from tests.daemon.test_gang import member, scheduled, template_ref
from tests.processes import (
    assert_reproduced,
    eventually,
    kube_client,
    logged_events,
    running_daemon,
    spawn,
)

pytestmark = pytest.mark.anyio

# 12 hosts of 8 GPUs: room for the 96-pod gang.
TOPOLOGY = "blocks=1,racks=2,hosts=6,gpus=8"
KILLS = [(size, after) for size in (32, 96) for after in (1, size // 2, size)]


@pytest.mark.parametrize(
    ("size", "after"), KILLS, ids=[f"{size}-pods-killed-after-{after}" for size, after in KILLS]
)
async def test_a_gang_killed_during_its_binds_ends_fully_bound(
    tmp_path: Path, backend: str, size: int, after: int
) -> None:
    async with (
        on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster,
        kube_client(cluster.admin) as api,
    ):
        ns = cluster.namespace
        core = client.CoreV1Api(api)
        custom = client.CustomObjectsApi(api)
        group, version = "scheduling.k8s.io", cluster.scheduling_version
        workload = {
            "apiVersion": f"{group}/{version}",
            "kind": "Workload",
            "metadata": {"name": "burst"},
            "spec": {
                "podGroupTemplates": [
                    {"name": "main", "schedulingPolicy": {"gang": {"minCount": size}}}
                ]
            },
        }
        pod_group = {
            "apiVersion": f"{group}/{version}",
            "kind": "PodGroup",
            "metadata": {"name": "burst-main"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": size}},
                **template_ref(version, "burst", "main"),
            },
        }
        await custom.create_namespaced_custom_object(group, version, ns, "workloads", workload)
        await custom.create_namespaced_custom_object(group, version, ns, "podgroups", pod_group)
        names = [f"burst-{i:02d}" for i in range(size)]
        for name in names:
            body = member(name, "burst-main")
            # Members run for a second: those bound before the kill finish while the daemon
            # is down, and must still count towards minCount.
            body["metadata"]["annotations"] = {"sim.kbatchd.dev/run-seconds": "1"}
            body["spec"]["restartPolicy"] = "Never"
            await core.create_namespaced_pod(ns, body)

        async def bound() -> dict[str, str]:
            pods = (
                await core.list_namespaced_pod(ns, field_selector="spec.schedulerName=kbatchd")
            ).items
            return {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}

        async def condition() -> dict[str, str]:
            found = await custom.get_namespaced_custom_object(
                group, version, ns, "podgroups", "burst-main"
            )
            return scheduled(found)

        config = cluster.daemon_config(tmp_path)
        async with spawn("daemon", "run", "--config", str(config), killed_after_binds=after) as d:
            assert await d.wait(within=60) == -signal.SIGKILL, d.output()
        before = await bound()
        assert len(before) == after, "exactly the binds before the kill landed"
        assert (await condition()).get("status") != "True"

        async def finished() -> bool:
            pods = [await core.read_namespaced_pod(name, ns) for name in before]
            return all(p.status.phase == "Succeeded" for p in pods)

        await eventually(finished, within=30, what="the members bound before the kill finished")

        async with running_daemon(config) as daemon:

            async def whole() -> dict[str, str] | None:
                placed = await bound()
                done = len(placed) == size and (await condition()).get("status") == "True"
                return placed if done else None

            placed = await eventually(whole, within=60, what=f"all {size} members bound")
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=15) == 0

    events = await logged_events(tmp_path / "kbatchd.db")
    decisions = {seq: e for seq, e in events if isinstance(e, Decided)}
    admissions = [d for d in decisions.values() if any(isinstance(i, Bind) for i in d.intents)]
    first = {i.name: i.node for i in admissions[0].intents if isinstance(i, Bind)}
    assert placed == first, "each member where the admission first put it"
    assert any("AdmissionResumed" in d.reason for d in decisions.values())
    again = [i.name for d in admissions[1:] for i in d.intents if isinstance(i, Bind)]
    assert sorted(again) == sorted(set(names) - set(before)), "each member bound once"
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0
