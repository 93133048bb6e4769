"""Jobs managed by kbatchd, end to end: the daemon as a real process against the simulated
cluster on loopback, observed through a standard client."""

from __future__ import annotations

import signal
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client, watch
from kubernetes_asyncio.client.exceptions import ApiException

from daemon.controllers.job.status import BATCHED_FIELDS
from events.fold import fold_all
from events.intents import Create, Patch
from events.schema import Decided, Event, Observed, Outcome
from events.state import State
from tests.backends import on_cluster, real_params
from tests.processes import (
    Child,
    assert_reproduced,
    eventually,
    kube_client,
    logged_events,
    running_daemon,
    scraped,
    spawn,
)

pytestmark = pytest.mark.anyio

MANAGER = "kbatchd.dev/job-controller"
FINALIZER = "kbatchd.dev/job-tracking"


def job_body(
    name: str,
    *,
    policy: str | None = None,
    suspend: bool = False,
    parallelism: int = 1,
    completions: int = 1,
    cpu: str = "1",
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "managedBy": MANAGER,
        "suspend": suspend,
        "parallelism": parallelism,
        "completions": completions,
        "template": {
            "metadata": {"annotations": annotations or {}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}
                ],
            },
        },
    }
    if policy is not None:
        spec["podReplacementPolicy"] = policy
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name}, "spec": spec}


def pods_ever_held(events: list[tuple[int, Event]], job: str) -> set[str]:
    """Names of every pod of Job `job` the log saw in the cluster."""
    return {
        e.obj.name
        for _, e in events
        if isinstance(e, Observed) and e.kind == "Pod" and e.obj.labels.get("job-name") == job
    }


def pods_created(events: list[tuple[int, Event]]) -> list[str]:
    """Names of the pods the API server created for kbatchd, from the log's outcomes (a
    create that failed made nothing; one that found the pod already there made nothing new)."""
    decisions = {seq: e for seq, e in events if isinstance(e, Decided)}
    created = []
    for _, event in events:
        if isinstance(event, Outcome) and event.ok and event.code == 201:
            intent = decisions[event.decision].intents[event.index]
            if isinstance(intent, Create) and intent.kind == "Pod":
                created.append(intent.name)
    assert len(created) == len(set(created)), "a pod was created twice"
    return created


async def pods_of(core: client.CoreV1Api, job: str, namespace: str = "default") -> list[Any]:
    found = await core.list_namespaced_pod(namespace, label_selector=f"job-name={job}")
    return list(found.items)


def waves_body(name: str, completions: int, run_seconds: int) -> dict[str, Any]:
    """A Job of `completions` small pods, 10 at a time, each running `run_seconds`."""
    return job_body(
        name,
        parallelism=10,
        completions=completions,
        cpu="100m",
        annotations={"sim.kbatchd.dev/run-seconds": str(run_seconds)},
    )


async def completed(batch: client.BatchV1Api, job: str, namespace: str) -> Any:
    """The Job's status once it is Complete, else None."""
    status = (await batch.read_namespaced_job(job, namespace)).status
    conditions = status.conditions or []
    return status if any(c.type == "Complete" and c.status == "True" for c in conditions) else None


async def replacement_order(
    api: client.ApiClient, job: str, policy: str, namespace: str = "default"
) -> list[tuple[str, str, bool, str]]:
    """Delete the Job's running pod and watch until a replacement runs; returns the watch's
    (type, pod uid, terminating, phase) sequence from the deletion on."""
    core = client.CoreV1Api(api)
    batch = client.BatchV1Api(api)
    await batch.create_namespaced_job(
        namespace,
        job_body(job, policy=policy, annotations={"sim.kbatchd.dev/terminating-seconds": "3"}),
    )

    async def running() -> tuple[str, str] | None:
        pods = await pods_of(core, job, namespace)
        for pod in pods:
            if pod.status.phase == "Running":
                return str(pod.metadata.name), str(pod.metadata.uid)
        return None

    name, first = await eventually(running, within=30, what=f"{job}'s pod Running")
    listing = await core.list_namespaced_pod(namespace, label_selector=f"job-name={job}")
    seen: list[tuple[str, str, bool, str]] = []
    await core.delete_namespaced_pod(name, namespace)
    with anyio.fail_after(40):
        async with watch.Watch() as stream:
            async for event in stream.stream(
                core.list_namespaced_pod,
                namespace,
                label_selector=f"job-name={job}",
                resource_version=listing.metadata.resource_version,
            ):
                pod = event["object"]
                uid = pod.metadata.uid
                terminating = pod.metadata.deletion_timestamp is not None
                seen.append((event["type"], uid, terminating, str(pod.status.phase)))
                if uid != first and pod.status.phase == "Running":
                    break
    return seen


async def test_failed_policy_waits_for_the_old_pod_and_terminating_or_failed_does_not(
    tmp_path: Path, backend: str
) -> None:
    # Pods terminate for 3 s as the annotation says, not faster: the eager replacement must come
    # while the old pod still terminates.
    async with (
        on_cluster(backend, tmp_path, time_scale=1) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        orders: dict[str, list[tuple[str, str, bool, str]]] = {}

        async def record(job: str, policy: str) -> None:
            orders[job] = await replacement_order(api, job, policy, cluster.namespace)

        # The two Jobs share nothing: their pods terminate at the same time.
        async with anyio.create_task_group() as tg:
            tg.start_soon(record, "patient", "Failed")
            tg.start_soon(record, "eager", "TerminatingOrFailed")
        waited, eager = orders["patient"], orders["eager"]

    def first_index(seen: list[tuple[str, str, bool, str]], match: Any) -> int:
        return next(i for i, item in enumerate(seen) if match(item))

    # Failed: the replacement only once the old pod is fully terminated (phase Failed, or
    # gone), as upstream; its deletion may come after (its finalizer goes in the meantime).
    old = waited[0][1]
    ended = first_index(waited, lambda e: e[1] == old and (e[0] == "DELETED" or e[3] == "Failed"))
    new = first_index(waited, lambda e: e[0] == "ADDED" and e[1] != old)
    assert ended < new, f"replacement created while the old pod was terminating: {waited}"

    old = eager[0][1]
    new = first_index(eager, lambda e: e[0] == "ADDED" and e[1] != old)
    gone = [i for i, e in enumerate(eager) if e[0] == "DELETED" and e[1] == old]
    assert not gone or new < gone[0], f"replacement waited for the old pod: {eager}"
    assert any(e[1] == old and e[2] for e in eager[:new]), "old pod was not terminating"
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


async def test_a_suspended_job_changes_resources_and_resumes_in_one_update(
    tmp_path: Path, backend: str
) -> None:
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        ns = cluster.namespace
        await batch.create_namespaced_job(
            ns, job_body("later", suspend=True, parallelism=2, completions=2)
        )

        async def suspended() -> bool:
            job = await batch.read_namespaced_job("later", ns)
            conditions = job.status.conditions or []
            return any(c.type == "Suspended" and c.status == "True" for c in conditions)

        await eventually(suspended, what="Suspended=True written by kbatchd")
        assert await pods_of(core, "later", ns) == []
        await batch.patch_namespaced_job(
            "later",
            ns,
            {
                "spec": {
                    "suspend": False,
                    "template": {
                        "spec": {
                            "nodeSelector": {"cloud.provider.com/topology-rack": "b0-r1"},
                            "containers": [
                                {"name": "main", "resources": {"requests": {"cpu": "3"}}}
                            ],
                        }
                    },
                }
            },
        )

        async def two_pods() -> list[Any]:
            pods = await pods_of(core, "later", ns)
            return pods if len(pods) == 2 else []

        pods = await eventually(two_pods, what="the resumed Job's pods")
        for pod in pods:
            assert pod.spec.containers[0].resources.requests["cpu"] == "3"
            assert pod.spec.node_selector == {"cloud.provider.com/topology-rack": "b0-r1"}


async def test_resources_of_a_running_job_are_immutable(tmp_path: Path, backend: str) -> None:
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        batch = client.BatchV1Api(api)
        ns = cluster.namespace
        await batch.create_namespaced_job(ns, job_body("busy"))
        patch = {
            "spec": {
                "template": {
                    "spec": {
                        "containers": [{"name": "main", "resources": {"requests": {"cpu": "2"}}}]
                    }
                }
            }
        }
        with pytest.raises(ApiException) as refused:
            await batch.patch_namespaced_job("busy", ns, patch)
        assert refused.value.status == 422
        assert "spec.template" in refused.value.body


async def test_a_job_with_the_largest_active_deadline_fails_at_once_as_upstreams_does(
    tmp_path: Path, backend: str
) -> None:
    """Any positive int64 is a valid activeDeadlineSeconds. 2^63-1 seconds overflow the Go
    duration upstream's controller multiplies it into, so that Job is past its deadline at
    its first sync: kbatchd fails it the same way (DeadlineExceeded, no pod), and never with
    a ReconcilerError."""
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)),
        kube_client(cluster.admin) as api,
    ):
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        ns = cluster.namespace
        body = job_body("forever")
        body["spec"]["activeDeadlineSeconds"] = 2**63 - 1
        await batch.create_namespaced_job(ns, body)

        async def failed() -> dict[str, Any] | None:
            status = (await batch.read_namespaced_job("forever", ns)).status
            for condition in status.conditions or ():
                if condition.type == "Failed" and condition.status == "True":
                    return {"reason": condition.reason, "message": condition.message}
            return None

        condition = await eventually(failed, what="the Job Failed")
        assert condition == {
            "reason": "DeadlineExceeded",
            "message": "Job was active longer than specified deadline",
        }
        assert await pods_of(core, "forever", ns) == []
    reasons = [
        e.reason
        for _, e in await logged_events(tmp_path / "kbatchd.db")
        if isinstance(e, Decided) and e.key.endswith("/forever")
    ]
    assert not [r for r in reasons if r.startswith("ReconcilerError")]


async def test_a_killed_daemon_restarts_without_duplicate_or_lost_pods(
    tmp_path: Path, backend: str
) -> None:
    completions = 40
    async with on_cluster(backend, tmp_path) as cluster:
        config = cluster.daemon_config(tmp_path)
        ns = cluster.namespace
        async with kube_client(cluster.admin) as api:
            core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
            await batch.create_namespaced_job(ns, waves_body("many", completions, 1))
            async with spawn("daemon", "run", "--config", str(config)) as daemon:

                async def some_pods() -> bool:
                    return len(await pods_of(core, "many", ns)) >= 5

                await eventually(some_pods, what="the first pods")
                daemon.send_signal(signal.SIGKILL)
                await daemon.wait()
            async with running_daemon(config):
                status = await eventually(
                    lambda: completed(batch, "many", ns), within=90, what="the Job Complete"
                )
                assert status.succeeded == completions
                assert not status.failed
    events = await logged_events(tmp_path / "kbatchd.db")
    # A create the kill cut off after the server made the pod has no outcome in the log (the
    # restarted daemon marks it unconfirmed and finds the pod in its relist): the log's 201s
    # may be fewer than the pods, never more, and never twice for one name.
    assert len(pods_created(events)) <= completions
    # The cluster never held a pod too many for the Job.
    assert len(pods_ever_held(events, "many")) == completions
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


@pytest.mark.parametrize("backend", real_params())
async def test_a_job_completes_exactly_through_etcd_restarts(tmp_path: Path, backend: str) -> None:
    """etcd SIGKILLed under load and started again on its data, three times, each while the
    daemon has pods to count: kube-apiserver keeps serving what it can, the daemon's writes
    fail or wait until etcd is back, and the watches go on. Every index runs once, no pod is
    created twice, the log holds every pod the cluster held and replays to the same
    decisions."""
    completions = 40
    log = tmp_path / "kbatchd.db"
    async with (
        on_cluster(backend, tmp_path, fresh=True) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)) as daemon,
        kube_client(cluster.admin) as api,
    ):
        plane = cluster.plane
        assert plane is not None
        ns = cluster.namespace
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        body = waves_body("steady", completions, 2)
        body["spec"]["completionMode"] = "Indexed"
        await batch.create_namespaced_job(ns, body)
        # Each outage at a later stage of the Job: with its first pods, then with 10 and with
        # 20 indexes done.
        for done in (0, 10, 20):

            async def running(done: int = done) -> bool:
                succeeded = (await batch.read_namespaced_job("steady", ns)).status.succeeded
                pods = await pods_of(core, "steady", ns)
                return (succeeded or 0) >= done and any(p.status.phase == "Running" for p in pods)

            async def to_count() -> bool:
                pods = await pods_of(core, "steady", ns)
                return any(
                    p.status.phase == "Succeeded" and FINALIZER in (p.metadata.finalizers or ())
                    for p in pods
                )

            async def decided_after(seq: int) -> bool:
                return any(
                    isinstance(e, Decided) and e.intents and logged > seq
                    for logged, e in await logged_events(log)
                )

            await eventually(running, within=60, what=f"{done} indexes done, a pod running")
            # Frozen while a pod finishes, so that its accounting is decided with etcd down.
            frozen = await frozen_settled(daemon, log)
            try:
                await eventually(to_count, within=30, what="a pod finished, not yet counted")
                await anyio.to_thread.run_sync(plane.stop_etcd)
            finally:
                daemon.send_signal(signal.SIGCONT)
            await eventually(partial(decided_after, frozen), what="a write decided, etcd down")
            await anyio.to_thread.run_sync(plane.start_etcd)

        status = await eventually(
            lambda: completed(batch, "steady", ns), within=120, what="the Job Complete"
        )
        assert (status.succeeded, status.failed) == (completions, None)
        assert status.completed_indexes == f"0-{completions - 1}"
        daemon.send_signal(signal.SIGTERM)
        assert await daemon.wait(within=30) == 0
    events = await logged_events(log)
    assert len(pods_created(events)) <= completions
    assert len(pods_ever_held(events, "steady")) == completions
    assert await assert_reproduced(log) > 0


async def frozen_settled(daemon: Child, log: Path) -> int:
    """SIGSTOP the daemon at a moment when every write it decided has been seen or has failed
    (its fold expects nothing); returns the log's last seq then. A key whose writes are still
    in flight is not decided again until they land: frozen then, with etcd killed meanwhile,
    it would decide nothing until etcd came back."""

    async def settled() -> int | None:
        daemon.send_signal(signal.SIGSTOP)
        events = await logged_events(log)
        if not fold_all(State(), events).expected:
            return events[-1][0]
        daemon.send_signal(signal.SIGCONT)
        return None

    seq: int = await eventually(settled, within=60, what="the daemon with no write in flight")
    return seq


def status_writes(events: list[tuple[int, Event]], job: str) -> list[tuple[int, dict[str, Any]]]:
    """(when decided, status fields) of each status write of Job `job` in the log."""
    return [
        (e.at, intent.patch["status"])
        for _, e in events
        if isinstance(e, Decided)
        for intent in e.intents
        if isinstance(intent, Patch)
        and intent.kind == "Job"
        and intent.name == job
        and intent.subresource == "status"
        and isinstance(intent.patch, dict)
    ]


async def test_a_jobs_pod_changes_are_batched_a_second_at_a_time(
    tmp_path: Path, backend: str
) -> None:
    """Upstream's sync batch period: pod changes prompt a decision of their Job at most once
    a second, and its counters are written at most once a second while its pods run."""
    completions = 30
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)) as daemon,
        kube_client(cluster.admin) as api,
    ):
        batch = client.BatchV1Api(api)
        ns = cluster.namespace
        await batch.create_namespaced_job(ns, waves_body("waves", completions, 2))
        status = await eventually(
            lambda: completed(batch, "waves", ns), within=90, what="the Job Complete"
        )
        metrics = await scraped(daemon)
        # `active` 0 is stored absent (omitempty), `ready` 0 kept (a pointer).
        assert (status.succeeded, status.active, status.ready) == (completions, None, 0)
    writes = status_writes(await logged_events(tmp_path / "kbatchd.db"), "waves")
    # Every write inside the window of the one before it is one that may not wait: it
    # changes more than the counters, or leaves no pod active (the status the writes build
    # up is the Job's, which only kbatchd writes).
    written: dict[str, Any] = {}
    previous: int | None = None
    for at, patch in writes:
        written |= patch
        counters_only = BATCHED_FIELDS.issuperset(patch)
        if previous is not None and at - previous < 1000 and counters_only:
            assert written.get("active") == 0, f"a write {at - previous} ms after the last"
        previous = at
    # 30 pods that are created, start, turn ready and finish, in three waves: once a pod
    # without the window (Complete is the last of them).
    assert len(writes) < completions, writes
    # Pod changes inside a window did wait (`tests/daemon/runtime/test_batches.py` holds the
    # rule itself); with the window at 0 none do.
    assert metrics['kbatchd_keys_held_total{kind="Job"}'] > 0
    assert metrics['kbatchd_keys_decided_total{kind="Job"}'] > 0
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


async def test_a_failed_pods_replacement_comes_when_its_back_off_ends_not_at_a_tick(
    tmp_path: Path, backend: str
) -> None:
    """Timers fall due on the log's clock, which only events move: in a quiet spell the clock
    ticks when the earliest timer is due, not only every `tick_seconds` (10 s here)."""
    body = job_body(
        "retrying",
        annotations={"sim.kbatchd.dev/run-seconds": "1", "sim.kbatchd.dev/exit-code": "1"},
    )
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path, tick_seconds=10)),
        kube_client(cluster.admin) as api,
    ):
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        await batch.create_namespaced_job(cluster.namespace, body)

        async def replaced() -> bool:
            return len(await pods_of(core, "retrying", cluster.namespace)) >= 2

        await eventually(replaced, within=60, what="a second pod")
    events = await logged_events(tmp_path / "kbatchd.db")
    failed = min(
        e.at
        for _, e in events
        if isinstance(e, Observed) and e.kind == "Pod" and e.obj.phase == "Failed"
    )
    replaced_at = min(
        e.at
        for _, e in events
        if isinstance(e, Decided)
        and e.at > failed
        and any(isinstance(i, Create) and i.kind == "Pod" for i in e.intents)
    )
    # The back-off is 1 s from the pod's finish (seconds, as upstream stores it).
    assert replaced_at - failed < 3000, f"replaced {replaced_at - failed} ms after the failure"
    assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


@pytest.mark.parametrize("while_down", [False, True], ids=["running", "while-down"])
async def test_pods_orphaned_by_their_jobs_deletion_lose_the_tracking_finalizer(
    tmp_path: Path, backend: str, while_down: bool
) -> None:
    """Upstream's TestOrphanPodsFinalizersClearedWithGC: after a Job is deleted with
    propagationPolicy Orphan its pods, their owner references cleared by the garbage
    collector, keep running without kbatchd's finalizer, so deleting one later removes it.
    Also when the Job went while kbatchd was down."""
    async with (
        on_cluster(backend, tmp_path) as cluster,
        kube_client(cluster.admin) as api,
    ):
        core, batch = client.CoreV1Api(api), client.BatchV1Api(api)
        ns = cluster.namespace
        config = cluster.daemon_config(tmp_path)
        await batch.create_namespaced_job(ns, job_body("orphaning", parallelism=2, completions=2))

        async def tracked() -> list[str] | None:
            pods = await pods_of(core, "orphaning", ns)
            names = [
                p.metadata.name
                for p in pods
                if p.status.phase == "Running" and FINALIZER in (p.metadata.finalizers or ())
            ]
            return names if len(names) == 2 else None

        async def released() -> bool:
            pods = await pods_of(core, "orphaning", ns)
            return len(pods) == 2 and all(
                not p.metadata.owner_references and FINALIZER not in (p.metadata.finalizers or ())
                for p in pods
            )

        async with running_daemon(config) as daemon:
            names = await eventually(tracked, within=60, what="two tracked pods Running")
            if while_down:
                daemon.send_signal(signal.SIGTERM)
                assert await daemon.wait(within=15) == 0
            await batch.delete_namespaced_job("orphaning", ns, body={"propagationPolicy": "Orphan"})
            if not while_down:
                await eventually(released, within=60, what="both orphans released")
        if while_down:

            async def orphaned() -> bool:
                pods = await pods_of(core, "orphaning", ns)
                return len(pods) == 2 and not any(p.metadata.owner_references for p in pods)

            await eventually(orphaned, within=60, what="the garbage collector orphaned them")
            async with running_daemon(config):
                await eventually(released, within=60, what="both orphans released at start")
        await core.delete_namespaced_pod(names[0], ns, grace_period_seconds=0)

        async def gone() -> bool:
            return names[0] not in {p.metadata.name for p in await pods_of(core, "orphaning", ns)}

        await eventually(gone, within=60, what="the deleted orphan gone")
