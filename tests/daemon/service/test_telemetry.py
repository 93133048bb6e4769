"""Traces: a Job's life is one trace (workload → decide → act, with Kubernetes attributes and
the act spans' traceparent on their API requests), each observed change one more (ingest →
append, fold), linked from the decisions it woke — checked on an in-memory exporter; OTLP
export only when an endpoint is configured, checked against a loopback OTLP/HTTP receiver."""

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
from opentelemetry import trace
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from daemon.service.config import Tracing as TracingSettings
from daemon.service.telemetry import (
    TelemetryError,
    Tracing,
    provider_with,
    tracer_provider,
    workload_trace_id,
)
from daemon.sim.cluster import SimCluster
from daemon.sim.resources import JOBS
from daemon.sim.server import ApiServer
from events.objects import Job
from events.schema import Observed
from tests.daemon.embedded import embedded, job, settings_for
from tests.processes import (
    daemon_config,
    eventually,
    kube_client,
    scraped,
    simulated_cluster_here,
    spawn,
)

pytestmark = pytest.mark.anyio


def _children(spans: Sequence[ReadableSpan], parent: ReadableSpan) -> list[ReadableSpan]:
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


def _complete(sim: SimCluster, name: str) -> bool:
    found = sim.get(JOBS, "default", name) or {}
    conditions = found.get("status", {}).get("conditions") or []
    return any(c["type"] == "Complete" and c["status"] == "True" for c in conditions)


def _attributes(span: ReadableSpan) -> Any:
    return span.attributes or {}


async def test_a_jobs_life_is_one_trace_of_its_decisions_linked_to_the_changes_that_woke_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What the simulated API server is asked, with the traceparent each request carries.
    requests: list[tuple[str, str, str]] = []
    handle = ApiServer.handle

    async def recording(self: ApiServer, request: web.BaseRequest) -> web.StreamResponse:
        requests.append((request.method, request.path, request.headers.get("traceparent", "")))
        return await handle(self, request)

    monkeypatch.setattr(ApiServer, "handle", recording)
    exporter = InMemorySpanExporter()
    provider = provider_with(SimpleSpanProcessor(exporter), TracingSettings(), "test", env={})
    async with SimCluster.start(topology="blocks=1,racks=1,hosts=2,gpus=8", time_scale=20) as sim:
        settings = settings_for(sim, tmp_path / "kbatchd.db")
        async with embedded(settings, tracing=Tracing(provider)):
            sim.registry.create(JOBS, "default", job("traced", parallelism=2))

            async def done() -> bool:
                return _complete(sim, "traced")

            await eventually(done, what="Job traced Complete")
            uid = (sim.get(JOBS, "default", "traced") or {})["metadata"]["uid"]
    spans = exporter.get_finished_spans()
    ref = "Job/sim-0/default/traced"
    (root,) = [
        s for s in spans if s.name == "workload" and _attributes(s).get("kbatchd.key") == ref
    ]
    assert root.parent is None
    assert _attributes(root)["k8s.job.name"] == "traced"
    assert _attributes(root)["k8s.job.uid"] == uid
    assert _attributes(root)["k8s.namespace.name"] == "default"
    assert root.context.trace_id == workload_trace_id(uid, ref)
    life = [s for s in spans if s.context.trace_id == root.context.trace_id]
    decides = sorted(
        (s for s in life if s.name == "decide"),
        key=lambda s: _attributes(s)["kbatchd.decision.seq"],
    )
    # Every decision about the Job, from creating its pods to its completion, is in its trace,
    # under its root; nothing else is.
    assert [s for s in life if s.name not in ("workload", "decide", "act")] == []
    assert {_attributes(s)["kbatchd.key"] for s in decides} == {ref}
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in decides)
    reasons = [_attributes(s)["kbatchd.decision.reason"] for s in decides]
    assert reasons[0].startswith("CreatePods:")
    assert any(r.startswith("CompletionsReached:") for r in reasons)
    for decide in decides:
        decided = _attributes(decide)
        assert decided["kbatchd.reconciler"] == "job"
        assert decided["k8s.job.name"] == "traced"
        assert decided["k8s.namespace.name"] == "default"
        assert decided["k8s.cluster.name"] == "sim-0"
        acts = _children(spans, decide)
        assert len(acts) == decided["kbatchd.decision.intents"]
        for act in acts:
            acted = _attributes(act)
            assert act.name == "act"
            assert act.context.trace_id == root.context.trace_id
            assert acted["kbatchd.decision.seq"] == decided["kbatchd.decision.seq"]
            assert acted["kbatchd.outcome.ok"] is True
            assert act.status.is_ok
            assert decide.start_time <= act.start_time
    # The first decision creates the pods, each an act with the pod's name.
    creates = [
        a for a in _children(spans, decides[0]) if _attributes(a)["kbatchd.intent.op"] == "create"
    ]
    assert len(creates) == 2
    for act in creates:
        acted = _attributes(act)
        assert acted["http.request.method"] == "POST"
        assert acted["http.response.status_code"] == 201
        assert acted["k8s.pod.name"].startswith("traced-")
    # Links: the first decision to the Job's ADDED change, later ones to their pods' changes;
    # each change is a trace of its own (ingest → append, fold), carrying the event's seq.
    ingests = {s.context.span_id: s for s in spans if s.name == "ingest"}
    woken = [ingests[link.context.span_id] for link in decides[0].links]
    added = [s for s in woken if _attributes(s)["kbatchd.watch.change"] == "ADDED"]
    assert [_attributes(s).get("k8s.job.name") for s in added] == ["traced"]
    assert _attributes(added[0])["k8s.job.uid"] == uid
    assert decides[0].links[woken.index(added[0])].attributes == {
        "kbatchd.event.seq": _attributes(added[0])["kbatchd.event.seq"]
    }
    later = [ingests[link.context.span_id] for d in decides[1:] for link in d.links]
    for decide in decides:
        # A change is seen, appended and folded before the decision it woke.
        assert all(ingests[k.context.span_id].end_time <= decide.start_time for k in decide.links)
    assert any("k8s.pod.name" in _attributes(s) for s in later)
    for ingest in woken + later:
        assert ingest.parent is None
        assert ingest.context.trace_id != root.context.trace_id
        seq = _attributes(ingest)["kbatchd.event.seq"]
        steps = {s.name: s for s in _children(spans, ingest)}
        assert set(steps) == {"append", "fold"}
        assert all(_attributes(step)["kbatchd.event.seq"] == seq for step in steps.values())
    # Every request the actuator made carried its act span's traceparent (W3C: version,
    # trace id, span id, flags); the watches and lists carried none.
    acts = {
        f"00-{a.context.trace_id:032x}-{a.context.span_id:016x}-{a.context.trace_flags:02x}": a
        for a in spans
        if a.name == "act"
    }
    sent = {traceparent: (method, path) for method, path, traceparent in requests if traceparent}
    life_acts = {tp for tp, a in acts.items() if a.context.trace_id == root.context.trace_id}
    assert life_acts <= set(sent)
    assert set(sent) <= set(acts)
    assert all(method != "GET" for method, _ in sent.values())
    pod_creates = [tp for tp in life_acts if acts[tp] in creates]
    assert {sent[tp] for tp in pod_creates} == {("POST", "/api/v1/namespaces/default/pods")}


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
        simulated_cluster_here(tmp_path, "--time-scale", "10") as (
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
            batch = client.BatchV1Api(api)
            await batch.create_namespaced_job(
                "default", job("exported", parallelism=4, completions=8)
            )

            async def acted() -> bool:
                return any(span.name == "act" for _, span in collector.spans())

            async def complete() -> bool:
                status = (await batch.read_namespaced_job("exported", "default")).status
                return any(c.type == "Complete" for c in status.conditions or ())

            await eventually(acted, what="act spans at the receiver")
            await eventually(complete, what="the Job Complete")
            # Traced passes batch pod changes as untraced ones do.
            assert (await scraped(daemon))['kbatchd_keys_held_total{kind="Job"}'] > 0
            daemon.send_signal(signal.SIGTERM)
            assert await daemon.wait(within=15) == 0
    received = collector.spans()
    names = {span.name for _, span in received}
    assert {"workload", "ingest", "append", "fold", "decide", "act"} <= names
    resource = received[0][0]
    assert resource["service.name"] == "kbatchd-test"
    assert resource["service.instance.id"]


def test_a_workloads_trace_is_the_same_in_every_run_and_forgotten_when_it_is_deleted() -> None:
    ref = "Job/c1/ns/train"
    uid = "0b7c6a52-4d1e-4f5e-9a43-5f0c1d2e3f40"

    def run() -> tuple[Tracing, InMemorySpanExporter]:
        exporter = InMemorySpanExporter()
        provider = provider_with(SimpleSpanProcessor(exporter), TracingSettings(), "i", env={})
        return Tracing(provider), exporter

    first, exported = run()
    second, _ = run()
    assert first.tracer is not None
    assert second.tracer is not None
    one = first.life(first.tracer, ref, uid, 1_000, 5_000_000_000)
    assert first.life(first.tracer, ref, uid, 1_000, 6_000_000_000) is one  # one root a run
    other = second.life(second.tracer, ref, uid, 1_000, 7_000_000_000)
    elsewhere = second.life(second.tracer, "Job/c1/ns/other", "", 0, 7_000_000_000)
    trace_id = trace.get_current_span(one).get_span_context().trace_id
    assert trace_id == trace.get_current_span(other).get_span_context().trace_id
    assert trace_id != trace.get_current_span(elsewhere).get_span_context().trace_id
    (root,) = exported.get_finished_spans()
    assert (root.name, root.start_time, root.end_time) == ("workload", 1_000_000_000, 5_000_000_000)
    gone = Job(name="train", namespace="ns", uid=uid)
    batch = first.batch(8_000_000_000)
    assert batch is not None
    deleted = Observed(at=8_000, cluster="c1", change="DELETED", obj=gone)
    batch.event(9, deleted, (0, 0), (0, 0), set())
    assert ref not in first.lives
