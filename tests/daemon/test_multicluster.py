"""Several worker clusters end to end: a Job submitted to the manager cluster runs in exactly
one worker; when it fits nowhere, victims are evicted in exactly one worker; two racing
preemptors never evict the same pods; a daemon killed at any step of a preemption finishes
the protocol where it began; a worker lost in the middle of one has it aborted, and another
worker preempts instead.

One manager and three workers of two racks of two 8-GPU hosts (simulated clusters, or real
control planes whose API servers share one etcd under prefixes of their own), every worker
host held by one plain 8-GPU pod of low priority. Worker w2's rack 0 holds the
lowest (priority 1 against 5): the lightest preemption anywhere."""

from __future__ import annotations

import functools
import signal
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client

from daemon.controllers.multicluster.projection import CLAIM, PLACED
from daemon.sim.cluster import SimCluster
from daemon.sim.topology import RACK_LABEL
from events.intents import Create, Delete
from events.schema import Decided
from tests.backends import REAL, SIM, SIM_TIME_SCALE, backend_params, require_go
from tests.daemon.test_gang import gpus_of
from tests.daemon.test_gang_jobs import GROUP, gang_job
from tests.daemon.test_gang_preemption import pod as gang_pod
from tests.daemon.test_jobsets import GROUP as JOBSETS
from tests.daemon.test_jobsets import VERSION as JOBSET_VERSION
from tests.daemon.test_jobsets import jobset, replicated
from tests.processes import (
    assert_reproduced,
    daemon_config,
    eventually,
    kube_client,
    logged_events,
    running_daemon,
    spawn,
)
from tests.realcluster.controlplane import KUBERNETES, ControlPlane, Profile

pytestmark = pytest.mark.anyio

MANAGER, WORKERS = "m", ("w1", "w2", "w3")
# The simulated clusters, and the newest real release: four control planes a test.
BACKENDS = backend_params(real=tuple(b for b in REAL if b == f"k8s-{KUBERNETES[-1]}"))
PROFILE = Profile(scheduling=True, jobset_crds=True)
TOPOLOGY = "blocks=1,racks=2,hosts=2,gpus=8"
HOSTS = ("b0-r0-h0", "b0-r0-h1", "b0-r1-h0", "b0-r1-h1")
CLASSES = {"lowest": 1, "low": 5, "high": 1000, "urgent": 2000, "polite": 1000}
NEVER_PREEMPTS = {"polite"}
NS = "default"
CHEAP = {("w2", "fill-b0-r0-h0"), ("w2", "fill-b0-r0-h1")}


@dataclass(frozen=True)
class Side:
    """One cluster as the test reaches it (`admin`) and as kbatchd does (`kbatchd`); `stop`
    takes it down for good (its API server no longer answers)."""

    admin: Path
    kbatchd: Path
    stop: Callable[[], Awaitable[None]]
    sim: SimCluster | None = None


@asynccontextmanager
async def clusters(
    tmp: Path, backend: str = SIM, *, cheap: bool = True
) -> AsyncIterator[dict[str, Side]]:
    """The four clusters serving, filled (without `cheap`, every fill pod of priority low):
    simulated clusters, or real control planes whose API servers share one etcd."""
    async with AsyncExitStack() as stack:
        found: dict[str, Side] = {}
        if backend == SIM:
            for name in (MANAGER, *WORKERS):
                own = await stack.enter_async_context(AsyncExitStack())
                sim = await own.enter_async_context(
                    SimCluster.start(
                        topology=TOPOLOGY,
                        name=name,
                        kubeconfig_path=tmp / f"{name}.kubeconfig",
                        time_scale=SIM_TIME_SCALE,
                    )
                )
                assert sim.kubeconfig_path is not None
                found[name] = Side(sim.kubeconfig_path, sim.kubeconfig_path, own.aclose, sim)
        else:
            planes = await _planes(tmp, backend.removeprefix("k8s-"))
            for plane in planes.values():  # the manager, whose etcd the others use, last
                stack.callback(plane.stop)
            found = {
                n: Side(
                    p.admin_kubeconfig,
                    p.kbatchd_kubeconfig,
                    functools.partial(anyio.to_thread.run_sync, p.stop),
                )
                for n, p in planes.items()
            }
        for name, side in found.items():
            await _fill(side.admin, name, cheap)
        yield found


async def _planes(tmp: Path, version: str) -> dict[str, ControlPlane]:
    """A control plane per cluster, the workers' API servers on the manager's etcd."""
    require_go()

    def start() -> dict[str, ControlPlane]:
        started: dict[str, ControlPlane] = {}
        try:
            manager = started[MANAGER] = ControlPlane.start(
                version, tmp / MANAGER, topology=TOPOLOGY, profile=PROFILE
            )
            for name in WORKERS:
                started[name] = ControlPlane.start(
                    version, tmp / name, topology=TOPOLOGY, profile=PROFILE, beside=manager
                )
        except BaseException:
            for plane in reversed(started.values()):
                plane.stop()
            raise
        return started

    return await anyio.to_thread.run_sync(start)


async def _fill(kubeconfig: Path, cluster: str, cheap_rack: bool) -> None:
    async with kube_client(kubeconfig) as api:
        scheduling, core = client.SchedulingV1Api(api), client.CoreV1Api(api)
        for name, value in CLASSES.items():
            body: Any = {"metadata": {"name": name}, "value": value}
            if name in NEVER_PREEMPTS:
                body["preemptionPolicy"] = "Never"
            await scheduling.create_priority_class(body)
        if cluster == MANAGER:
            return
        for host in HOSTS:
            cheap = cheap_rack and cluster == "w2" and host.startswith("b0-r0")
            pod: Any = gang_pod(f"fill-{host}", 8, "lowest" if cheap else "low", host=host)
            await core.create_namespaced_pod(NS, pod)

        async def bound() -> bool:
            pods = (await core.list_namespaced_pod(NS)).items
            return len(pods) == len(HOSTS) and all(p.spec.node_name for p in pods)

        await eventually(bound, within=120, what=f"{cluster} full")


def config(tmp: Path, sides: dict[str, Side], *, dispatch: str = "", **daemon: Any) -> Path:
    more = [
        line
        for name in WORKERS
        for line in ("[[clusters]]", f'name = "{name}"', f'kubeconfig = "{sides[name].kbatchd}"')
    ]
    section = [
        "[reconcilers.multicluster]",
        "enabled = true",
        f'manager = "{MANAGER}"',
        "retry_seconds = 0.5",
        dispatch,
    ]
    return daemon_config(
        tmp, sides[MANAGER].kbatchd, cluster=MANAGER, extra="\n".join([*more, *section]), **daemon
    )


def job(name: str, priority_class: str) -> dict[str, Any]:
    """Two 8-GPU pods that must share a rack, running for a long while."""
    template = {
        "metadata": {
            "annotations": {
                "kueue.x-k8s.io/podset-required-topology": RACK_LABEL,
                "sim.kbatchd.dev/run-seconds": "3600",
            }
        },
        "spec": {
            "priorityClassName": priority_class,
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "x", "resources": gpus_of(8)}],
        },
    }
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"kbatchd.dev/multicluster": "true"}},
        "spec": {
            "managedBy": "kbatchd.dev/job-controller",
            "parallelism": 2,
            "completions": 2,
            "template": template,
        },
    }


async def submit(kubeconfig: Path, *bodies: dict[str, Any]) -> None:
    async with kube_client(kubeconfig) as api:
        for body in bodies:
            sent: Any = body
            await client.BatchV1Api(api).create_namespaced_job(NS, sent)


async def _placed(api: client.ApiClient, kind: str, name: str) -> str | None:
    """The worker the manager's workload names (``kbatchd.dev/cluster``)."""
    if kind == "Job":
        found = await client.BatchV1Api(api).read_namespaced_job(name, NS)
        notes = found.metadata.annotations or {}
    else:
        obj = await client.CustomObjectsApi(api).get_namespaced_custom_object(
            JOBSETS, JOBSET_VERSION, NS, "jobsets", name
        )
        notes = obj["metadata"].get("annotations") or {}
    worker = notes.get("kbatchd.dev/cluster")
    return str(worker) if worker else None


async def _names(api: client.ApiClient, kind: str) -> set[str]:
    if kind == "Job":
        return {
            j.metadata.name for j in (await client.BatchV1Api(api).list_namespaced_job(NS)).items
        }
    listed = await client.CustomObjectsApi(api).list_namespaced_custom_object(
        JOBSETS, JOBSET_VERSION, NS, "jobsets"
    )
    return {o["metadata"]["name"] for o in listed["items"]}


async def running_in(
    sides: dict[str, Side],
    name: str,
    workers: Sequence[str] = WORKERS,
    *,
    count: int = 2,
    kind: str = "Job",
) -> str:
    """The worker the manager's workload `name` (a Job or a JobSet) runs in, once its `count`
    pods are Running there inside one rack and no other of the `workers` holds a copy."""

    async def where() -> str | None:
        async with kube_client(sides[MANAGER].admin) as api:
            worker = await _placed(api, kind, name)
        if not worker:
            return None
        for other in workers:
            async with kube_client(sides[other].admin) as api:
                names = await _names(api, kind)
                pods = (await client.CoreV1Api(api).list_namespaced_pod(NS)).items
                nodes = {
                    n.metadata.name: n for n in (await client.CoreV1Api(api).list_node()).items
                }
            if other != worker:
                if name in names:
                    return None
                continue
            mine = [p for p in pods if p.metadata.name.startswith(f"{name}-")]
            if len(mine) != count or any(p.status.phase != "Running" for p in mine):
                return None
            racks = {nodes[p.spec.node_name].metadata.labels[RACK_LABEL] for p in mine}
            assert len(racks) == 1, f"{name} split over {racks}"
        return worker

    found: str = await eventually(where, within=120, what=f"{name} running in one worker")
    return found


async def fills_left(
    sides: dict[str, Side], workers: Sequence[str] = WORKERS
) -> set[tuple[str, str]]:
    left = set()
    for worker in workers:
        async with kube_client(sides[worker].admin) as api:
            for pod in (await client.CoreV1Api(api).list_namespaced_pod(NS)).items:
                if pod.metadata.name.startswith("fill-") and not pod.metadata.deletion_timestamp:
                    left.add((worker, pod.metadata.name))
    return left


ALL_FILLS = {(w, f"fill-{h}") for w in WORKERS for h in HOSTS}


async def decisions(log: Path) -> list[Decided]:
    return [
        e
        for _, e in await logged_events(log)
        if isinstance(e, Decided) and e.reconciler == "multicluster"
    ]


def pod_deletes(found: list[Decided]) -> list[tuple[str, str]]:
    return [
        (i.cluster, i.name)
        for d in found
        for i in d.intents
        if isinstance(i, Delete) and i.kind == "Pod"
    ]


def first_step(found: list[Decided], name: str, reason: str) -> int:
    """Where in the log the first decision about `name` whose reason holds `reason` is."""
    key = f"Job/{MANAGER}/{NS}/{name}"
    at = [i for i, d in enumerate(found) if d.key == key and reason in d.reason]
    return at[0] if at else len(found)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_workload_that_fits_nowhere_evicts_in_exactly_one_worker(
    tmp_path: Path, backend: str
) -> None:
    async with clusters(tmp_path, backend) as sides:
        path = config(tmp_path, sides)
        async with running_daemon(path):
            await submit(sides[MANAGER].admin, job("big", "high"))
            assert await running_in(sides, "big") == "w2"
            assert await fills_left(sides) == ALL_FILLS - CHEAP
        found = await decisions(tmp_path / "kbatchd.db")
        reasons = [d.reason.split(":")[0] for d in found if d.key == f"Job/{MANAGER}/{NS}/big"]
        assert reasons.count("Reserved") == 1
        assert reasons.count("Committed") == 1
        assert sorted(pod_deletes(found)) == sorted(CHEAP), "each victim deleted once, in w2 only"
        assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_two_racing_preemptors_never_evict_the_same_pods(
    tmp_path: Path, backend: str
) -> None:
    async with clusters(tmp_path, backend) as sides:
        path = config(tmp_path, sides)
        async with running_daemon(path):
            await submit(sides[MANAGER].admin, job("first", "high"), job("second", "urgent"))
            urgent = await running_in(sides, "second")
            other = await running_in(sides, "first")
        found = await decisions(tmp_path / "kbatchd.db")
        # Which one reaches w2 is a race: the better rank takes over the lightest room unless
        # the other was seen first and already marks victims there when it is placed.
        story = [(d.key.rsplit("/", 1)[1], d.reason[:50]) for d in found]
        if first_step(found, "first", "Evicting: marks") < first_step(found, "second", "Reserved"):
            assert other == "w2", ("an evicting claim stands against any rank", story)
        else:
            assert urgent == "w2", ("the better rank takes the lightest room", story)
        assert other != urgent
        deletes = pod_deletes(found)
        assert len(deletes) == len(set(deletes)) == 4, deletes
        assert set(deletes) >= CHEAP
        assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


KILLS = {
    "after-the-reservation": {"killed_before_write": CLAIM},
    "before-any-delete": {"killed_after_deletes": 0},
    "one-delete-landed": {"killed_after_deletes": 1},
    "before-the-commit": {"killed_before_write": PLACED},
}


@pytest.mark.parametrize("killed", KILLS.values(), ids=KILLS.keys())
@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_daemon_killed_while_preempting_finishes_in_the_same_worker(
    tmp_path: Path, backend: str, killed: dict[str, Any]
) -> None:
    async with clusters(tmp_path, backend) as sides:
        path = config(tmp_path, sides)
        async with spawn("daemon", "run", "--config", str(path), **killed) as dying:
            await submit(sides[MANAGER].admin, job("big", "high"))
            assert await dying.wait(within=60) == -signal.SIGKILL, dying.output()
        async with running_daemon(path):
            assert await running_in(sides, "big") == "w2"
            assert await fills_left(sides) == ALL_FILLS - CHEAP
        found = await decisions(tmp_path / "kbatchd.db")
        reasons = [d.reason.split(":")[0] for d in found]
        assert reasons.count("Reserved") == 1, "resumed, not planned again"
        assert reasons.count("Aborted") == 0
        deletes = pod_deletes(found)
        assert set(deletes) == CHEAP, "no other worker preempted"
        assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_worker_lost_while_preempting_aborts_and_another_worker_preempts(
    tmp_path: Path, backend: str
) -> None:
    async with clusters(tmp_path, backend) as sides:
        # An act that gets no answer gives up after a fraction of a second.
        path = config(tmp_path, sides, cluster_sync_wait_seconds=1, act_retry_seconds=[0.01, 0.05])
        async with spawn("daemon", "run", "--config", str(path), killed_after_marks=0) as dying:
            await submit(sides[MANAGER].admin, job("big", "high"))
            assert await dying.wait(within=60) == -signal.SIGKILL, dying.output()
        await sides["w2"].stop()  # the claim evicts there, and nothing is marked yet
        left = ("w1", "w3")
        async with running_daemon(path):
            assert await running_in(sides, "big", left) == "w1"
            evicted = {("w1", "fill-b0-r0-h0"), ("w1", "fill-b0-r0-h1")}
            assert await fills_left(sides, left) == {f for f in ALL_FILLS if f[0] in left} - evicted
        found = await decisions(tmp_path / "kbatchd.db")
        reasons = [d.reason for d in found]
        aborts = [r for r in reasons if r.startswith("Aborted")]
        assert aborts == [
            "Aborted: the preemption in w2: cluster w2 is unreachable; waits for a worker again"
        ]
        assert [r.split(":")[0] for r in reasons].count("Reserved") == 2
        assert set(pod_deletes(found)) - CHEAP == evicted, (
            "besides the unanswered deletes in w2, w1 alone evicts"
        )
        assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_gang_job_preempts_in_one_worker_and_runs_there_as_its_gang(
    tmp_path: Path, backend: str
) -> None:
    version = "v1alpha2" if backend == SIM else "v1beta1"  # what each serves (1.36's, 1.37's)
    body = gang_job("gang", 16, version)  # 16 one-GPU pods sharing a rack: a whole rack
    body["metadata"]["labels"] = {"kbatchd.dev/multicluster": "true"}
    template = body["spec"]["template"]
    template["spec"]["priorityClassName"] = "high"
    template["metadata"].setdefault("annotations", {})["sim.kbatchd.dev/run-seconds"] = "3600"
    async with clusters(tmp_path, backend) as sides:
        path = config(tmp_path, sides, job={"workload_with_job": True})
        async with running_daemon(path):
            await submit(sides[MANAGER].admin, body)
            assert await running_in(sides, "gang", count=16) == "w2"
            assert await fills_left(sides) == ALL_FILLS - CHEAP

            async def groups() -> dict[str, int] | None:
                """PodGroups by cluster, once the deleted copies' went with them."""
                made = {}
                for name, side in sides.items():
                    async with kube_client(side.admin) as api:
                        found = await client.CustomObjectsApi(api).list_namespaced_custom_object(
                            GROUP, version, NS, "podgroups"
                        )
                    made[name] = len(found["items"])
                return made if sum(made.values()) == 1 else None

            made = await eventually(groups, within=60, what="one PodGroup left")
        assert made == {MANAGER: 0, "w1": 0, "w2": 1, "w3": 0}, "the gang is the worker's alone"
        assert sorted(pod_deletes(await decisions(tmp_path / "kbatchd.db"))) == sorted(CHEAP)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_jobset_preempts_in_one_worker_and_runs_there(tmp_path: Path, backend: str) -> None:
    notes = {
        "kueue.x-k8s.io/podset-required-topology": RACK_LABEL,
        "sim.kbatchd.dev/run-seconds": "3600",
    }
    containers = [{"name": "main", "image": "x", "resources": gpus_of(8)}]
    body = jobset(
        "train",
        [
            replicated(n, 1, 1, annotations=notes, containers=containers)
            for n in ("leader", "workers")
        ],
    )
    body["metadata"]["labels"] = {"kbatchd.dev/multicluster": "true"}
    for rj in body["spec"]["replicatedJobs"]:
        rj["template"]["spec"]["template"]["spec"]["priorityClassName"] = "high"
    async with clusters(tmp_path, backend) as sides:
        path = config(tmp_path, sides)
        async with running_daemon(path), kube_client(sides[MANAGER].admin) as api:
            custom = client.CustomObjectsApi(api)
            await custom.create_namespaced_custom_object(
                JOBSETS, JOBSET_VERSION, NS, "jobsets", body
            )
            assert await running_in(sides, "train", kind="JobSet") == "w2"
            assert await fills_left(sides) == ALL_FILLS - CHEAP
            jobs = await client.BatchV1Api(api).list_namespaced_job(NS)
            assert not jobs.items, "the manager runs none of it"

            async def mirrored() -> dict[str, Any] | None:
                obj = await custom.get_namespaced_custom_object(
                    JOBSETS, JOBSET_VERSION, NS, "jobsets", "train"
                )
                status: dict[str, Any] = obj.get("status") or {}
                ready = {
                    r["name"]: r.get("ready", 0) for r in status.get("replicatedJobsStatus") or ()
                }
                return status if ready == {"leader": 1, "workers": 1} else None

            await eventually(
                mirrored, within=60, what="the worker's status on the manager's JobSet"
            )
        assert sorted(pod_deletes(await decisions(tmp_path / "kbatchd.db"))) == sorted(CHEAP)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_incremental_dispatch_copies_to_one_more_worker_each_round(
    tmp_path: Path, backend: str
) -> None:
    async with clusters(tmp_path, backend) as sides:
        async with kube_client(sides["w3"].admin) as api:
            for host in ("b0-r1-h0", "b0-r1-h1"):  # w3's second rack, free
                await client.CoreV1Api(api).delete_namespaced_pod(
                    f"fill-{host}", NS, grace_period_seconds=0
                )
        rounds = 'dispatcher = "Incremental"\nstep = 1\nround_seconds = 1.0'
        path = config(tmp_path, sides, dispatch=rounds)
        async with running_daemon(path):
            await submit(sides[MANAGER].admin, job("polite", "polite"))  # never preempts
            assert await running_in(sides, "polite") == "w3"
            assert await fills_left(sides) == ALL_FILLS - {
                ("w3", "fill-b0-r1-h0"),
                ("w3", "fill-b0-r1-h1"),
            }
        found = await decisions(tmp_path / "kbatchd.db")
        rounds_made = [
            made
            for d in found
            if (made := [i.cluster for i in d.intents if isinstance(i, Create) and i.kind == "Job"])
        ]
        assert rounds_made == [["w1"], ["w2"], ["w3"]], "one worker more each round, in order"
        assert not pod_deletes(found)
        assert await assert_reproduced(tmp_path / "kbatchd.db") > 0


PROTECTED = "kbatchd.test/protected"
# What a cluster's admission answers a delete of a protected pod (a ValidatingAdmissionPolicy
# on the real plane, the same rule as a fault on the simulated one).
POLICY: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicy",
    "metadata": {"name": "protected-pods"},
    "spec": {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["v1"],
                    "operations": ["DELETE"],
                    "resources": ["pods"],
                }
            ]
        },
        "validations": [
            {
                "expression": f"!has(oldObject.metadata.labels) || "
                f"!('{PROTECTED}' in oldObject.metadata.labels)",
                "message": "protected pods are not deleted",
            }
        ],
    },
}
BINDING: dict[str, Any] = {
    "apiVersion": "admissionregistration.k8s.io/v1",
    "kind": "ValidatingAdmissionPolicyBinding",
    "metadata": {"name": "protected-pods"},
    "spec": {"policyName": "protected-pods", "validationActions": ["Deny"]},
}


async def protect(side: Side, names: Sequence[str]) -> None:
    """Pods `names` of the cluster can no longer be deleted: they are labelled, and its
    admission refuses to delete what carries the label."""
    async with kube_client(side.admin) as api:
        core = client.CoreV1Api(api)
        for name in names:
            body: Any = {"metadata": {"labels": {PROTECTED: "true"}}}
            await core.patch_namespaced_pod(name, NS, body)
        if side.sim is not None:
            side.sim.faults.refuse_delete = PROTECTED
            return
        custom = client.CustomObjectsApi(api)
        group, version = "admissionregistration.k8s.io", "v1"
        await custom.create_cluster_custom_object(
            group, version, "validatingadmissionpolicies", POLICY
        )
        await custom.create_cluster_custom_object(
            group, version, "validatingadmissionpolicybindings", BINDING
        )
        probe: Any = {
            "metadata": {"name": "probe", "labels": {PROTECTED: "true"}},
            "spec": {"containers": [{"name": "c", "image": "x"}], "nodeName": "nowhere"},
        }
        await core.create_namespaced_pod(NS, probe)

        async def refused() -> bool:
            try:
                await core.delete_namespaced_pod("probe", NS, dry_run="All")
            except client.ApiException as exc:
                return exc.status != 404
            return False

        await eventually(refused, within=60, what="the policy in force")


@pytest.mark.parametrize("backend", BACKENDS)
async def test_victims_a_worker_refuses_to_evict_abort_the_claim_and_another_worker_preempts(
    tmp_path: Path, backend: str
) -> None:
    async with clusters(tmp_path, backend) as sides:
        await protect(sides["w2"], sorted(name for _, name in CHEAP))
        async with running_daemon(config(tmp_path, sides)):
            await submit(sides[MANAGER].admin, job("big", "high"))
            assert await running_in(sides, "big") == "w1"
            evicted = {("w1", "fill-b0-r0-h0"), ("w1", "fill-b0-r0-h1")}
            assert await fills_left(sides) == ALL_FILLS - evicted
        found = await decisions(tmp_path / "kbatchd.db")
        aborts = [d.reason for d in found if d.reason.startswith("Aborted")]
        assert len(aborts) == 1, aborts
        assert "cannot be evicted" in aborts[0], aborts
        assert set(pod_deletes(found)) - CHEAP == evicted, "w2's victims refused, w1's taken"
        assert await assert_reproduced(tmp_path / "kbatchd.db") > 0
