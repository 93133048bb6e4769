"""An in-process simulated cluster and a `KubeApi` on it, for ingest and actuator tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

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
