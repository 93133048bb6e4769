"""Traces: one trace per observed change — ingest → append → fold → decide → act, linked by the
event's seq, with Kubernetes attributes — checked on an in-memory exporter; OTLP export only
when an endpoint is configured, checked against a loopback OTLP/HTTP receiver."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from aiohttp import web
from kubernetes_asyncio import client
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from daemon.config import Tracing as TracingSettings
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS
from daemon.telemetry import TelemetryError, Tracing, provider_with, tracer_provider
from tests.daemon.embedded import embedded, job, settings_for
from tests.processes import daemon_config, eventually, kube_client, simulated_cluster, spawn

pytestmark = pytest.mark.anyio


def _children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def _complete(sim: SimCluster, name: str) -> bool:
    found = sim.get(JOBS, "default", name) or {}
    conditions = found.get("status", {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


async def test_a_change_and_what_it_led_to_are_one_trace(tmp_path: Path) -> None:
    exporter = InMemorySpanExporter()
    provider = provider_with(SimpleSpanProcessor(exporter), TracingSettings(), "test", env={})
    async with SimCluster.start(topology="blocks=1,racks=1,hosts=2,gpus=8", time_scale=20) as sim:
        settings = settings_for(sim, tmp_path / "kbatchd.db")
        async with embedded(settings, tracing=Tracing(provider)):
            sim.registry.create(JOBS, "default", job("traced", parallelism=2))

            async def done() -> bool:
                return _complete(sim, "traced")

            await eventually(done, what="Job traced Complete")
    spans = exporter.get_finished_spans()
    root = next(
        s
        for s in spans
        if s.name == "ingest"
        and s.attributes is not None
        and s.attributes.get("k8s.job.name") == "traced"
        and s.attributes.get("kbatchd.watch.change") == "ADDED"
    )
    attributes: Any = root.attributes
    assert root.parent is None
    seq = attributes["kbatchd.event.seq"]
    assert attributes["k8s.namespace.name"] == "default"
    assert attributes["k8s.cluster.name"] == "sim-0"
    assert attributes["k8s.job.uid"]
    children = {s.name: s for s in _children(spans, root)}
    assert set(children) == {"append", "fold", "decide"}
    for name in ("append", "fold"):
        step: Any = children[name].attributes
        assert step["kbatchd.event.seq"] == seq
    decide = children["decide"]
    decided: Any = decide.attributes
    assert decided["kbatchd.reconciler"] == "job"
    assert decided["kbatchd.event.seq"] == seq
    assert decided["kbatchd.decision.seq"] > seq
    assert decided["kbatchd.decision.reason"]
    assert decided["k8s.job.name"] == "traced"
    acts = _children(spans, decide)
    # One act per intent: the pods' creates (and whatever else the decision holds).
    assert len(acts) == decided["kbatchd.decision.intents"]
    creates = [a for a in acts if (a.attributes or {}).get("kbatchd.intent.op") == "create"]
    assert len(creates) == 2
    for act in creates:
        acted: Any = act.attributes
        assert act.name == "act"
        assert acted["http.request.method"] == "POST"
        assert acted["http.response.status_code"] == 201
        assert acted["k8s.pod.name"].startswith("traced-")
    for act in acts:
        acted = act.attributes
        assert acted["kbatchd.outcome.ok"] is True
        assert acted["kbatchd.decision.seq"] == decided["kbatchd.decision.seq"]
        assert act.status.is_ok
    journey = [root, *children.values(), *acts]
    assert len({s.context.trace_id for s in journey}) == 1
    # In time order: seen, appended, folded, decided, acted.
    assert root.start_time <= children["append"].start_time <= children["fold"].start_time
    assert children["fold"].end_time <= decide.start_time <= min(a.start_time for a in acts)


@pytest.mark.parametrize(
    ("env", "endpoint"),
    [({}, ""), ({"OTEL_SDK_DISABLED": "true"}, "http://127.0.0.1:4318")],
    ids=["no-endpoint", "sdk-disabled"],
)
def test_nothing_is_exported_unless_asked(env: dict[str, str], endpoint: str) -> None:
    assert tracer_provider(TracingSettings(endpoint=endpoint), "i", env) is None
    assert not Tracing(None).enabled


def test_only_the_http_protocol_is_offered() -> None:
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://x:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}
    with pytest.raises(TelemetryError, match="http/protobuf"):
        tracer_provider(TracingSettings(), "i", env)


class Receiver:
    """A loopback OTLP/HTTP trace receiver."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.arrived = anyio.Event()
        self.url = ""

    async def handle(self, request: web.Request) -> web.Response:
        message = ExportTraceServiceRequest()
        message.ParseFromString(await request.read())
        self.requests.append(message)
        self.arrived.set()
        self.arrived = anyio.Event()
        return web.Response(body=b"", content_type="application/x-protobuf")

    def spans(self) -> list[tuple[dict[str, str], Any]]:
        """(resource attributes, span) for every span received."""
        found = []
        for message in self.requests:
            for resource_spans in message.resource_spans:
                resource = {a.key: a.value.string_value for a in resource_spans.resource.attributes}
                for scope in resource_spans.scope_spans:
                    found.extend((resource, span) for span in scope.spans)
        return found


@asynccontextmanager
async def receiver() -> AsyncIterator[Receiver]:
    collector = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", collector.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    host, port = runner.addresses[0][:2]
    collector.url = f"http://{host}:{port}"
    try:
        yield collector
    finally:
        await runner.cleanup()


async def test_the_configured_endpoint_gets_the_spans() -> None:
    async with receiver() as collector:
        settings = TracingSettings(endpoint=collector.url, service_name="kbatchd-here")
        provider = tracer_provider(settings, "instance-1", env={})
        assert provider is not None
        provider.get_tracer("t").start_span("probe").end()
        # The exporter runs in the processor's thread: flush it without blocking this loop.
        assert await anyio.to_thread.run_sync(provider.force_flush)
        provider.shutdown()
    ((resource, span),) = collector.spans()
    assert span.name == "probe"
    assert resource["service.name"] == "kbatchd-here"
    assert resource["service.instance.id"] == "instance-1"


async def test_a_running_daemon_exports_over_otlp_when_the_environment_says(
    tmp_path: Path,
) -> None:
    async with (
        receiver() as collector,
        simulated_cluster(tmp_path, "--time-scale", "10") as (
            _,
            kubeconfig,
        ),
    ):
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": collector.url,
            "OTEL_SERVICE_NAME": "kbatchd-test",
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        }
        config = daemon_config(tmp_path, kubeconfig)
        async with (
            spawn("daemon", "run", "--config", str(config), env=env) as daemon,
            kube_client(kubeconfig) as api,
        ):
            await daemon.wait_for(lambda line: '"synced"' in line)
            await client.BatchV1Api(api).create_namespaced_job("default", job("exported"))

            async def acted() -> bool:
                return any(span.name == "act" for _, span in collector.spans())

            await eventually(acted, what="act spans at the receiver")
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=15) == 0
    received = collector.spans()
    names = {span.name for _, span in received}
    assert {"ingest", "append", "fold", "decide", "act"} <= names
    resource = received[0][0]
    assert resource["service.name"] == "kbatchd-test"
    assert resource["service.instance.id"]
