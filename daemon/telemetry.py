"""Traces of each event's journey: ingest → append → fold → decide → act.

One trace per observed change: a root ``ingest`` span (from the watch seeing the change to
the pump receiving it), ``append`` and ``fold`` children carrying the event's seq, a
``decide`` child per decision the change led to (reconciler, reason, the decision's seq),
and under it one ``act`` span per intent carried out. Spans carry the Kubernetes semantic
convention attributes of the object concerned.

Spans are exported over OTLP/HTTP when an endpoint is configured (``[tracing] endpoint`` or
``OTEL_EXPORTER_OTLP_ENDPOINT``); otherwise there is no provider at all and the pump skips
every tracing step, so an untraced daemon pays nothing. The exporter is an optional extra,
imported only when needed.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from typing import Any, Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import SpanKind, Tracer

from daemon.config import ConfigError
from daemon.config import Tracing as TracingSettings
from daemon.provenance import kbatchd_version
from events.intents import Intent
from events.schema import Decided, Event, Observed

# Semantic-convention names (opentelemetry.semconv k8s attributes, stable since 0.66).
_NAME_ATTRIBUTE: Final = {
    "Pod": "k8s.pod.name",
    "Job": "k8s.job.name",
    "Node": "k8s.node.name",
}
_UID_ATTRIBUTE: Final = {"Pod": "k8s.pod.uid", "Job": "k8s.job.uid", "Node": "k8s.node.uid"}
_METHOD: Final = {"create": "POST", "patch": "PATCH", "delete": "DELETE", "bind": "POST"}


class TelemetryError(ConfigError):
    """Tracing asked for but impossible (the exporter is not installed, say)."""


def resource(settings: TracingSettings, instance: str, env: Mapping[str, str]) -> Resource:
    attributes: dict[str, str] = {
        "service.version": kbatchd_version(),
        "service.instance.id": instance,
        "host.name": socket.gethostname(),
    }
    # Attributes given here outrank the environment's, so the configured name is only set
    # when OTEL_SERVICE_NAME is not (the environment overrides the file).
    if not env.get("OTEL_SERVICE_NAME"):
        attributes["service.name"] = settings.service_name
    return Resource.create(attributes)


def tracer_provider(
    settings: TracingSettings, instance: str, env: Mapping[str, str] | None = None
) -> TracerProvider | None:
    """A provider exporting over OTLP/HTTP, or None when nothing is to be exported."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").lower() == "true":
        return None
    from_env = env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    if not (from_env or settings.endpoint):
        return None
    protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    if protocol != "http/protobuf":
        raise TelemetryError(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: kbatchd exports over http/protobuf only"
        )
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        raise TelemetryError(
            "tracing is configured but the OTLP exporter is not installed: "
            "pip install 'kbatchd[otlp]'"
        ) from None
    # The exporter reads the OTEL_EXPORTER_OTLP_* variables itself (endpoint, headers,
    # timeout, certificates); the configured endpoint is only a fallback for them.
    exporter = (
        OTLPSpanExporter()
        if from_env
        else OTLPSpanExporter(endpoint=settings.endpoint.rstrip("/") + "/v1/traces")
    )
    return provider_with(BatchSpanProcessor(exporter), settings, instance, env)


def provider_with(
    processor: SpanProcessor,
    settings: TracingSettings,
    instance: str,
    env: Mapping[str, str] | None = None,
) -> TracerProvider:
    env = os.environ if env is None else env
    # The sampler decides per journey (the root); every span below follows its root.
    sampler = (
        None
        if env.get("OTEL_TRACES_SAMPLER")
        else ParentBased(TraceIdRatioBased(settings.sample_ratio))
    )
    provider = TracerProvider(
        sampler=sampler, resource=resource(settings, instance, env), shutdown_on_exit=False
    )
    provider.add_span_processor(processor)
    return provider


class Tracing:
    """The tracer the daemon uses, or none: `enabled` guards every tracing step."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self.provider = provider
        self.tracer: Tracer | None = (
            provider.get_tracer("kbatchd", kbatchd_version()) if provider else None
        )

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def batch(self, received_ns: int) -> BatchTrace | None:
        return BatchTrace(self.tracer, received_ns) if self.tracer is not None else None

    def shutdown(self) -> None:
        """Export what is buffered (bounded by OTEL_BSP_EXPORT_TIMEOUT) and stop."""
        if self.provider is not None:
            self.provider.shutdown()


def object_attributes(kind: str, cluster: str, namespace: str, name: str) -> dict[str, Any]:
    attributes: dict[str, Any] = {
        "k8s.cluster.name": cluster,
        "kbatchd.object.kind": kind,
        "kbatchd.object.name": name,
    }
    if namespace:
        attributes["k8s.namespace.name"] = namespace
    semantic = _NAME_ATTRIBUTE.get(kind)
    if semantic is not None:
        attributes[semantic] = name
    return attributes


def ref_attributes(ref: str) -> dict[str, Any]:
    """Attributes of an object named by its ref, ``Kind/cluster/namespace/name``."""
    parts = ref.split("/", 3)
    if len(parts) != 4:
        return {"kbatchd.key": ref}
    return {**object_attributes(*parts), "kbatchd.key": ref}


def intent_attributes(intent: Intent) -> dict[str, Any]:
    op = type(intent).__name__.lower()
    attributes = object_attributes(intent.kind, intent.cluster, intent.namespace, intent.name)
    attributes["kbatchd.intent.op"] = op
    attributes["http.request.method"] = _METHOD.get(op, "")
    return attributes


class BatchTrace:
    """The spans of one batch through the pump. Only built when tracing is on."""

    def __init__(self, tracer: Tracer, received_ns: int) -> None:
        self.tracer = tracer
        self.received_ns = received_ns
        # dirty key -> the journey (ingest span context) that last made it dirty
        self.causes: dict[str, tuple[Context, int]] = {}

    def event(
        self,
        seq: int,
        event: Event,
        appended: tuple[int, int],
        folded: tuple[int, int],
        dirty: set[str],
    ) -> None:
        """The ingest, append and fold spans of one observed change."""
        if not isinstance(event, Observed):
            return
        attributes = object_attributes(event.kind, event.cluster, event.namespace, event.name)
        uid_attribute = _UID_ATTRIBUTE.get(event.kind)
        if uid_attribute is not None and event.uid:
            attributes[uid_attribute] = event.uid
        attributes["kbatchd.event.seq"] = seq
        attributes["kbatchd.watch.change"] = event.change
        attributes["kbatchd.object.resource_version"] = event.resource_version
        # A change's journey starts when the watch delivered it (the event's `at`).
        start = min(event.at * 1_000_000, self.received_ns)
        root = self.tracer.start_span(
            "ingest", kind=SpanKind.CONSUMER, attributes=attributes, start_time=start
        )
        root.end(end_time=self.received_ns)
        if not root.get_span_context().trace_flags.sampled:
            return
        context = trace.set_span_in_context(root)
        step = {"kbatchd.event.seq": seq}
        for name, (begin, end) in (("append", appended), ("fold", folded)):
            span = self.tracer.start_span(name, context, attributes=step, start_time=begin)
            span.end(end_time=end)
        for key in dirty:
            self.causes[key] = (context, seq)

    def decided(self, seq: int, event: Decided, began: int, ended: int) -> Context | None:
        """The decide span (a child of the change that led to it, else a journey of its own:
        a timer or an earlier outcome); its context parents the act spans."""
        cause = self.causes.get(event.key)
        attributes = ref_attributes(event.key)
        attributes.update(
            {
                "kbatchd.reconciler": event.reconciler,
                "kbatchd.decision.reason": event.reason,
                "kbatchd.decision.seq": seq,
                "kbatchd.decision.intents": len(event.intents),
            }
        )
        if cause is not None:
            attributes["kbatchd.event.seq"] = cause[1]
        span = self.tracer.start_span(
            "decide", cause[0] if cause else None, attributes=attributes, start_time=began
        )
        span.end(end_time=ended)
        if not span.get_span_context().trace_flags.sampled:
            return None
        return trace.set_span_in_context(span)


def now_ns() -> int:
    return time.time_ns()
