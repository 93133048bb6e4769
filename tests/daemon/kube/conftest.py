"""An in-process simulated cluster and a `KubeApi` on it, for ingest and actuator tests; a
server certificate for TLS tests."""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from daemon.kube.api import KubeApi
from daemon.sim.cluster import SimCluster
from tests.daemon.sim.helpers import unchanged_once_stored


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimCluster]:
    async with SimCluster.start(
        topology="blocks=1,racks=1,hosts=2,gpus=8", seed=11, time_scale=20, bookmark_seconds=0.2
    ) as cluster:
        with unchanged_once_stored(cluster.store):
            yield cluster


@pytest.fixture
async def api(sim: SimCluster) -> AsyncIterator[KubeApi]:
    assert sim.kubeconfig_path is not None
    async with KubeApi.connect("c1", str(sim.kubeconfig_path), None) as kube:
        yield kube


@pytest.fixture(scope="session")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A self-signed certificate and its key for 127.0.0.1 (openssl, as a cluster's CA would
    make one)."""
    where = tmp_path_factory.mktemp("tls")
    cert, key = where / "server.crt", where / "server.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key
