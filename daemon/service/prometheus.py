"""OpenTelemetry SDK metrics rendered in the Prometheus text exposition format (0.0.4).

The translation follows the OpenTelemetry → Prometheus compatibility rules: dots become
underscores, the unit becomes a suffix (``s`` → ``_seconds``; annotations such as
``{event}`` are dropped), monotonic sums are counters ending in ``_total``, non-monotonic
sums and gauges are gauges, explicit-bucket histograms get cumulative ``_bucket{le=…}``
series plus ``_sum`` and ``_count``. A few dozen lines instead of a dependency on
prometheus_client.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from opentelemetry.sdk.metrics.export import (
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    Sum,
)

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

_UNITS: Final = {
    "s": "seconds",
    "ms": "milliseconds",
    "By": "bytes",
    "%": "percent",
}
_INVALID: Final = re.compile(r"[^a-zA-Z0-9_:]")


def metric_name(metric: Metric) -> str:
    name = _INVALID.sub("_", metric.name)
    unit = metric.unit or ""
    unit = "" if unit.startswith("{") or unit == "1" else unit
    suffix = _UNITS.get(unit, _INVALID.sub("_", unit))
    if suffix and not name.endswith(f"_{suffix}"):
        name = f"{name}_{suffix}"
    if isinstance(metric.data, Sum) and metric.data.is_monotonic and not name.endswith("_total"):
        name = f"{name}_total"
    return name


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(attributes: Mapping[str, Any] | None, extra: tuple[str, str] | None = None) -> str:
    pairs = [(_INVALID.sub("_", k), str(v)) for k, v in sorted((attributes or {}).items())]
    if extra is not None:
        pairs.append(extra)
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in pairs) + "}"


def _number(value: float) -> str:
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if math.isnan(value):
        return "NaN"
    return repr(float(value)) if isinstance(value, float) else str(value)


def _histogram(name: str, point: HistogramDataPoint) -> Iterable[str]:
    cumulative = 0
    for bound, count in zip(point.explicit_bounds, point.bucket_counts, strict=False):
        cumulative += count
        le = _number(float(bound))
        yield f"{name}_bucket{_labels(point.attributes, ('le', le))} {cumulative}"
    yield f"{name}_bucket{_labels(point.attributes, ('le', '+Inf'))} {point.count}"
    yield f"{name}_sum{_labels(point.attributes)} {_number(point.sum)}"
    yield f"{name}_count{_labels(point.attributes)} {point.count}"


def render(data: MetricsData | None, zeros: Iterable[Metric] = ()) -> str:
    """Every metric of every scope, one HELP and TYPE header each. `zeros` are histograms
    whose series are shown (at 0) where `data` has none of that name and labels yet."""
    lines: list[str] = []
    empty = {metric.name: metric for metric in zeros}
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                seeded = empty.pop(metric.name, None)
                lines.extend(_metric(metric if seeded is None else _merged(metric, seeded)))
    for metric in empty.values():
        lines.extend(_metric(metric))
    return "\n".join(lines) + "\n" if lines else ""


def _merged(metric: Metric, zeros: Metric) -> Metric:
    """`metric` with the points of `zeros` whose labels it has no point for."""
    if not isinstance(metric.data, Histogram) or not isinstance(zeros.data, Histogram):
        return metric
    seen = {frozenset((point.attributes or {}).items()) for point in metric.data.data_points}
    missing = [
        point
        for point in zeros.data.data_points
        if frozenset((point.attributes or {}).items()) not in seen
    ]
    if not missing:
        return metric
    points = [*metric.data.data_points, *missing]
    data = Histogram(points, metric.data.aggregation_temporality)
    return Metric(metric.name, metric.description, metric.unit, data)


def _metric(metric: Metric) -> list[str]:
    name = metric.name and metric_name(metric)
    points: Any = metric.data.data_points
    if isinstance(metric.data, Histogram):
        kind = "histogram"
    elif isinstance(metric.data, Sum) and metric.data.is_monotonic:
        kind = "counter"
    elif isinstance(metric.data, Sum | Gauge):
        kind = "gauge"
    else:  # exponential histograms have no text form; kbatchd creates none
        return []
    lines = [f"# HELP {name} {_escape(metric.description or '')}", f"# TYPE {name} {kind}"]
    for point in points:
        if isinstance(point, HistogramDataPoint):
            lines.extend(_histogram(name, point))
        elif isinstance(point, NumberDataPoint):
            lines.append(f"{name}{_labels(point.attributes)} {_number(point.value)}")
    return lines
