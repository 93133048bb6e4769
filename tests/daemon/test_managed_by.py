"""A cluster whose API server drops Job spec.managedBy (feature JobManagedBy off) runs every
Job with its built-in controller: kbatchd notices at start, says so, and leaves Jobs alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS
from events.schema import Decided
from tests.daemon.embedded import MANAGER, embedded, settings_for
from tests.processes import eventually, logged_events

pytestmark = pytest.mark.anyio


def _job(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "managedBy": MANAGER,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "x"}]}
            },
        },
    }


async def test_jobs_are_left_alone_where_managed_by_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SimCluster.start(topology="blocks=1,racks=1,hosts=1,gpus=8", seed=2) as sim:
        original = sim.registry.create

        def dropping(resource: Any, namespace: str, obj: Any, **kwargs: Any) -> Any:
            if resource is JOBS:
                obj.get("spec", {}).pop("managedBy", None)
            return original(resource, namespace, obj, **kwargs)

        monkeypatch.setattr(sim.registry, "create", dropping)
        log = tmp_path / "kbatchd.db"
        async with embedded(settings_for(sim, log)) as daemon:
            # A Job that (on a real cluster) kept managedBy because it predates the change:
            # still not kbatchd's to run here.
            monkeypatch.setattr(sim.registry, "create", original)
            sim.registry.create(JOBS, "default", _job("mine"))

            async def folded_and_ticked() -> bool:
                return "sim-0/default/mine" in daemon.state.jobs

            await eventually(folded_and_ticked, what="the Job folded")
            seen_at = daemon.state.now

            async def later() -> bool:
                return daemon.state.now > seen_at + 500

            await eventually(later, what="half a second of ticks after it")
            assert daemon.refused_job_clusters == {"sim-0"}
    events = await logged_events(log)
    assert [e for _, e in events if isinstance(e, Decided)] == []
