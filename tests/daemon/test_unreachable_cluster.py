"""One cluster that does not answer holds up nobody: after `cluster_sync_wait_seconds` the
daemon acts on the clusters that have listed, and the missing one joins when it comes up. A
cluster joins once it has also answered whether it keeps Job spec.managedBy, asked again
after a transient error."""

from __future__ import annotations

import socket
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any, Final

import msgspec
import pytest
import structlog.testing

from daemon.kube.capabilities import ProbeError, keeps_job_managed_by
from daemon.kube.ingest import Backoff
from daemon.runtime import sources
from daemon.service.config import Cluster, Daemon
from daemon.sim import kubeconfig
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS
from tests.daemon.embedded import embedded, job, settings_for
from tests.processes import eventually

pytestmark = pytest.mark.anyio

TOPOLOGY = "blocks=1,racks=1,hosts=1,gpus=8"
TOKEN = "far-token"
# A cluster asked again 50 ms after the first failure, at most 0.5 s apart (not 1 s doubling
# to 30 s).
QUICK: Final = Daemon(tick_seconds=0.1, watch_inactivity_seconds=10, api_retry_seconds=(0.05, 0.5))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_a_cluster_that_does_not_answer_joins_when_it_comes_up(tmp_path: Path) -> None:
    port = _free_port()  # nothing listens there until the far cluster starts
    far_config = kubeconfig.write(
        tmp_path / "far.kubeconfig", [("far", f"http://127.0.0.1:{port}")], TOKEN
    )
    async with SimCluster.start(topology=TOPOLOGY, seed=3, time_scale=5) as near:
        settings = settings_for(
            near,
            tmp_path / "kbatchd.db",
            clusters=[
                Cluster(name="sim-0", kubeconfig=str(near.kubeconfig_path)),
                Cluster(name="far", kubeconfig=str(far_config)),
            ],
            daemon=msgspec.structs.replace(QUICK, cluster_sync_wait_seconds=1),
        )
        async with embedded(settings) as daemon:
            assert daemon.unsynced_clusters() == ["far"]
            near.registry.create(JOBS, "default", job("near-job", run_seconds=0.2))

            async def near_job_done() -> bool:
                found = daemon.state.jobs.get("sim-0/default/near-job")
                return found is not None and any(
                    c.get("type") == "Complete" and c.get("status") == "True"
                    for c in found.status.get("conditions") or ()
                )

            await eventually(near_job_done, what="the reachable cluster's Job completed")
            assert daemon.unsynced_clusters() == ["far"], "still not answering"

            async with SimCluster.start(
                topology=TOPOLOGY,
                seed=4,
                time_scale=5,
                port=port,
                token=TOKEN,
                name="far",
                kubeconfig_path=tmp_path / "far-again.kubeconfig",
            ) as far:
                far.registry.create(JOBS, "default", job("far-job", run_seconds=0.2))

                async def far_joined_and_acted() -> bool:
                    found = daemon.state.jobs.get("far/default/far-job")
                    return (
                        not daemon.unsynced_clusters()
                        and found is not None
                        and any(
                            c.get("type") == "Complete" and c.get("status") == "True"
                            for c in found.status.get("conditions") or ()
                        )
                    )

                await eventually(
                    far_joined_and_acted, within=60, what="the far cluster joined and its Job ran"
                )


@pytest.mark.parametrize(
    ("status", "asked", "refused"),
    [
        pytest.param(503, 3, set(), id="unavailable-asked-again"),
        pytest.param(403, 1, {"sim-0"}, id="forbidden-refused"),
    ],
)
async def test_the_managed_by_question_is_asked_again_only_after_a_transient_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, status: int, asked: int, refused: set[str]
) -> None:
    calls: list[int] = []

    async def flaky(api: Any, manager: str, namespace: str = "default") -> bool:
        calls.append(status)
        if len(calls) < 3:
            raise ProbeError(f"HTTP {status}", status)
        return await keeps_job_managed_by(api, manager, namespace)

    monkeypatch.setattr(sources, "keeps_job_managed_by", flaky)
    async with (
        SimCluster.start(topology=TOPOLOGY, seed=5) as sim,
        embedded(settings_for(sim, tmp_path / "kbatchd.db", daemon=QUICK)) as daemon,
    ):
        assert daemon.refused_job_clusters == refused
        assert len(calls) == asked
        assert daemon.unsynced_clusters() == []


async def test_a_cluster_gone_away_logs_one_warning_a_round_not_one_a_kind(
    tmp_path: Path,
) -> None:
    """Every kind's informer (and discovery) fails at once when the cluster goes: one warning
    per back-off round for them all."""

    def warnings(logs: list[dict[str, Any]]) -> list[tuple[str, Any]]:
        return [
            (e["event"], e.get("round"))
            for e in logs
            if e["log_level"] == "warning" and e.get("cluster") == "sim-0"
        ]

    async with AsyncExitStack() as cluster:
        sim = await cluster.enter_async_context(SimCluster.start(topology=TOPOLOGY, seed=6))
        async with embedded(settings_for(sim, tmp_path / "kbatchd.db", daemon=QUICK)):
            with structlog.testing.capture_logs() as logs:
                await cluster.aclose()  # the API server stops answering

                async def two_warned() -> bool:
                    return len(warnings(logs)) >= 2

                await eventually(two_warned, within=20, what="two warnings")
    assert warnings(logs)[:2] == [
        ("cannot reach the cluster; trying again", 1),
        ("cannot reach the cluster; trying again", 2),
    ]


async def test_the_configured_back_offs_are_the_ones_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`daemon.api_retry_seconds` paces discovery and the managedBy question, and
    `daemon.act_retry_seconds` each API call the actuator retries."""
    made: list[tuple[float, float]] = []

    class Recorded(Backoff):
        def __init__(self, first: float = 0.8, cap: float = 30.0, rng: Any = None) -> None:
            made.append((first, cap))
            super().__init__(first, cap, rng)

    monkeypatch.setattr(sources, "Backoff", Recorded)
    settings = msgspec.structs.replace(QUICK, act_retry_seconds=(0.02, 0.3))
    async with (
        SimCluster.start(topology=TOPOLOGY, seed=8) as sim,
        embedded(settings_for(sim, tmp_path / "kbatchd.db", daemon=settings)) as daemon,
    ):
        assert daemon.actuator is not None
        assert daemon.actuator.retry_backoff == (0.02, 0.3)
        reachability = daemon.clusters.reachability["sim-0"]._backoff
        assert (reachability.first, reachability.cap) == (0.05, 0.5)
    assert made
    assert set(made) == {(0.05, 0.5)}
