"""Health and metrics: the probes' verdicts, the Prometheus text, and a running daemon's
endpoint while it manages a Job through API errors."""

from __future__ import annotations

import json
import re
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider

from daemon.service import prometheus
from daemon.service.config import is_loopback, parse_address
from daemon.service.health import HealthServer
from daemon.service.metrics import Metrics, reason_code
from events.schema import Decided
from tests.daemon.embedded import job
from tests.processes import (
    daemon_config,
    eventually,
    kube_client,
    metric_samples,
    simulated_cluster_here,
    spawn,
)

pytestmark = pytest.mark.anyio


class FakeDaemon:
    def __init__(self) -> None:
        self.role = "starting"
        self.pumped_at = time.monotonic()
        self.appended_at = 0.0
        self.log_error = ""
        self.synced = False
        self.unsynced: list[str] = []

    def is_synced(self) -> bool:
        return self.synced

    def unsynced_clusters(self) -> list[str]:
        return self.unsynced


@asynccontextmanager
async def serving(daemon: FakeDaemon) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    server = HealthServer(daemon, Metrics(), stale_after=10)
    url = await server.start("127.0.0.1", 0)
    try:
        async with aiohttp.ClientSession() as session:
            yield url, session
    finally:
        await server.stop()


async def _get(session: aiohttp.ClientSession, url: str) -> tuple[int, dict[str, object]]:
    async with session.get(url) as response:
        return response.status, await response.json()


async def test_ready_only_when_synced_writing_and_knowing_its_role() -> None:
    daemon = FakeDaemon()
    async with serving(daemon) as (url, session):
        status, body = await _get(session, f"{url}/readyz")
        assert (status, body["ready"]) == (503, False)
        daemon.synced = True
        daemon.appended_at = time.monotonic()
        status, body = await _get(session, f"{url}/readyz")
        assert (status, body["role"]) == (503, "starting")
        for role in ("leader", "standby"):
            daemon.role = role
            status, body = await _get(session, f"{url}/readyz")
            assert (status, body) == (
                200,
                {
                    "synced": True,
                    "unsynced_clusters": [],
                    "log_writable": True,
                    "log_error": None,
                    "role": role,
                    "ready": True,
                },
            )
        # Acting on the clusters that listed while another does not answer: ready, and says so.
        daemon.unsynced = ["far-away"]
        status, body = await _get(session, f"{url}/readyz")
        assert (status, body["unsynced_clusters"]) == (200, ["far-away"])
        daemon.appended_at = time.monotonic() - 60
        status, body = await _get(session, f"{url}/readyz")
        assert (status, body["log_writable"]) == (503, False)


async def test_not_ready_while_the_log_takes_no_append_saying_why() -> None:
    daemon = FakeDaemon()
    daemon.synced, daemon.role = True, "leader"
    daemon.appended_at = time.monotonic()  # the last success was just now
    daemon.log_error = "LOG: appending seq 7..9 failed: database or disk is full"
    async with serving(daemon) as (url, session):
        status, body = await _get(session, f"{url}/readyz")
        assert (status, body["ready"], body["log_writable"]) == (503, False, False)
        assert body["log_error"] == daemon.log_error
        daemon.log_error = ""
        status, body = await _get(session, f"{url}/readyz")
        assert (status, body["log_error"]) == (200, None)


async def test_alive_while_the_main_loop_turns() -> None:
    daemon = FakeDaemon()
    async with serving(daemon) as (url, session):
        status, body = await _get(session, f"{url}/healthz")
        assert (status, body["alive"]) == (200, True)
        daemon.pumped_at = time.monotonic() - 60
        status, body = await _get(session, f"{url}/healthz")
        assert (status, body["alive"]) == (503, False)


def test_prometheus_text_of_counters_gauges_and_histograms() -> None:
    reader = InMemoryMetricReader()
    meter = MeterProvider(metric_readers=[reader]).get_meter("t")
    meter.create_counter("kbatchd.events.appended", "{event}", "Events").add(3, {"type": "Tick"})
    meter.create_up_down_counter("kbatchd.depth", "1", "Depth").add(-2, {"queue": 'a"b'})
    latency = meter.create_histogram(
        "kbatchd.act.duration", "s", "Act", explicit_bucket_boundaries_advisory=(0.1, 1.0)
    )
    for value in (0.05, 0.5, 0.7, 5.0):
        latency.record(value)
    text = prometheus.render(reader.get_metrics_data())
    assert "# TYPE kbatchd_events_appended_total counter" in text
    assert 'kbatchd_events_appended_total{type="Tick"} 3' in text
    assert "# TYPE kbatchd_depth gauge" in text
    assert 'kbatchd_depth{queue="a\\"b"} -2' in text
    assert "# TYPE kbatchd_act_duration_seconds histogram" in text
    assert 'kbatchd_act_duration_seconds_bucket{le="0.1"} 1' in text
    assert 'kbatchd_act_duration_seconds_bucket{le="1.0"} 3' in text
    assert 'kbatchd_act_duration_seconds_bucket{le="+Inf"} 4' in text
    assert "kbatchd_act_duration_seconds_count 4" in text
    assert "kbatchd_act_duration_seconds_sum 6.25" in text
    assert prometheus.render(None) == ""


def test_decisions_are_counted_by_reason_code() -> None:
    metrics = Metrics()

    def decided(reconciler: str, reason: str) -> Decided:
        return Decided(at=0, reconciler=reconciler, key="k", reason=reason)

    metrics.decided(
        [
            decided("gang", "Admitted: placed on rack r1"),
            decided("gang", "Admitted: placed on rack r2"),
            decided("gang", "Preempted: for a higher priority"),
            decided("job", "Status"),
        ]
    )
    metrics.decided([decided("gang", "Admitted: placed on rack r3")])
    metrics.decided([])
    text = metrics.render()
    assert 'kbatchd_decisions_total{reason="Admitted",reconciler="gang"} 3' in text
    assert 'kbatchd_decisions_total{reason="Preempted",reconciler="gang"} 1' in text
    assert 'kbatchd_decisions_total{reason="Status",reconciler="job"} 1' in text
    assert 'kbatchd_admissions_total{reconciler="gang"} 3' in text
    assert 'kbatchd_preemptions_total{reconciler="gang"} 1' in text
    assert 'kbatchd_admissions_total{reconciler="job"}' not in text
    assert reason_code("BackoffLimitExceeded: Failed (too many)") == "BackoffLimitExceeded"


def test_values_recorded_inside_a_sampled_span_keep_no_exemplars() -> None:
    metrics = Metrics()
    tracer = TracerProvider().get_tracer("test")
    with tracer.start_as_current_span("act"):
        metrics.act_duration.record(0.01)
    data = metrics.reader.get_metrics_data()
    assert data is not None
    points = [
        point
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
        if metric.name == "kbatchd.act.duration"
        for point in metric.data.data_points
    ]
    assert len(points) == 1
    assert points[0].exemplars == []


def _total(samples: dict[str, float], family: str, **labels: str) -> float:
    wanted = [f'{k}="{v}"' for k, v in labels.items()]
    return sum(
        value
        for name, value in samples.items()
        if re.match(rf"{family}(\{{|$)", name) and all(w in name for w in wanted)
    )


async def test_a_running_daemon_serves_its_health_and_metrics(tmp_path: Path) -> None:
    # One API request in five fails: the daemon gets through, and counts what failed.
    faults = ("--faults", "error-500=0.2", "--seed", "7", "--time-scale", "10")
    async with simulated_cluster_here(tmp_path, *faults) as (_, kubeconfig):
        config = daemon_config(tmp_path, kubeconfig)
        async with (
            spawn("daemon", "run", "--config", str(config)) as daemon,
            kube_client(kubeconfig) as api,
            aiohttp.ClientSession() as session,
        ):
            line = await daemon.wait_for(lambda text: '"health serving"' in text)
            url = json.loads(line)["url"]
            assert url.startswith("http://127.0.0.1:")
            status, body = await _get(session, f"{url}/healthz")
            assert (status, body["alive"]) == (200, True)

            async def ready() -> dict[str, object] | None:
                status, body = await _get(session, f"{url}/readyz")
                return body if status == 200 else None

            body = await eventually(ready, what="/readyz 200")
            assert body["role"] == "leader"
            batch = client.BatchV1Api(api)

            # The test's own requests meet the injected faults too: it retries them.
            async def created() -> bool:
                try:
                    await batch.create_namespaced_job("default", job("measured", parallelism=2))
                except ApiException as exc:
                    return exc.status == 409
                return True

            async def complete() -> bool:
                try:
                    found = await batch.read_namespaced_job("measured", "default")
                except ApiException:
                    return False
                return any(
                    c.type == "Complete" and c.status == "True"
                    for c in found.status.conditions or []
                )

            await eventually(created, what="Job measured created")

            await eventually(complete, within=60, what="Job measured Complete")
            async with session.get(f"{url}/metrics") as response:
                assert response.status == 200
                assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                text = await response.text()
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=15) == 0
    samples = metric_samples(text)
    assert _total(samples, "kbatchd_events_appended_total", type="Observed") > 0
    assert _total(samples, "kbatchd_decisions_total", reconciler="job") > 0
    assert _total(samples, "kbatchd_api_errors_total", code="500") > 0
    assert _total(samples, "kbatchd_fold_lag_seconds_count") > 0
    assert _total(samples, "kbatchd_reconcile_duration_seconds_count") > 0
    assert _total(samples, "kbatchd_act_duration_seconds_count") >= 2
    assert _total(samples, "kbatchd_reconcile_latency_seconds_count", reconciler="job") > 0
    assert _total(samples, "kbatchd_build_info") == 1
    assert samples["process_cpu_seconds_total"] > 0
    assert samples["process_resident_memory_bytes"] > 0
    assert samples["kbatchd_leader"] == 1
    assert 'kbatchd_queue_depth{queue="ingest"}' in samples
    # Both pods' SuccessfulCreate went to the recorder (a 500 drops an Event, as client-go's).
    events = _total(samples, "kbatchd_kube_events_total", outcome="written")
    assert events + _total(samples, "kbatchd_kube_events_total", outcome="dropped") >= 2


@pytest.mark.parametrize(
    ("address", "loopback"),
    [
        ("127.0.0.1:9464", True),
        ("127.0.0.9:9464", True),
        ("localhost:9464", True),
        ("[::1]:9464", True),
        ("0.0.0.0:9464", False),
        ("[::]:9464", False),
        ("10.1.2.3:9464", False),
        ("[fe80::1]:9464", False),
    ],
)
def test_which_health_addresses_are_loopback(address: str, loopback: bool) -> None:
    host, _ = parse_address(address)
    assert is_loopback(host) is loopback


@pytest.mark.parametrize(("address", "warned"), [("0.0.0.0:0", True), ("127.0.0.1:0", False)])
async def test_health_served_beyond_loopback_gets_one_warning_at_start(
    tmp_path: Path, address: str, warned: bool
) -> None:
    async with simulated_cluster_here(tmp_path) as (_, kubeconfig):
        config = daemon_config(tmp_path, kubeconfig)
        config.write_text(config.read_text().replace('"127.0.0.1:0"', f'"{address}"'))
        async with spawn("daemon", "run", "--config", str(config)) as daemon:
            await daemon.wait_for(lambda line: '"synced"' in line)
            warnings = [line for line in daemon.logs() if line.get("level") == "warning"]
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=15) == 0
    beyond = [w for w in warnings if "served beyond loopback" in w["event"]]
    assert beyond == ([{**beyond[0], "address": address}] if warned else [])
