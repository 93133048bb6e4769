"""Fixtures for the simulated cluster: a small fast cluster and clients connected to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from kubernetes_asyncio import client, config

from daemon.sim.cluster import SimCluster
from tests.daemon.sim.helpers import unchanged_once_stored

SMALL = "blocks=1,racks=2,hosts=2,gpus=8,cpu=32,memory=256Gi,pods=110"


@pytest.fixture
async def sim(anyio_backend: str) -> AsyncIterator[SimCluster]:
    async with SimCluster.start(
        topology=SMALL, seed=7, time_scale=50.0, bookmark_seconds=0.2
    ) as cluster:
        with unchanged_once_stored(cluster.store):
            yield cluster


@pytest.fixture
async def api(sim: SimCluster) -> AsyncIterator[client.ApiClient]:
    """A kubernetes-asyncio client configured from the cluster's kubeconfig."""
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(sim.kubeconfig_path), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api_client:
        yield api_client
