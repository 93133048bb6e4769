"""What a span about a Kubernetes object carries: its semantic-convention attributes, and the
W3C trace context a request sends so that the API server's own spans join the trace."""

from __future__ import annotations

from typing import Any, Final

from opentelemetry import trace
from opentelemetry.trace import Span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from events.intents import Intent

# Semantic-convention names (opentelemetry.semconv k8s attributes, stable since 0.66).
_NAME_ATTRIBUTE: Final = {
    "Pod": "k8s.pod.name",
    "Job": "k8s.job.name",
    "Node": "k8s.node.name",
}
_METHOD: Final = {"create": "POST", "patch": "PATCH", "delete": "DELETE", "bind": "POST"}
_PROPAGATOR: Final = TraceContextTextMapPropagator()


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


def trace_headers(span: Span) -> dict[str, str]:
    """The W3C ``traceparent`` (and ``tracestate``) naming `span`, for a request it makes."""
    headers: dict[str, str] = {}
    _PROPAGATOR.inject(headers, trace.set_span_in_context(span))
    return headers
