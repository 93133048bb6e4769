"""Gang preemption end to end (KEP-5710): a high-priority gang that fits nowhere evicts the
lightest lower-priority room — a group disrupted whole, not the single pods of higher
priority — and is bound into it; the victim group is requeued; `--explain` tells both sides."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from daemon.tools.explain import explain
from events.intents import Delete, Patch
from events.replay import open_for_replay
from events.schema import Decided
from tests.backends import on_cluster
from tests.daemon.test_gang import RACK, TOPOLOGY, gpus_of, scheduled
from tests.daemon.test_gang_jobs import raw_pods
from tests.processes import (
    assert_reproduced,
    eventually,
    kube_client,
    logged_events,
    running_daemon,
    spawn,
)

pytestmark = pytest.mark.anyio

GROUP = "scheduling.k8s.io"


def podgroup(version: str, name: str, count: int, priority_class: str) -> dict[str, Any]:
    """A gang of `count` inside one rack, evicted whole, at `priority_class`."""
    whole: Any = "PodGroup" if version == "v1alpha2" else {"all": {}}
    return {
        "apiVersion": f"{GROUP}/{version}",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": count}},
            "schedulingConstraints": {"topology": [{"key": RACK}]},
            "disruptionMode": whole,
            "priorityClassName": priority_class,
        },
    }


def pod(
    name: str, gpus: int, priority_class: str, *, group: str = "", host: str = ""
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "priorityClassName": priority_class,
        # Victims go at once (a preemption waits out their grace period, as upstream's).
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "main", "image": "busybox", "resources": gpus_of(gpus)}],
    }
    if group:
        spec["schedulerName"] = "kbatchd"
        spec["schedulingGroup"] = {"podGroupName": group}
    if host:
        spec["nodeSelector"] = {"kubernetes.io/hostname": host}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


async def occupy(api: client.ApiClient, ns: str, version: str) -> str:
    """The cluster full: rack 1 taken by two single pods of priority 500, rack 0 by the gang
    ``lo`` of priority 10 (8 × 2 GPUs, evicted whole), once a daemon has bound it; the name of
    the class of priority 1000."""
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    scheduling = client.SchedulingV1Api(api)
    classes = {"low": 10, "mid": 500, "high": 1000}
    for suffix, value in classes.items():
        body = {"metadata": {"name": f"{ns}-{suffix}"}, "value": value}
        await scheduling.create_priority_class(body)
    low, mid, high = (f"{ns}-{s}" for s in classes)
    for host in ("b0-r1-h0", "b0-r1-h1"):
        await core.create_namespaced_pod(ns, pod(f"mid-{host}", 8, mid, host=host))
    await custom.create_namespaced_custom_object(
        GROUP, version, ns, "podgroups", podgroup(version, "lo", 8, low)
    )
    stored = await custom.get_namespaced_custom_object(GROUP, version, ns, "podgroups", "lo")
    assert stored["spec"]["priority"] == 10, "the Priority admission plugin fills it"
    for i in range(8):
        await core.create_namespaced_pod(ns, pod(f"lo-{i}", 2, low, group="lo"))

    async def lo_bound() -> bool:
        pods = await raw_pods(api, ns)
        return len(pods) == 10 and all(p["spec"].get("nodeName") for p in pods)

    await eventually(lo_bound, within=60, what="lo and the mid pods bound")
    return high


async def preempt(api: client.ApiClient, ns: str, version: str, high: str) -> None:
    """The gang ``hi`` of priority 1000 (8 × 2 GPUs, one rack), which fits nowhere."""
    core = client.CoreV1Api(api)
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(
        GROUP, version, ns, "podgroups", podgroup(version, "hi", 8, high)
    )
    for i in range(8):
        await core.create_namespaced_pod(ns, pod(f"hi-{i}", 2, high, group="hi"))


async def took_rack_0(api: client.ApiClient, ns: str) -> None:
    """``hi`` bound in rack 0, ``lo`` gone whole, the heavier rack 1 spared."""
    core = client.CoreV1Api(api)

    async def hi_bound() -> list[dict[str, Any]] | None:
        pods = {p["metadata"]["name"]: p for p in await raw_pods(api, ns)}
        his = [p for n, p in pods.items() if n.startswith("hi-")]
        done = len(his) == 8 and all(p["spec"].get("nodeName") for p in his)
        return list(pods.values()) if done else None

    pods = await eventually(hi_bound, within=90, what="hi bound after preempting")
    names = {p["metadata"]["name"] for p in pods}
    assert not {n for n in names if n.startswith("lo-")}, "lo evicted whole"
    assert {"mid-b0-r1-h0", "mid-b0-r1-h1"} <= names, "the heavier rack spared"
    racks = set()
    for p in pods:
        if p["metadata"]["name"].startswith("hi-"):
            racks.add((await core.read_node(p["spec"]["nodeName"])).metadata.labels[RACK])
    assert racks == {"b0-r0"}


async def test_a_high_priority_gang_evicts_the_lightest_rack_whole_and_takes_it(
    tmp_path: Path, backend: str
) -> None:
    async with on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster:
        config = cluster.daemon_config(tmp_path)
        async with running_daemon(config), kube_client(cluster.admin) as api:
            ns, version = cluster.namespace, cluster.scheduling_version
            custom = client.CustomObjectsApi(api)
            high = await occupy(api, ns, version)
            await preempt(api, ns, version, high)
            await took_rack_0(api, ns)

            async def lo_requeued() -> dict[str, Any] | None:
                got = await custom.get_namespaced_custom_object(
                    GROUP, version, ns, "podgroups", "lo"
                )
                condition = scheduled(got)
                return condition if condition.get("status") == "False" else None

            condition = await eventually(lo_requeued, within=30, what="lo requeued")
            assert condition["reason"] == "Unschedulable"
    db = tmp_path / "kbatchd.db"
    events = await logged_events(db)
    marking = [
        e
        for _, e in events
        if isinstance(e, Decided)
        and e.reason.startswith("Preempting:")
        and e.key.endswith(f"/{ns}/hi")
    ]
    assert len(marking) == 1
    marks = [
        i.name
        for i in marking[0].intents
        if isinstance(i, Patch) and i.kind == "Pod" and "conditions" in json.dumps(i.patch)
    ]
    assert sorted(marks) == [f"lo-{i}" for i in range(8)]
    requeues = [
        i.patch["status"]["conditions"][0]
        for i in marking[0].intents
        if isinstance(i, Patch) and i.kind == "PodGroup" and i.name == "lo"
    ]
    assert [(c["status"], c["reason"]) for c in requeues] == [("False", "Unschedulable")], (
        "the victim is requeued by the decision that evicts it, not by its own later pass"
    )
    deleted = {
        i.name
        for _, e in events
        if isinstance(e, Decided) and e.key.endswith("/hi")
        for i in e.intents
        if isinstance(i, Delete)
    }
    assert deleted == {f"lo-{i}" for i in range(8)}
    async with open_for_replay(db) as log:
        victim = json.dumps(await explain(log, "PodGroup", ns, "lo"))
    assert "Preempting: " in victim, "the victim's account names the preemption"
    assert "Preempted: " in victim
    assert await assert_reproduced(db) > 0


async def test_a_preemption_killed_after_some_victims_are_marked_still_ends_whole(
    tmp_path: Path, backend: str
) -> None:
    """SIGKILL after 3 of lo's 8 pods are marked DisruptionTarget, before the rest are and
    before any is deleted: the next daemon marks the rest, deletes all 8 and binds hi; the
    spared rack stays spared, and nothing is preempted twice."""
    async with on_cluster(backend, tmp_path, topology=TOPOLOGY) as cluster:
        config = cluster.daemon_config(tmp_path)
        async with kube_client(cluster.admin) as api:
            ns, version = cluster.namespace, cluster.scheduling_version
            async with running_daemon(config):
                high = await occupy(api, ns, version)
            await preempt(api, ns, version, high)
            async with spawn("daemon", "run", "--config", str(config), killed_after_marks=3) as d:
                assert await d.wait(within=60) == -signal.SIGKILL, d.output()
            pods = {p["metadata"]["name"]: p for p in await raw_pods(api, ns)}
            marked = [
                n
                for n, p in pods.items()
                if any(
                    c.get("type") == "DisruptionTarget"
                    for c in p.get("status", {}).get("conditions") or ()
                )
            ]
            assert len(marked) == 3, marked
            assert all(f"lo-{i}" in pods for i in range(8)), "none deleted before the kill"
            async with running_daemon(config):
                await took_rack_0(api, ns)
    events = await logged_events(tmp_path / "kbatchd.db")
    deleted = [
        i.name
        for _, e in events
        if isinstance(e, Decided)
        for i in e.intents
        if isinstance(i, Delete) and i.kind == "Pod"
    ]
    assert sorted(deleted) == [f"lo-{i}" for i in range(8)], "each victim deleted once"
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0
