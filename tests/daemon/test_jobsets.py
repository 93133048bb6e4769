"""JobSets managed by kbatchd, end to end: the daemon as a real process against the simulated
cluster on loopback, observed through a standard client; every log is replayed with `--verify`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client, watch

from tests.backends import SIM, on_cluster
from tests.processes import (
    assert_reproduced,
    daemon_config,
    eventually,
    kube_client,
    running_daemon,
    simulated_cluster_here,
)

pytestmark = pytest.mark.anyio

GROUP, VERSION, PLURAL = "jobset.x-k8s.io", "v1alpha2", "jobsets"
MANAGER = "kbatchd.dev/jobset-controller"
NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
MAX_INT32 = 2**31 - 1
RUN = "sim.kbatchd.dev/run-seconds"
EXIT = "sim.kbatchd.dev/exit-code"


def replicated(
    name: str,
    replicas: int = 1,
    pods: int = 1,
    *,
    depends_on: list[tuple[str, str]] | None = None,
    annotations: dict[str, str] | None = None,
    containers: list[dict[str, Any]] | None = None,
    **job: Any,
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": pods,
                "completions": pods,
                "template": {
                    "metadata": {"annotations": annotations or {}},
                    "spec": {
                        "restartPolicy": "Never",
                        "terminationGracePeriodSeconds": 0,
                        "containers": containers or [{"name": "main", "image": "busybox"}],
                    },
                },
                **job,
            }
        },
    }
    if depends_on:
        entry["dependsOn"] = [{"name": n, "status": s} for n, s in depends_on]
    return entry


def jobset(name: str, rjs: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {"managedBy": MANAGER, "replicatedJobs": rjs, **spec},
    }


async def create(api: client.ApiClient, body: dict[str, Any], namespace: str = "default") -> None:
    custom = client.CustomObjectsApi(api)
    await custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


async def read(api: client.ApiClient, name: str, namespace: str = "default") -> dict[str, Any]:
    custom = client.CustomObjectsApi(api)
    obj: dict[str, Any] = await custom.get_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, name
    )
    return obj


async def pods_of(api: client.ApiClient, name: str, namespace: str = "default") -> list[Any]:
    core = client.CoreV1Api(api)
    found = await core.list_namespaced_pod(namespace, label_selector=f"{NAME_LABEL}={name}")
    return [p for p in found.items if p.metadata.deletion_timestamp is None]


async def running(
    api: client.ApiClient, name: str, count: int, namespace: str = "default"
) -> dict[str, Any]:
    """The JobSet's pods by name once exactly `count` of them run and are ready."""

    async def check() -> dict[str, Any] | None:
        pods = await pods_of(api, name, namespace)
        ready = [
            p
            for p in pods
            if p.status.phase == "Running"
            and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or ())
        ]
        if len(pods) == count and len(ready) == count:
            return {p.metadata.name: p for p in pods}
        return None

    result: dict[str, Any] = await eventually(
        check, within=60, what=f"{count} ready pods of {name}"
    )
    return result


def complete(job: Any) -> bool:
    return any(c.type == "Complete" and c.status == "True" for c in job.status.conditions or ())


async def test_depends_on_creates_replicated_jobs_in_order(tmp_path: Path, backend: str) -> None:
    """a, then b once a is Complete, then c once b is Ready — seen through a watch."""
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        ns = cluster.namespace
        batch = client.BatchV1Api(api)
        listing = await batch.list_namespaced_job(ns)
        await create(
            api,
            jobset(
                "order",
                [
                    replicated("a", annotations={RUN: "2"}),
                    replicated("b", depends_on=[("a", "Complete")]),
                    replicated("c", depends_on=[("b", "Ready")]),
                ],
            ),
            ns,
        )
        seen: list[tuple[str, str, bool, int]] = []
        with anyio.fail_after(60):
            async with watch.Watch() as stream:
                async for event in stream.stream(
                    batch.list_namespaced_job,
                    ns,
                    label_selector=f"{NAME_LABEL}=order",
                    resource_version=listing.metadata.resource_version,
                ):
                    job = event["object"]
                    seen.append(
                        (event["type"], job.metadata.name, complete(job), job.status.ready or 0)
                    )
                    if event["type"] == "ADDED" and job.metadata.name == "order-c-0":
                        break

    def first(match: Callable[[tuple[str, str, bool, int]], bool]) -> int:
        return next(i for i, e in enumerate(seen) if match(e))

    added = {}
    for name in "abc":
        job = f"order-{name}-0"
        added[name] = first(lambda e, job=job: e[0] == "ADDED" and e[1] == job)  # type: ignore[misc]
    assert [n for n, _ in sorted(added.items(), key=lambda kv: kv[1])] == ["a", "b", "c"]
    a_done = first(lambda e: e[1] == "order-a-0" and e[2])
    b_ready = first(lambda e: e[1] == "order-b-0" and e[3] >= 1)
    assert added["a"] < a_done < added["b"] < b_ready < added["c"], seen
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


def in_place_containers() -> list[dict[str, Any]]:
    """upstream's agent (main-container mode) plus a worker; both restart the pod in place."""
    return [
        {
            "name": "in-place-restart-agent",
            "image": "registry.k8s.io/jobset/in-place-restart-agent:v0.11.0",
            "restartPolicy": "Never",
            "env": [{"name": "IN_PLACE_RESTART_EXIT_CODE", "value": "1"}],
            "restartPolicyRules": [
                {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [1]}}
            ],
        },
        {
            "name": "worker",
            "image": "trainer",
            "restartPolicy": "Never",
            "restartPolicyRules": [
                {"action": "RestartAllContainers", "exitCodes": {"operator": "In", "values": [42]}}
            ],
        },
    ]


async def test_in_place_restart_keeps_all_32_pods(tmp_path: Path, backend: str) -> None:
    """8 Jobs x 4 pods; one worker crashes: it restarts in place, kbatchd moves the barrier, every
    other pod's agent restarts its pod in place too, and no pod or Job is replaced."""
    if backend != SIM:
        pytest.skip(
            "restarting containers in place (restartPolicyRules, RestartAllContainers) is the "
            "kubelet's; kwok plays pod phases, not containers, so only the simulated cluster can"
        )
    async with (
        simulated_cluster_here(tmp_path) as (_, kubeconfig),
        running_daemon(daemon_config(tmp_path, kubeconfig)),
        kube_client(kubeconfig) as api,
    ):
        core = client.CoreV1Api(api)
        batch = client.BatchV1Api(api)
        rj = replicated(
            "w",
            8,
            4,
            containers=in_place_containers(),
            backoffLimit=MAX_INT32,
            podReplacementPolicy="Failed",
        )
        body = jobset(
            "inplace", [rj], failurePolicy={"maxRestarts": 3, "restartStrategy": "InPlaceRestart"}
        )
        await create(api, body)
        pods = await running(api, "inplace", 32)

        async def synced(attempt: int) -> bool:
            status = (await read(api, "inplace")).get("status") or {}
            return status.get("currentInPlaceRestartAttempt") == attempt

        await eventually(lambda: synced(0), within=30, what="currentInPlaceRestartAttempt=0")
        before = {name: (p.metadata.uid, p.spec.node_name) for name, p in pods.items()}
        jobs = {
            j.metadata.name: j.metadata.uid
            for j in (await batch.list_namespaced_job("default")).items
        }
        victim = sorted(pods)[9]
        await core.patch_namespaced_pod(
            victim, "default", {"metadata": {"annotations": {RUN: "1", EXIT: "42"}}}
        )

        async def crashed() -> bool:
            pod = await core.read_namespaced_pod(victim, "default")
            return any(
                c.type == "AllContainersRestarting" and c.status == "True"
                for c in pod.status.conditions or ()
            )

        await eventually(crashed, within=30, what=f"{victim} restarting in place")
        # Crash once: the annotations would make it crash again after its restart.
        await core.patch_namespaced_pod(
            victim, "default", {"metadata": {"annotations": {RUN: None, EXIT: None}}}
        )
        await eventually(lambda: synced(1), within=60, what="currentInPlaceRestartAttempt=1")
        status = (await read(api, "inplace"))["status"]
        after = await running(api, "inplace", 32)
        assert {name: (p.metadata.uid, p.spec.node_name) for name, p in after.items()} == before
        assert all(
            cs.restart_count >= 1 for p in after.values() for cs in p.status.container_statuses
        )
        assert status["previousInPlaceRestartAttempt"] == 0
        assert status.get("restarts", 0) == 0
        assert {
            j.metadata.name: j.metadata.uid
            for j in (await batch.list_namespaced_job("default")).items
        } == jobs
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


async def fail_one_pod(
    tmp_path: Path, backend: str, policy: dict[str, Any]
) -> tuple[dict[str, str], dict[str, str], str]:
    """8 Jobs x 4 pods with backoffLimit 0; one pod fails. Returns pod uids by name before and
    after the JobSet recovered, and the failed pod's Job."""
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        ns = cluster.namespace
        core = client.CoreV1Api(api)
        await create(
            api, jobset("fail", [replicated("w", 8, 4, backoffLimit=0)], failurePolicy=policy), ns
        )
        pods = await running(api, "fail", 32, ns)
        before = {name: p.metadata.uid for name, p in pods.items()}
        victim = pods[sorted(pods)[13]]
        failed_job = victim.metadata.labels["batch.kubernetes.io/job-name"]
        await core.patch_namespaced_pod(
            victim.metadata.name, ns, {"metadata": {"annotations": {RUN: "0", EXIT: "1"}}}
        )

        async def recovered() -> dict[str, str] | None:
            pods = await pods_of(api, "fail", ns)
            ready = [p for p in pods if p.status.phase == "Running"]
            replaced = [p for p in pods if p.metadata.uid not in before.values()]
            if len(ready) == 32 and replaced:
                return {p.metadata.name: p.metadata.uid for p in pods}
            return None

        after: dict[str, str] = await eventually(recovered, within=90, what="32 pods again")
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0
    return before, after, failed_job


async def test_restart_job_replaces_only_the_failed_jobs_pods(tmp_path: Path, backend: str) -> None:
    before, after, failed_job = await fail_one_pod(
        tmp_path,
        backend,
        {"maxRestarts": 3, "rules": [{"name": "restartFailed", "action": "RestartJob"}]},
    )
    kept = {n: u for n, u in before.items() if not n.startswith(failed_job + "-")}
    assert len(kept) == 28
    assert {n: after.get(n) for n in kept} == kept
    new = {n for n, u in after.items() if u not in before.values()}
    assert len(new) == 4
    assert all(n.startswith(failed_job + "-") for n in new)


async def test_restart_jobset_replaces_every_pod(tmp_path: Path, backend: str) -> None:
    before, after, _ = await fail_one_pod(tmp_path, backend, {"maxRestarts": 3})
    assert not set(before.values()) & set(after.values())
    assert len(after) == 32


async def test_exclusive_placement_puts_one_job_per_rack(tmp_path: Path, backend: str) -> None:
    """3 Jobs x 4 pods on 2 racks with exclusive-topology on the rack label: the first two Jobs
    take a rack each (first fit would have put every pod on one node), the third Job's leader
    waits unbound with no follower created until a rack is free, then runs there."""
    rack = "cloud.provider.com/topology-rack"
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        ns = cluster.namespace
        core = client.CoreV1Api(api)
        racks = {n.metadata.name: n.metadata.labels[rack] for n in (await core.list_node()).items}
        body = jobset(
            "excl",
            [replicated("w", 3, 4, annotations={RUN: "4"})],
        )
        body["metadata"]["annotations"] = {"alpha.jobset.sigs.k8s.io/exclusive-topology": rack}
        await create(api, body, ns)

        def job_of(pod: Any) -> str:
            return str(pod.metadata.labels["batch.kubernetes.io/job-name"])

        async def two_running() -> list[Any] | None:
            pods = await pods_of(api, "excl", ns)
            running = [p for p in pods if p.status.phase == "Running"]
            return pods if len(running) == 8 else None

        pods = await eventually(two_running, within=60, what="8 running pods of 2 Jobs")
        by_job: dict[str, list[Any]] = {}
        for pod in pods:
            by_job.setdefault(job_of(pod), []).append(pod)
        waiting = [name for name, members in by_job.items() if len(members) == 1]
        assert len(waiting) == 1, {n: len(m) for n, m in by_job.items()}
        (leader,) = by_job[waiting[0]]
        assert leader.spec.node_name is None
        placed = {
            name: {racks[p.spec.node_name] for p in members}
            for name, members in by_job.items()
            if name not in waiting
        }
        assert sorted(len(r) for r in placed.values()) == [1, 1], placed
        assert len(set.union(*placed.values())) == 2, placed

        async def completed() -> bool:
            status = (await read(api, "excl", ns)).get("status") or {}
            return status.get("terminalState") == "Completed"

        await eventually(completed, within=90, what="JobSet excl Completed")
        final: dict[str, set[str]] = {}
        for pod in (await core.list_namespaced_pod(ns)).items:
            final.setdefault(job_of(pod), set()).add(racks[pod.spec.node_name])
        assert sorted(final) == ["excl-w-0", "excl-w-1", "excl-w-2"]
        assert all(len(r) == 1 for r in final.values()), final
        # The headless Service the pods' subdomain resolves through (spec B0).
        service = await core.read_namespaced_service("excl", ns)
        assert service.spec.cluster_ip == "None"
        assert service.spec.selector == {NAME_LABEL: "excl"}
        assert service.spec.publish_not_ready_addresses is True
        (owner,) = service.metadata.owner_references
        assert (owner.kind, owner.name, owner.controller) == ("JobSet", "excl", True)
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


def claim_template(name: str, *, scratch: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if scratch:
        meta["annotations"] = {"kbatchd.dev/scratch": "true"}
    return {
        "metadata": meta,
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }


def volume(claim: str, namespace: str) -> dict[str, Any]:
    """A PersistentVolume waiting for one claim: the real scheduler places no pod whose claim
    is unbound, and the test cluster has no provisioner."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{namespace}-{claim}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": f"/tmp/{namespace}-{claim}"},
            "claimRef": {"namespace": namespace, "name": claim},
        },
    }


async def test_volume_claims_are_shared_and_deleted_or_retained_as_their_policy_says(
    tmp_path: Path, backend: str
) -> None:
    """Three claim templates: a scratch claim goes when the JobSet finishes, a Delete one with
    the JobSet object, a Retain one outlives it."""
    mounts = [{"name": n, "mountPath": f"/{n}"} for n in ("scratch", "data", "keep")]
    containers = [{"name": "main", "image": "busybox", "volumeMounts": mounts}]
    body = jobset(
        "vols",
        [replicated("w", 2, 1, annotations={RUN: "1"}, containers=containers)],
        volumeClaimPolicies=[
            {"templates": [claim_template("scratch", scratch=True), claim_template("data")]},
            {"templates": [claim_template("keep")], "retentionPolicy": {"whenDeleted": "Retain"}},
        ],
    )
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        ns = cluster.namespace
        core = client.CoreV1Api(api)
        if cluster.real:
            for claim in ("scratch-vols", "data-vols", "keep-vols"):
                await core.create_persistent_volume(volume(claim, ns))
        await create(api, body, ns)

        async def claims_are(*expected: str) -> bool:
            found = await core.list_namespaced_persistent_volume_claim(ns)
            names = {c.metadata.name for c in found.items if c.metadata.deletion_timestamp is None}
            return names == set(expected)

        await eventually(
            lambda: claims_are("scratch-vols", "data-vols", "keep-vols"), what="the three claims"
        )

        async def both_pods() -> list[Any] | None:
            pods = await pods_of(api, "vols", ns)
            return pods if len(pods) == 2 else None

        for pod in await eventually(both_pods, what="the JobSet's 2 pods"):
            # The real server adds the ServiceAccount token's projected volume.
            volumes = {
                v.name: v.persistent_volume_claim.claim_name
                for v in pod.spec.volumes
                if v.persistent_volume_claim is not None
            }
            assert {k: volumes[k] for k in ("scratch", "data", "keep")} == {
                "scratch": "scratch-vols",
                "data": "data-vols",
                "keep": "keep-vols",
            }

        async def completed() -> bool:
            status = (await read(api, "vols", ns)).get("status") or {}
            return status.get("terminalState") == "Completed"

        await eventually(completed, within=90, what="JobSet vols Completed")
        await eventually(
            lambda: claims_are("data-vols", "keep-vols"), what="the scratch claim deleted"
        )
        custom = client.CustomObjectsApi(api)
        await custom.delete_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "vols", propagation_policy="Foreground"
        )
        await eventually(lambda: claims_are("keep-vols"), within=60, what="only the retained claim")
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0
