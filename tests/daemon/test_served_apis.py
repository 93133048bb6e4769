"""The daemon acts on what each cluster serves: discovery picks the newest version of each kind,
a kind not served idles its controllers with one warning (and the daemon is still ready), and
an API that appears later is watched without a restart."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from kubernetes_asyncio import client

from daemon.kube.resources import CANDIDATES
from daemon.runtime.supervisor import Daemon
from daemon.service import run
from daemon.service.config import Cluster as ClusterSettings
from daemon.service.config import Settings
from tests.backends import REAL, on_cluster, real_params
from tests.daemon.test_jobs import job_body
from tests.daemon.test_jobsets import GROUP, PLURAL, RUN, VERSION, jobset, replicated
from tests.processes import Child, eventually, kube_client, running_daemon
from tests.realcluster.controlplane import Profile

pytestmark = pytest.mark.anyio

NOTHING_OPTIONAL = Profile(scheduling=False, jobset_crds=False)


async def ready(daemon: Child) -> dict[str, Any]:
    line = await daemon.wait_for(lambda text: '"health serving"' in text)
    url = json.loads(line)["url"]
    async with aiohttp.ClientSession() as session:

        async def answer() -> dict[str, Any] | None:
            async with session.get(f"{url}/readyz") as response:
                body: dict[str, Any] = await response.json()
                return body if response.status == 200 else None

        result: dict[str, Any] = await eventually(answer, what="/readyz 200")
        return result


async def complete(batch: client.BatchV1Api, name: str, namespace: str) -> bool:
    job = await batch.read_namespaced_job(name, namespace)
    conditions = job.status.conditions or []
    return any(c.type == "Complete" and c.status == "True" for c in conditions)


async def test_the_newest_served_version_of_each_kind_is_watched(
    tmp_path: Path, backend: str
) -> None:
    async with (
        on_cluster(backend, tmp_path) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)) as daemon,
    ):
        line = await daemon.wait_for(lambda text: '"cluster API"' in text)
        kinds = json.loads(line)["kinds"]
        version = f"scheduling.k8s.io/{cluster.scheduling_version}"
        assert kinds["PodGroup"] == kinds["Workload"] == version
        assert kinds["JobSet"] == "jobset.x-k8s.io/v1alpha2"
        assert kinds["PriorityClass"] == "scheduling.k8s.io/v1"
        assert not daemon.lines("watch failed")


@pytest.mark.parametrize("backend", real_params())
async def test_a_managed_job_runs_where_neither_jobsets_nor_workloads_are_served(
    tmp_path: Path, backend: str
) -> None:
    assert backend in REAL
    async with (
        on_cluster(backend, tmp_path, profile=NOTHING_OPTIONAL) as cluster,
        running_daemon(cluster.daemon_config(tmp_path)) as daemon,
        kube_client(cluster.admin) as api,
    ):
        assert (await ready(daemon))["ready"] is True
        batch = client.BatchV1Api(api)
        body = job_body("plain", parallelism=2, completions=2)
        body["spec"]["template"]["metadata"]["annotations"] = {"sim.kbatchd.dev/run-seconds": "1"}
        await batch.create_namespaced_job(cluster.namespace, body)
        await eventually(
            lambda: complete(batch, "plain", cluster.namespace), what="the Job Complete"
        )
        warnings = {line["event"]: line for line in daemon.logs() if line.get("level") == "warning"}
        jobset = next(w for e, w in warnings.items() if e.startswith("JobSet is not served"))
        assert "install the JobSet CRDs" in jobset["event"]
        assert jobset["idle_controllers"] == ["jobset"]
        for kind in ("Workload", "PodGroup"):
            missing = next(w for e, w in warnings.items() if e.startswith(f"{kind} is not served"))
            assert "GenericWorkload" in missing["event"]
            assert missing["idle_controllers"] == ["gang"]
        assert not daemon.lines("watch failed"), "a kind not served was watched"


@pytest.mark.parametrize("backend", real_params())
async def test_crds_installed_later_are_watched_without_a_restart(
    tmp_path: Path, backend: str
) -> None:
    profile = Profile(scheduling=True, jobset_crds=False)
    async with (
        on_cluster(backend, tmp_path, profile=profile, fresh=True) as cluster,
        running_daemon(cluster.daemon_config(tmp_path, discovery_seconds=1.0)) as daemon,
    ):
        assert cluster.plane is not None
        await daemon.wait_for(lambda text: "JobSet is not served" in text)
        assert cluster.plane.install_jobset_crds()
        line = await daemon.wait_for(lambda text: '"now served"' in text)
        assert json.loads(line)["kind"] == "JobSet"
        async with kube_client(cluster.admin) as api:
            body = jobset("late", [replicated("workers", pods=1, annotations={RUN: "1"})])
            custom = client.CustomObjectsApi(api)
            await custom.create_namespaced_custom_object(
                GROUP, VERSION, cluster.namespace, PLURAL, body
            )

            async def done() -> bool:
                found = await custom.get_namespaced_custom_object(
                    GROUP, VERSION, cluster.namespace, PLURAL, "late"
                )
                conditions = found.get("status", {}).get("conditions", [])
                return any(c["type"] == "Completed" and c["status"] == "True" for c in conditions)

            await eventually(done, within=60, what="the JobSet created later Completed")


class _Silent:
    """A cluster that never answers: an informer started on it waits for ever."""

    cluster = "c"

    async def request(self, *_: Any, **__: Any) -> Any:
        await anyio.sleep_forever()


@pytest.mark.parametrize("known", [False, True])
async def test_a_watched_kind_missing_from_one_discovery_read_keeps_its_informer(
    known: bool,
) -> None:
    """An API server that is starting serves custom resources last: one discovery read
    without them must not end their watch (nor, with objects in the state, delete them)."""
    daemon = run.build(Settings(clusters=[ClusterSettings(name="c")]), [])
    informers: dict[str, Any] = {}
    jobset = CANDIDATES["JobSet"][0]
    with anyio.fail_after(5):
        await _follow_twice(daemon, informers, jobset, known)


async def _follow_twice(
    daemon: Daemon, informers: dict[str, Any], jobset: Any, known: bool
) -> None:
    async with anyio.create_task_group() as tg:
        await daemon.sources._follow(tg, "c", _Silent(), informers, "JobSet", jobset)  # type: ignore[arg-type]
        informer, scope = informers["JobSet"]
        if known:
            informer.known["ns/js"] = object()
        await daemon.sources._follow(tg, "c", _Silent(), informers, "JobSet", None)  # type: ignore[arg-type]
        assert informers["JobSet"] == (informer, scope)
        assert not scope.cancel_called
        tg.cancel_scope.cancel()
