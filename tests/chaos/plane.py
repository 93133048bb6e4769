"""A chaos run's cluster on the real control plane: kube-apiserver, etcd, kube-controller-manager,
kube-scheduler and kwok (`tests.realcluster`), one of the run's own.

The oracle is etcd's own record of every change (`ControlPlane.changes`): each write is a
revision there, and a revision is the resourceVersion the API server hands out, so the daemon's
log is checked against it as against the simulated cluster's. kube-apiserver's audit log is no
such record: it holds requests, not the versions they made (a bind answers with a Status).

The load goes in through the API server with the admin credentials, before the fault
strikes. With `faults`, the daemon reaches the API server through a proxy that strikes them
(`proxy`): drops and stalls of its watches, 409s, 429s and 500s, cut requests, latency."""

from __future__ import annotations

import copy
import http.client
import json
import ssl
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final

import anyio

from daemon.sim.agent import EXIT_CODE
from daemon.sim.faults import Faults
from daemon.sim.registry import MERGE_PATCH
from daemon.sim.resources import PODS, Resource
from tests.chaos.invariants import Change
from tests.chaos.load import INDEX, JOB_NAME, NAMESPACE, TOPOLOGY, Load
from tests.chaos.proxy import fault_proxy
from tests.realcluster.controlplane import (
    ControlPlane,
    ControlPlaneError,
    collection_path,
    kubeconfig,
)

# 1.36 serves scheduling.k8s.io/v1alpha2, the version of the load's PodGroups (as the
# simulated cluster does).
VERSION: Final = "1.36.3"
# The cluster's name in the daemon's settings and log.
NAME: Final = "real"
# How often the pods are looked at for the ones to make fail (they run 1 s at the least).
POLL_SECONDS: Final = 0.2


def _path(resource: Resource, namespace: str, name: str = "") -> str:
    meta = {"apiVersion": resource.api_version, "kind": resource.kind}
    collection = collection_path({**meta, "metadata": {"namespace": namespace}})
    return f"{collection}/{name}" if name else collection


def _real_seconds(objects: list[tuple[Resource, dict[str, Any]]], scale: float) -> None:
    """The load's run times are simulated seconds; kwok runs pods at real time."""
    for _, body in objects:
        for metadata in _metadatas(body):
            runs = (metadata.get("annotations") or {}).get("sim.kbatchd.dev/run-seconds")
            if runs is not None:
                seconds = max(1, round(float(runs) / scale))
                metadata["annotations"]["sim.kbatchd.dev/run-seconds"] = str(seconds)


def _metadatas(body: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every metadata in an object: its own and its pod templates' (however deep)."""
    for key, value in body.items():
        if key == "metadata" and isinstance(value, dict):
            yield value
        elif isinstance(value, dict):
            yield from _metadatas(value)
        elif isinstance(value, list):
            for item in value:
                if isinstance(item, dict):
                    yield from _metadatas(item)


class PlaneCluster:
    """The run's control plane, and what the run needs of it: the load submitted, the chosen
    pods made to fail (`failed`, as `load.FailOnce` records it), what is unfinished, and
    etcd's record from the run's start. The daemon connects with `kubeconfig`: the plane's,
    or one naming the fault proxy in front of it, which strikes `faults`."""

    def __init__(
        self,
        plane: ControlPlane,
        load: Load,
        time_scale: float,
        kubeconfig: Path,
        faults: Faults | None = None,
    ) -> None:
        self.plane = plane
        self.load = load
        self.faults = faults
        self._kubeconfig = kubeconfig
        self.begin = plane.revision()
        self.failed: dict[str, list[int]] = {}
        self._time_scale = time_scale
        self._seen: set[str] = set()
        self._indexes_seen: dict[str, set[int]] = {}
        self._created: dict[str, int] = {}
        # uid -> (job, index or creation place) of each pod made to fail
        self._made_to_fail: dict[str, tuple[str, int]] = {}

    @property
    def kubeconfigs(self) -> dict[str, Path]:
        return {NAME: self._kubeconfig}

    async def _request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        """One admin request; a connection the fault cut or refused is status 0."""

        def request() -> tuple[int, Any]:
            return self.plane.request(method, path, body, content_type=content_type)

        try:
            return await anyio.to_thread.run_sync(request)
        except (OSError, http.client.HTTPException) as exc:  # refused, or cut mid-answer
            return 0, str(exc)

    async def submit(self) -> None:
        """Create the load (before any fault strikes)."""
        objects = copy.deepcopy(self.load.objects)
        _real_seconds(objects, self._time_scale)
        for resource, body in objects:
            body["metadata"]["namespace"] = NAMESPACE
            status, answer = await self._request("POST", _path(resource, NAMESPACE), body)
            if status != 201:
                raise ControlPlaneError(f"creating {body['metadata']['name']}: {answer}")

    async def get(self, resource: Resource, name: str) -> dict[str, Any] | None:
        status, body = await self._request("GET", _path(resource, NAMESPACE, name))
        return body if status == 200 else None

    async def fail_chosen(self) -> None:
        """Make the chosen pods of `load.fail_once` exit 1, as they appear (until cancelled).

        A pod is patched only at the version looked at (a 409 otherwise), and only while it
        has not finished: what `failed` records is what was made to fail."""
        while True:
            status, body = await self._request("GET", _path(PODS, NAMESPACE))
            for pod in body["items"] if status == 200 else ():
                await self._fail_if_chosen(pod)
            await anyio.sleep(POLL_SECONDS)

    async def _fail_if_chosen(self, pod: dict[str, Any]) -> None:
        metadata = pod["metadata"]
        job = (metadata.get("labels") or {}).get(JOB_NAME)
        chosen = self.load.fail_once.get(job or "")
        if job is None or chosen is None or metadata["uid"] in self._seen:
            return
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            self._seen.add(metadata["uid"])
            return
        index_text = (metadata.get("annotations") or {}).get(INDEX)
        if index_text is not None:
            index = int(index_text)
            fails = index in chosen and index not in self._indexes_seen.get(job, set())
        else:
            index = self._created.get(job, 0)
            fails = index in chosen
        if fails:
            patch = {
                "metadata": {
                    "resourceVersion": metadata["resourceVersion"],
                    "annotations": {EXIT_CODE: "1"},
                }
            }
            status, _ = await self._request(
                "PATCH", _path(PODS, NAMESPACE, metadata["name"]), patch, MERGE_PATCH
            )
            if status != 200:
                return  # changed since, or the API server away: looked at again next round
            self.failed.setdefault(job, []).append(index)
            self._made_to_fail[metadata["uid"]] = (job, index)
        self._seen.add(metadata["uid"])
        if index_text is not None:
            self._indexes_seen.setdefault(job, set()).add(index)
        else:
            self._created[job] = index + 1

    async def held(self, name: str) -> dict[tuple[str, str], str]:
        """Each object's resourceVersion now, by kind and uid."""
        held = await anyio.to_thread.run_sync(self.plane.objects_at)
        return {(obj["kind"], obj["metadata"]["uid"]): str(rv) for rv, obj in held}

    async def journals(self) -> dict[str, list[Change]]:
        """What the cluster held at the run's start, as added, then every change since."""
        held = await anyio.to_thread.run_sync(self.plane.objects_at, self.begin)
        changes = await anyio.to_thread.run_sync(self.plane.changes, self.begin)
        return {
            NAME: [
                *(Change(o["kind"], o["metadata"]["uid"], rv, "ADDED", o) for rv, o in held),
                *(Change(o["kind"], o["metadata"]["uid"], rv, t, o) for t, rv, o in changes),
            ]
        }

    async def lift(self) -> Counter[str]:
        """The proxy's faults off; those that struck, by name (none without a proxy: the
        disturbance is then the plane's own faults). Once the load has finished: the pods
        made to fail that ended Succeeded all the same are taken out of `failed`, and
        counted as ``pod failure not applied``."""
        struck: Counter[str] = Counter()
        if self.faults is not None:
            self.faults.clear()
            struck += self.faults.hits
        struck["pod failure not applied"] = await self._settle_failed()
        return struck

    async def _settle_failed(self) -> int:
        """kwok has been seen to finish a pod with exit code 0 although the patch giving it
        exit code 1 was answered 200 before (under kube-apiserver restarts): such a pod did
        not fail, and no replacement of it is owed. How many there were."""
        held = await anyio.to_thread.run_sync(self.plane.objects_at)
        succeeded = {
            obj["metadata"]["uid"]
            for _, obj in held
            if obj["kind"] == "Pod" and (obj.get("status") or {}).get("phase") == "Succeeded"
        }
        unapplied = [uid for uid in self._made_to_fail if uid in succeeded]
        for uid in unapplied:
            job, index = self._made_to_fail.pop(uid)
            self.failed[job].remove(index)
        return len(unapplied)


def _proxied_kubeconfig(plane: ControlPlane, server: str) -> Path:
    """kbatchd's kubeconfig with the proxy for its server: the same CA (the proxy serves the
    API server's certificate) and the same token (passed on to the API server)."""
    (user,) = json.loads(plane.kbatchd_kubeconfig.read_text())["users"]
    ca = plane.root / "pki" / "ca.crt"
    return kubeconfig(plane.root / "kbatchd-proxied.kubeconfig", server, ca, user["user"])


def _tls(plane: ControlPlane) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """The proxy's TLS to the API server (trusting the plane's CA) and to the daemon (with the
    API server's own serving certificate, made for 127.0.0.1)."""
    pki = plane.root / "pki"
    upstream = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    serving = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    serving.load_cert_chain(str(pki / "apiserver.crt"), str(pki / "apiserver.key"))
    return upstream, serving


@asynccontextmanager
async def plane_cluster(
    tmp: Path, load: Load, time_scale: float, faults: Faults | None = None
) -> AsyncIterator[PlaneCluster]:
    """A control plane of the run's own (etcd keeping its whole history), making the chosen
    pods fail as they appear, stopped at the end; with `faults`, the daemon's way to it is
    through the fault proxy."""
    plane = await anyio.to_thread.run_sync(
        lambda: ControlPlane.start(VERSION, tmp / "plane", topology=TOPOLOGY, history=True)
    )
    try:
        async with AsyncExitStack() as stack:
            daemon_kubeconfig = plane.kbatchd_kubeconfig
            if faults is not None:
                upstream, serving = _tls(plane)
                proxy = fault_proxy(
                    plane.server, faults, upstream_tls=upstream, serving_tls=serving
                )
                url = await stack.enter_async_context(proxy)
                daemon_kubeconfig = _proxied_kubeconfig(plane, url)
            cluster = PlaneCluster(plane, load, time_scale, daemon_kubeconfig, faults)
            async with anyio.create_task_group() as tg:
                tg.start_soon(cluster.fail_chosen)
                yield cluster
                tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(plane.stop)
