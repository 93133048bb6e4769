"""The two backends every integration scenario runs on: the simulated cluster (a fresh one per
test, served from the test's own process: kbatchd, a process of its own, reaches it on loopback
as it would reach `kbatchd sim`) and the real control plane (`tests/realcluster`, one per
Kubernetes release and profile for the whole session, a fresh namespace per test).

A test takes the `backend` fixture (parametrized over ``sim`` and ``k8s-<release>``) and opens a
`Cluster` with `on_cluster`. Where Go is missing the real backends skip, saying so; with
``KBATCHD_REAL_CLUSTER=require`` (CI) they fail instead, naming the step that could not run.
"""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from daemon.sim.cluster import SimCluster
from tests.processes import daemon_config, eventually, kube_client
from tests.realcluster.controlplane import KUBERNETES, ControlPlane, ControlPlaneError, Profile

SIM: Final = "sim"
# A cluster of your own instead of the built control planes: an admin kubeconfig (see README).
OWN_ENV: Final = "KBATCHD_TEST_KUBECONFIG"
OWN: Final = "own"
REAL: Final = (OWN,) if os.environ.get(OWN_ENV) else tuple(f"k8s-{v}" for v in KUBERNETES)
BACKENDS: Final = (SIM, *REAL)
DEFAULT_TOPOLOGY: Final = "blocks=1,racks=2,hosts=4,gpus=8"
# Simulated seconds per second on the sim backend: its pods start, run and terminate this much
# faster than their annotations say (kbatchd's own clock, back-off and deadlines, is real).
SIM_TIME_SCALE: Final = float(os.environ.get("KBATCHD_TEST_SIM_TIME_SCALE", "4"))
REQUIRE_ENV: Final = "KBATCHD_REAL_CLUSTER"


def backend_params(*, real: tuple[str, ...] = REAL) -> list[Any]:
    """`pytest.param`s for `parametrize("backend", ...)`, the real ones marked `real`."""
    return [pytest.param(SIM, id=SIM)] + [
        pytest.param(name, id=name, marks=pytest.mark.real) for name in real
    ]


def real_params() -> list[Any]:
    """For a scenario only a real API server can play (what it serves, what it validates)."""
    return backend_params()[1:]


@dataclass(frozen=True)
class Cluster:
    """One backend, ready for a scenario. `kubeconfig` is what kbatchd connects with (on the
    real control plane a ServiceAccount token bound to config/rbac.yaml); `admin` is the test's
    own. Objects go into `namespace`."""

    backend: str
    kubeconfig: Path
    admin: Path
    namespace: str
    plane: ControlPlane | None = None
    sim: SimCluster | None = None

    @property
    def real(self) -> bool:
        return self.backend != SIM

    @property
    def name(self) -> str:
        """The cluster's name in kbatchd's config, log and refs."""
        return "real" if self.real else "sim-0"

    @property
    def scheduling_version(self) -> str:
        """The scheduling.k8s.io version Workloads and PodGroups are served at."""
        if self.backend == OWN:
            return os.environ.get("KBATCHD_TEST_SCHEDULING_VERSION", "v1beta1")
        return "v1alpha2" if self.backend in (SIM, "k8s-1.36.3") else "v1beta1"

    def daemon_config(self, tmp: Path, **options: Any) -> Path:
        """`tests.processes.daemon_config` for this cluster."""
        return daemon_config(tmp, self.kubeconfig, cluster=self.name, **options)


class _Planes:
    """The session's control planes, started on first use and stopped at the session's end."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, Profile, str], ControlPlane] = {}
        self.failed: dict[str, str] = {}
        self.root = Path(tempfile.mkdtemp(prefix="kbatchd-control-planes-"))
        self._names = itertools.count(1)

    def get(
        self, version: str, profile: Profile, topology: str, *, fresh: bool = False
    ) -> ControlPlane:
        """The session's plane of that version, profile and topology; `fresh`: one of the
        caller's own, which it stops (for tests that change what the cluster serves)."""
        key = (version, profile, topology)
        if fresh or key not in self.running:
            if version in self.failed:
                pytest.fail(self.failed[version], pytrace=False)
            root = self.root / f"{version}-{next(self._names)}"
            try:
                plane = ControlPlane.start(version, root, profile=profile, topology=topology)
            except ControlPlaneError as exc:
                self.failed[version] = f"real control plane: {exc}"
                pytest.fail(self.failed[version], pytrace=False)
            if fresh:
                return plane
            self.running[key] = plane
        return self.running[key]

    def namespace(self) -> str:
        return f"t{next(self._names)}"

    def stop(self) -> None:
        for plane in self.running.values():
            plane.stop()
        self.running.clear()
        shutil.rmtree(self.root, ignore_errors=True)


_planes: _Planes | None = None


def planes() -> _Planes:
    global _planes
    if _planes is None:
        _planes = _Planes()
    return _planes


def stop_planes() -> None:
    if _planes is not None:
        _planes.stop()


def require_go() -> None:
    """Skip (or, where the real tier is required, fail) when no Go toolchain is found."""
    if shutil.which("go") is None:
        message = "no Go toolchain on PATH: the real-control-plane tier needs Go 1.26"
        if os.environ.get(REQUIRE_ENV) == "require":
            pytest.fail(message, pytrace=False)
        pytest.skip(message)


@asynccontextmanager
async def on_cluster(
    backend: str,
    tmp: Path,
    *,
    profile: Profile | None = None,
    topology: str = DEFAULT_TOPOLOGY,
    fresh: bool = False,
    time_scale: float = SIM_TIME_SCALE,
) -> AsyncIterator[Cluster]:
    """The backend, serving; on the real control plane a fresh namespace, removed (with
    whatever kbatchd's finalizers still hold) when the block ends, and with `fresh` a control
    plane of the test's own, stopped then."""
    if backend == SIM:
        # What `kbatchd sim --topology TOPOLOGY` serves (its first cluster is sim-0).
        async with SimCluster.start(
            topology=topology,
            name="sim-0",
            kubeconfig_path=tmp / "kubeconfig",
            time_scale=time_scale,
        ) as sim:
            assert sim.kubeconfig_path is not None
            yield Cluster(SIM, sim.kubeconfig_path, sim.kubeconfig_path, "default", sim=sim)
        return
    if backend == OWN:
        if profile is not None or fresh:
            pytest.skip("needs a control plane of its own profile: not with your own cluster")
        if topology != DEFAULT_TOPOLOGY:
            pytest.skip(f"needs the nodes of topology {topology}; your cluster has its own")
        admin = Path(os.environ[OWN_ENV])
        namespace = planes().namespace()
        async with kube_client(admin) as api:
            await client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
        try:
            yield Cluster(OWN, admin, admin, namespace)
        finally:
            with anyio.CancelScope(shield=True):
                await _remove_namespace(admin, namespace)
        return
    require_go()
    version = backend.removeprefix("k8s-")
    plane = await anyio.to_thread.run_sync(
        lambda: planes().get(version, profile or Profile(), topology, fresh=fresh)
    )
    namespace = planes().namespace()
    async with kube_client(plane.admin_kubeconfig) as api:
        await client.CoreV1Api(api).create_namespace({"metadata": {"name": namespace}})
        await eventually(
            lambda: _has_default_service_account(api, namespace),
            within=60,
            what=f"namespace {namespace}'s default ServiceAccount",
        )
    try:
        yield Cluster(backend, plane.kbatchd_kubeconfig, plane.admin_kubeconfig, namespace, plane)
    finally:
        with anyio.CancelScope(shield=True):
            if fresh:
                await anyio.to_thread.run_sync(plane.stop)
            else:
                await _remove_namespace(plane.admin_kubeconfig, namespace)


async def _has_default_service_account(api: client.ApiClient, namespace: str) -> bool:
    try:
        await client.CoreV1Api(api).read_namespaced_service_account("default", namespace)
    except ApiException as exc:
        if exc.status == 404:
            return False
        raise
    return True


async def _remove_namespace(admin: Path, namespace: str) -> None:
    """Delete the namespace and let go of the pods kbatchd's finalizer still holds (no kbatchd
    runs any more to release them), until it is gone."""
    async with kube_client(admin) as api:
        core = client.CoreV1Api(api)
        await core.delete_namespace(namespace)

        async def gone() -> bool:
            pods = await core.list_namespaced_pod(namespace)
            for pod in pods.items:
                if pod.metadata.finalizers:
                    try:
                        await core.patch_namespaced_pod(
                            pod.metadata.name, namespace, {"metadata": {"finalizers": None}}
                        )
                    except ApiException as exc:
                        if exc.status != 404:
                            raise
            try:
                await core.read_namespace(namespace)
            except ApiException as exc:
                if exc.status == 404:
                    return True
                raise
            return False

        await eventually(gone, within=90, what=f"namespace {namespace} removed")
