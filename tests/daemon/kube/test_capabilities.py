"""Asking an API server whether it keeps Job spec.managedBy, by dry run."""

from __future__ import annotations

from typing import Any

import pytest

from daemon.kube.api import KubeApi
from daemon.kube.capabilities import PROBE_NAME, keeps_job_managed_by
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS

pytestmark = pytest.mark.anyio


async def test_a_server_that_keeps_the_field_is_seen_to(sim: SimCluster, api: KubeApi) -> None:
    assert await keeps_job_managed_by(api, "kbatchd.dev/job-controller")
    assert sim.get(JOBS, "default", PROBE_NAME) is None  # a dry run creates nothing


async def test_a_server_that_drops_the_field_is_caught(
    sim: SimCluster, api: KubeApi, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server with JobManagedBy off clears the field as it decodes the Job.
    original = sim.registry.create

    def dropping(resource: Any, namespace: str, obj: Any, **kwargs: Any) -> Any:
        if resource is JOBS:
            obj.get("spec", {}).pop("managedBy", None)
        return original(resource, namespace, obj, **kwargs)

    monkeypatch.setattr(sim.registry, "create", dropping)
    assert not await keeps_job_managed_by(api, "kbatchd.dev/job-controller")
