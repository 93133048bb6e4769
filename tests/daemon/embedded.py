"""The daemon in the test's own event loop, against an in-process simulated cluster: for tests
that need to look inside it (its spans, its role, its actuator) while it runs."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
from kubernetes_asyncio import client, config

from daemon.runtime.supervisor import Daemon as Supervisor
from daemon.service import run
from daemon.service.config import Cluster, Daemon, LeaderElection, Settings
from daemon.service.metrics import Metrics
from daemon.service.telemetry import Tracing
from daemon.sim.cluster import SimCluster

MANAGER = "kbatchd.dev/job-controller"


def settings_for(sim: SimCluster, log: Path, **changes: Any) -> Settings:
    assert sim.kubeconfig_path is not None
    fields: dict[str, Any] = {
        "log": str(log),
        "clusters": [Cluster(name="sim-0", kubeconfig=str(sim.kubeconfig_path))],
        "daemon": Daemon(tick_seconds=0.1, watch_inactivity_seconds=10),
    }
    fields.update(changes)
    return Settings(**fields)


def short_leases(**changes: Any) -> LeaderElection:
    """Election with leases short enough for tests: 3 s lease, 2 s deadline, 0.5 s retry."""
    fields: dict[str, Any] = {
        "enabled": True,
        "lease_duration_seconds": 3,
        "renew_deadline_seconds": 2.0,
        "retry_period_seconds": 0.5,
    }
    fields.update(changes)
    return LeaderElection(**fields)


@asynccontextmanager
async def embedded(
    settings: Settings,
    *,
    tracing: Tracing | None = None,
    metrics: Metrics | None = None,
    identity: str = "",
    wait_synced: bool = True,
) -> AsyncIterator[Supervisor]:
    """Run the daemon until the block ends, then stop it cleanly."""
    daemon = run.build(
        settings,
        tracing=tracing,
        metrics=metrics,
        identity=identity,
    )
    async with anyio.create_task_group() as tg:
        tg.start_soon(lambda: daemon.run(handle_signals=False))
        if wait_synced:
            with anyio.fail_after(30):
                await daemon.synced.wait()
        try:
            yield daemon
        finally:
            daemon.stop()


@asynccontextmanager
async def api_client(sim: SimCluster) -> AsyncIterator[client.ApiClient]:
    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(sim.kubeconfig_path), client_configuration=configuration
    )
    async with client.ApiClient(configuration) as api:
        yield api


def job(name: str, *, parallelism: int = 1, run_seconds: float = 1, **spec: Any) -> Any:
    """A Job managed by kbatchd whose pods run `run_seconds` on the simulated cluster."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "managedBy": MANAGER,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {
                "metadata": {"annotations": {"sim.kbatchd.dev/run-seconds": str(run_seconds)}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox"}],
                },
            },
            **spec,
        },
    }
