"""The daemon's OpenTelemetry metrics, read on demand for the Prometheus endpoint.

A private MeterProvider with an in-memory reader (cumulative): `/metrics` collects and
renders it; nothing is pushed anywhere. Recording is an attribute lookup and an add, cheap
enough for the pump, which records once per batch, not per event.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource

from daemon import prometheus
from events.reasons import categorize, heads
from events.schema import Decided

# Seconds: from a millisecond API call to a minute-long stall.
_LATENCY_BUCKETS: Final = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
)

Readings = Callable[[], Iterable[tuple[float, Mapping[str, str]]]]


def reason_code(reason: str) -> str:
    """The machine-readable head of a decision's reason (``BackoffLimitExceeded: …`` →
    ``BackoffLimitExceeded``): a bounded set, fit for a metric label."""
    found = heads(reason)
    return found[0] if found else "unknown"


class Metrics:
    def __init__(self, resource: Resource | None = None) -> None:
        self.reader = InMemoryMetricReader()
        self.provider = MeterProvider(
            metric_readers=[self.reader],
            resource=resource or Resource.create({"service.name": "kbatchd"}),
            # Shut down with the daemon, not at interpreter exit (tests run many).
            shutdown_on_exit=False,
            # Exemplars are never rendered; the default filter looked up the current span for
            # every recorded value (a few µs of each API call's act-duration record).
            exemplar_filter=AlwaysOffExemplarFilter(),
        )
        meter = self.provider.get_meter("kbatchd")
        self.events_appended = meter.create_counter(
            "kbatchd.events.appended", "{event}", "Events appended to the log, by type"
        )
        self.fold_lag = meter.create_histogram(
            "kbatchd.fold.lag",
            "s",
            "From an API change being seen to its event being folded (oldest of each batch)",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.reconcile_duration = meter.create_histogram(
            "kbatchd.reconcile.duration",
            "s",
            "Running the reconcilers over one batch's dirty keys",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.act_duration = meter.create_histogram(
            "kbatchd.act.duration",
            "s",
            "Carrying out one intent against the API, retries included",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.decisions = meter.create_counter(
            "kbatchd.decisions", "{decision}", "Decisions logged, by reconciler and reason code"
        )
        self.admissions = meter.create_counter(
            "kbatchd.admissions", "{decision}", "Decisions that admitted a group (Admit*)"
        )
        self.preemptions = meter.create_counter(
            "kbatchd.preemptions", "{decision}", "Decisions that preempted (Preempt*)"
        )
        self.api_errors = meter.create_counter(
            "kbatchd.api.errors",
            "{response}",
            "Failed API calls (error answers and broken connections), by cluster, source, code",
        )

    def gauge(self, name: str, description: str, readings: Readings, unit: str = "1") -> None:
        """A value read when metrics are collected (queue depths, leadership)."""

        def observe(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(value, dict(attributes)) for value, attributes in readings()]

        self.provider.get_meter("kbatchd").create_observable_gauge(
            name, [observe], unit, description
        )

    def decided(self, events: Iterable[Decided]) -> None:
        """Counted by the reason's category, as `kbatchd replay --explain` tells them: one
        add per distinct label set of the batch (an add hashes its attributes, and a pass of
        the gang reconciler logs dozens of decisions with the same few)."""
        decisions: Counter[tuple[str, str]] = Counter()
        admissions: Counter[str] = Counter()
        preemptions: Counter[str] = Counter()
        for event in events:
            decisions[event.reconciler, reason_code(event.reason)] += 1
            category = categorize(event.reason)
            if category == "admitted":
                admissions[event.reconciler] += 1
            elif category == "preempted":
                preemptions[event.reconciler] += 1
        for (reconciler, code), count in decisions.items():
            self.decisions.add(count, {"reconciler": reconciler, "reason": code})
        for reconciler, count in admissions.items():
            self.admissions.add(count, {"reconciler": reconciler})
        for reconciler, count in preemptions.items():
            self.preemptions.add(count, {"reconciler": reconciler})

    def api_error(self, cluster: str, source: str, code: int | str) -> None:
        self.api_errors.add(1, {"cluster": cluster, "source": source, "code": str(code)})

    def render(self) -> str:
        return prometheus.render(self.reader.get_metrics_data())

    def shutdown(self) -> None:
        self.provider.shutdown()
