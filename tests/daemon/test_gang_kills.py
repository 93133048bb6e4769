"""A gang's admission killed in the middle of its binds: SIGKILL after the first bind, after
half of them, and after all of them but before the status that announces them. After a
restart every gang ends fully bound, each member where the admission first put it and bound
once; never partly (issue: a crash left 32-pod gangs half bound for good)."""

from __future__ import annotations

import signal
from collections.abc import Iterable
from pathlib import Path

import pytest
from kubernetes_asyncio import client

from events.intents import Bind
from events.schema import Decided
from tests.backends import Cluster, on_cluster
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
GROUP = "scheduling.k8s.io"


class Burst:
    """A Workload with one gang template, its PodGroup ``burst-main`` and `size` members, on
    a cluster, and what a test reads of them."""

    def __init__(self, cluster: Cluster, api: client.ApiClient, size: int) -> None:
        self.cluster, self.size = cluster, size
        self.ns, self.version = cluster.namespace, cluster.scheduling_version
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.names = [f"burst-{i:02d}" for i in range(size)]

    async def create(self, annotations: dict[str, str]) -> None:
        gang = {"gang": {"minCount": self.size}}
        workload = {
            "apiVersion": f"{GROUP}/{self.version}",
            "kind": "Workload",
            "metadata": {"name": "burst"},
            "spec": {"podGroupTemplates": [{"name": "main", "schedulingPolicy": gang}]},
        }
        pod_group = {
            "apiVersion": f"{GROUP}/{self.version}",
            "kind": "PodGroup",
            "metadata": {"name": "burst-main"},
            "spec": {"schedulingPolicy": gang, **template_ref(self.version, "burst", "main")},
        }
        for plural, body in (("workloads", workload), ("podgroups", pod_group)):
            await self.custom.create_namespaced_custom_object(
                GROUP, self.version, self.ns, plural, body
            )
        for name in self.names:
            body = member(name, "burst-main")
            body["metadata"]["annotations"] = annotations
            body["spec"]["restartPolicy"] = "Never"
            await self.core.create_namespaced_pod(self.ns, body)

    async def bound(self) -> dict[str, str]:
        """Member -> node, for the live members bound."""
        pods = (
            await self.core.list_namespaced_pod(
                self.ns, field_selector="spec.schedulerName=kbatchd"
            )
        ).items
        return {
            p.metadata.name: p.spec.node_name
            for p in pods
            if p.spec.node_name and p.metadata.deletion_timestamp is None
        }

    async def phases(self, names: Iterable[str]) -> list[str]:
        return [(await self.core.read_namespaced_pod(n, self.ns)).status.phase for n in names]

    async def condition(self) -> dict[str, str]:
        found = await self.custom.get_namespaced_custom_object(
            GROUP, self.version, self.ns, "podgroups", "burst-main"
        )
        return scheduled(found)

    async def killed_after(self, binds: int, config: Path) -> dict[str, str]:
        """Run a daemon that is SIGKILLed once `binds` binds landed; what is bound then."""
        async with spawn("daemon", "run", "--config", str(config), killed_after_binds=binds) as d:
            assert await d.wait(within=60) == -signal.SIGKILL, d.output()
        before = await self.bound()
        assert len(before) == binds, "exactly the binds before the kill landed"
        assert (await self.condition()).get("status") != "True"
        return before


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
        burst = Burst(cluster, api, size)
        # Members run for a second: those bound before the kill finish while the daemon is
        # down, and must still count towards minCount.
        await burst.create({"sim.kbatchd.dev/run-seconds": "1"})
        config = cluster.daemon_config(tmp_path)
        before = await burst.killed_after(after, config)

        async def finished() -> bool:
            return all(p == "Succeeded" for p in await burst.phases(before))

        await eventually(finished, within=30, what="the members bound before the kill finished")
        async with running_daemon(config) as daemon:

            async def whole() -> dict[str, str] | None:
                pods = (
                    await burst.core.list_namespaced_pod(
                        burst.ns, field_selector="spec.schedulerName=kbatchd"
                    )
                ).items
                placed = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
                admitted = (await burst.condition()).get("status") == "True"
                return placed if len(placed) == size and admitted else None

            placed = await eventually(whole, within=60, what=f"all {size} members bound")
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=15) == 0

    events = await logged_events(tmp_path / "kbatchd.db")
    admissions = [
        e
        for _, e in events
        if isinstance(e, Decided) and any(isinstance(i, Bind) for i in e.intents)
    ]
    first = {i.name: i.node for i in admissions[0].intents if isinstance(i, Bind)}
    assert placed == first, "each member where the admission first put it"
    assert any(isinstance(e, Decided) and "AdmissionResumed" in e.reason for _, e in events)
    again = [i.name for d in admissions[1:] for i in d.intents if isinstance(i, Bind)]
    assert sorted(again) == sorted(set(burst.names) - set(before)), "each member bound once"
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


async def test_a_gang_that_lost_a_member_placed_before_the_kill_is_requeued_whole(
    tmp_path: Path, backend: str
) -> None:
    """Killed after half its binds; one of the members still to bind is deleted meanwhile, so
    the admission cannot be finished: the members it bound are evicted and the group waits
    for members again, none of them bound."""
    async with (
        on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster,
        kube_client(cluster.admin) as api,
    ):
        burst = Burst(cluster, api, 32)
        await burst.create({})
        config = cluster.daemon_config(tmp_path)
        before = await burst.killed_after(16, config)
        lost = next(n for n in reversed(burst.names) if n not in before)
        await burst.core.delete_namespaced_pod(lost, burst.ns, grace_period_seconds=0)
        async with running_daemon(config):

            async def requeued() -> bool:
                condition = await burst.condition()
                return condition.get("status") == "False" and not await burst.bound()

            await eventually(requeued, within=60, what="the gang requeued whole")
    events = await logged_events(tmp_path / "kbatchd.db")
    reasons = [e.reason for _, e in events if isinstance(e, Decided)]
    assert any(
        "AdmissionInterrupted: burst-main: 31 of minCount 32 member(s) left to finish it; "
        "16 bound member(s) evicted, requeued" in reason
        for reason in reasons
    ), reasons
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0
