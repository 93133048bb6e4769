"""Traces: one per workload life, and one per observed change.

**A workload's life** (a Job, JobSet, PodGroup or Workload) is one trace, whose id is derived
from the object's uid (its key where the uid is unknown), so that every decision about it, in
this run of the daemon or a later one, joins the same trace. In each run the first decision
about a workload starts a ``workload`` root span (from the object's creation to that
decision); under it, a ``decide`` span per decision (reconciler, reason, the decision's seq)
and under each, one ``act`` span per intent carried out, whose API request carries the W3C
``traceparent`` of its span. Every span carries the Kubernetes semantic-convention
attributes of its object (``k8s.namespace.name``, ``k8s.job.name``, ``k8s.pod.name``, …).

**An observed change** is a short trace of its own: an ``ingest`` root (from the watch seeing
the change to the pump receiving it) with ``append`` and ``fold`` children carrying the
event's seq. A ``decide`` span links to the ingest span of every change that woke it (made
its key dirty in the pass): a decision's causes are found from the decision, and a change's
effects from its links.

Spans are exported over OTLP/HTTP when an endpoint is configured (``[tracing] endpoint`` or
``OTEL_EXPORTER_OTLP_ENDPOINT``); otherwise there is no provider at all and the pump skips
every tracing step, so an untraced daemon pays nothing. The exporter is an optional extra,
imported only when needed. A sampled ratio keeps or drops whole workload lives (the sampler
sees the derived trace id) and, apart, whole changes.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Mapping
from typing import Final

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
from opentelemetry.trace import Link, SpanKind, Tracer

from daemon.kube.spans import object_attributes, ref_attributes
from daemon.service.config import ConfigError
from daemon.service.config import Tracing as TracingSettings
from daemon.service.provenance import kbatchd_version
from events.schema import Decided, Event, Observed

_UID_ATTRIBUTE: Final = {"Pod": "k8s.pod.uid", "Job": "k8s.job.uid", "Node": "k8s.node.uid"}
# The kinds whose life is a trace: what the reconcilers decide about.
WORKLOAD_KINDS: Final = frozenset({"Job", "JobSet", "PodGroup", "Workload"})
# Links a decide span keeps to the changes that woke it: a Job's hundred pods changing in one
# pass are not a hundred links (the count is an attribute).
MAX_LINKS: Final = 16


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
        sampler=sampler,
        resource=resource(settings, instance, env),
        shutdown_on_exit=False,
        id_generator=WorkloadIds(),
    )
    provider.add_span_processor(processor)
    return provider


class WorkloadIds(RandomIdGenerator):
    """Random ids, but for the trace id of a workload's root span: the pump sets `pending`
    and starts that span at once (no await between), and the span takes it."""

    def __init__(self) -> None:
        self.pending = 0

    def generate_trace_id(self) -> int:
        trace_id, self.pending = self.pending, 0
        return trace_id or super().generate_trace_id()


def workload_trace_id(uid: str, key: str) -> int:
    """A workload's trace id: 128 bits of a digest of its uid (or of its key), so that every
    run of the daemon, on any host, puts its decisions in the same trace."""
    digest = hashlib.blake2b((uid or key).encode(), digest_size=16).digest()
    return int.from_bytes(digest) or 1


class Tracing:
    """The tracer the daemon uses, or none: `enabled` guards every tracing step."""

    def __init__(self, provider: TracerProvider | None = None) -> None:
        self.provider = provider
        self.tracer: Tracer | None = (
            provider.get_tracer("kbatchd", kbatchd_version()) if provider else None
        )
        ids = provider.id_generator if provider is not None else None
        self.ids = ids if isinstance(ids, WorkloadIds) else None
        # Workload key -> the context of its root span in this run, until it is deleted.
        self.lives: dict[str, Context] = {}

    @property
    def enabled(self) -> bool:
        return self.tracer is not None

    def batch(self, received_ns: int) -> BatchTrace | None:
        return BatchTrace(self, self.tracer, received_ns) if self.tracer is not None else None

    def life(self, tracer: Tracer, key: str, uid: str, created_ms: int, now: int) -> Context:
        """The context of the workload's root span in this run, started now if need be."""
        context = self.lives.get(key)
        if context is not None:
            return context
        attributes = ref_attributes(key)
        kind = key.split("/", 1)[0]
        uid_attribute = _UID_ATTRIBUTE.get(kind)
        if uid_attribute is not None and uid:
            attributes[uid_attribute] = uid
        if self.ids is not None:
            self.ids.pending = workload_trace_id(uid, key)
        start = min(created_ms * 1_000_000, now) if created_ms else now
        # An empty context: the root of its own trace, whatever span may be current.
        root = tracer.start_span("workload", Context(), attributes=attributes, start_time=start)
        root.end(end_time=now)
        context = trace.set_span_in_context(root)
        self.lives[key] = context
        return context

    def shutdown(self) -> None:
        """Export what is buffered (bounded by OTEL_BSP_EXPORT_TIMEOUT) and stop."""
        if self.provider is not None:
            self.provider.shutdown()


class BatchTrace:
    """The spans of one batch through the pump. Only built when tracing is on."""

    def __init__(self, tracing: Tracing, tracer: Tracer, received_ns: int) -> None:
        self.tracing = tracing
        self.tracer = tracer
        self.received_ns = received_ns
        # dirty key -> the ingest spans of the changes that made it dirty in this batch (at
        # most MAX_LINKS), with their seqs, and how many there were
        self.causes: dict[str, tuple[list[Link], int]] = {}

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
        if event.change == "DELETED" and event.kind in WORKLOAD_KINDS:
            self.tracing.lives.pop(event.ref, None)
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
            "ingest", Context(), SpanKind.CONSUMER, attributes, start_time=start
        )
        root.end(end_time=self.received_ns)
        span_context = root.get_span_context()
        if not span_context.trace_flags.sampled:
            return
        context = trace.set_span_in_context(root)
        step = {"kbatchd.event.seq": seq}
        for name, (begin, end) in (("append", appended), ("fold", folded)):
            span = self.tracer.start_span(name, context, attributes=step, start_time=begin)
            span.end(end_time=end)
        for key in dirty:
            links, count = self.causes.get(key) or ([], 0)
            if count < MAX_LINKS:
                links.append(Link(span_context, step))
            self.causes[key] = (links, count + 1)

    def decided(
        self,
        seq: int,
        event: Decided,
        began: int,
        ended: int,
        uid: str = "",
        created_ms: int = 0,
    ) -> Context | None:
        """The decide span, in the trace of its workload's life (`uid` and `created_ms` are
        the object's, when the state has it), linked to the changes that woke it; its context
        parents the act spans."""
        life = self.tracing.life(self.tracer, event.key, uid, created_ms, began)
        links, count = self.causes.get(event.key) or ([], 0)
        attributes = ref_attributes(event.key)
        attributes.update(
            {
                "kbatchd.reconciler": event.reconciler,
                "kbatchd.decision.reason": event.reason,
                "kbatchd.decision.seq": seq,
                "kbatchd.decision.intents": len(event.intents),
                "kbatchd.decision.woken_by": count,
            }
        )
        span = self.tracer.start_span(
            "decide", life, attributes=attributes, links=links, start_time=began
        )
        span.end(end_time=ended)
        if not span.get_span_context().trace_flags.sampled:
            return None
        return trace.set_span_in_context(span)


def now_ns() -> int:
    return time.time_ns()
