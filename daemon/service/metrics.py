"""The daemon's OpenTelemetry metrics, read on demand for the Prometheus endpoint.

A private MeterProvider with an in-memory reader (cumulative): `/metrics` collects and
renders it; nothing is pushed anywhere. Recording is an attribute lookup and an add, cheap
enough for the pump, which records once per batch, not per event.

Every counter and histogram has its series from the start, at 0, for each label set that can
be known then (`Metrics.seed`: every event type, reconciler, cluster and error source, and
the reason and error codes alerts are written on), so that an alert or a rate over the first
increment has a series to read. Beside them, ``kbatchd_build_info`` and the ``process_*``
metrics every Prometheus client library exposes.
"""

from __future__ import annotations

import math
import platform
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Final, get_args

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.metrics import Counter as OtelCounter
from opentelemetry.sdk.metrics import AlwaysOffExemplarFilter, MeterProvider
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    InMemoryMetricReader,
    Metric,
)
from opentelemetry.sdk.resources import Resource

from daemon.controllers.gang.spec import (
    LEADER_LOST,
    READY_TIMEOUT,
    SCHEDULED,
    GangSpecError,
    group_spec,
)
from daemon.service import process, prometheus
from daemon.service.provenance import kbatchd_version, rules_digest
from events.intents import Patch
from events.objects import PodGroup
from events.reasons import categorize, heads
from events.schema import Decided, Event
from events.state import State

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
# Seconds a gang waits to be admitted: from an instant to a day.
_WAIT_BUCKETS: Final = (
    0.1,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
    1800.0,
    3600.0,
    7200.0,
    21600.0,
    86400.0,
)

# The label values `Metrics.seed` gives a series each from the start. Every event type and
# every source of API errors; of the open-ended labels, the values alerts are written on: the
# error codes the actuator retries (and a broken connection), and for each reconciler the
# reason codes of its decisions that start, finish, fail, admit or evict a workload. Other
# values get their series when first counted.
EVENT_TYPES: Final = tuple(t.__name__ for t in get_args(Event))
ERROR_SOURCES: Final = ("ingest", "discovery", "actuator", "probe", "leader")
SEEDED_CODES: Final = ("connection", "429", "500", "502", "503", "504")
SEEDED_REASONS: Final = {
    "job": (
        "CreatePods",
        "CompletionsReached",
        "SuccessPolicy",
        "BackoffLimitExceeded",
        "DeadlineExceeded",
        "PodFailurePolicy",
        "FailedIndexes",
        "MaxFailedIndexesExceeded",
    ),
    "jobset": ("CreateJobs", "Completed", "FailedJobs", "FailJobSetFailurePolicyAction"),
    "gang": (
        "Admitted",
        "Unschedulable",
        "NotEnoughMembers",
        "TopologyPlacementFailed",
        "PodsReadyTimeout",
        "LeaderLost",
    ),
}

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
        self.reconcile_latency = meter.create_histogram(
            "kbatchd.reconcile.latency",
            "s",
            "From the oldest watch event of a pass to the pass's decisions being logged and "
            "handed to the actuator, once per reconciler that decided",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.act_duration = meter.create_histogram(
            "kbatchd.act.duration",
            "s",
            "Carrying out one intent against the API, retries included",
            explicit_bucket_boundaries_advisory=_LATENCY_BUCKETS,
        )
        self.admission_wait = meter.create_histogram(
            "kbatchd.admission.wait",
            "s",
            "From a PodGroup's creation (or its last eviction) to the decision admitting it",
            explicit_bucket_boundaries_advisory=_WAIT_BUCKETS,
        )
        self.decisions = meter.create_counter(
            "kbatchd.decisions", "{decision}", "Decisions logged, by reconciler and reason code"
        )
        self.keys_decided = meter.create_counter(
            "kbatchd.keys.decided",
            "{key}",
            "Keys run through the reconcilers, by kind: the work each pass does",
        )
        self.keys_held = meter.create_counter(
            "kbatchd.keys.held",
            "{key}",
            "Keys marked by their pods' changes and put off to the end of their batch window "
            "([reconcilers.job] sync_batch_seconds), by kind",
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
        # Histogram series to render at 0 until their first record: the SDK has no point for
        # a histogram never recorded (a counter's is made by adding 0).
        self._empty: dict[str, tuple[Metric, list[Mapping[str, str]]]] = {}
        self._process()

    def _process(self) -> None:
        """``kbatchd_build_info`` and the ``process_*`` readings, read at each collection."""
        build = {
            "version": kbatchd_version(),
            "rules": rules_digest(),
            "python_version": platform.python_version(),
        }
        self.gauge(
            "kbatchd.build_info",
            "1, labelled with the kbatchd version, the digest of its decision rules and the "
            "Python version",
            lambda: [(1.0, build)],
        )
        self.gauge(
            "process.start_time",
            "Start time of the process since unix epoch in seconds",
            lambda: _one(process.start_time_seconds()),
            unit="s",
        )
        self.gauge(
            "process.resident_memory",
            "Resident memory size in bytes",
            lambda: _one((process.memory_bytes() or (None, None))[0]),
            unit="By",
        )
        self.gauge(
            "process.virtual_memory",
            "Virtual memory size in bytes",
            lambda: _one((process.memory_bytes() or (None, None))[1]),
            unit="By",
        )
        self.gauge(
            "process.virtual_memory_max",
            "Maximum amount of virtual memory available in bytes",
            lambda: _one(process.max_virtual_memory_bytes()),
            unit="By",
        )
        self.gauge(
            "process.open_fds",
            "Number of open file descriptors",
            lambda: _one(process.open_fds()),
            unit="{fd}",
        )
        self.gauge(
            "process.max_fds",
            "Maximum number of open file descriptors",
            lambda: _one(process.max_fds()),
            unit="{fd}",
        )

        def cpu(_: CallbackOptions) -> Iterable[Observation]:
            return [Observation(process.cpu_seconds())]

        self.provider.get_meter("kbatchd").create_observable_counter(
            "process.cpu.seconds", [cpu], "s", "Total user and system CPU time spent in seconds"
        )

    def observed_counter(
        self, name: str, description: str, readings: Readings, unit: str = "1"
    ) -> None:
        """A count kept elsewhere (the Event recorder's), read when metrics are collected."""
        self.provider.get_meter("kbatchd").create_observable_counter(
            name, [_observing(readings)], unit, description
        )

    def gauge(self, name: str, description: str, readings: Readings, unit: str = "1") -> None:
        """A value read when metrics are collected (queue depths, leadership)."""
        self.provider.get_meter("kbatchd").create_observable_gauge(
            name, [_observing(readings)], unit, description
        )

    def seed(
        self, reconcilers: Iterable[str], clusters: Iterable[str], kinds: Iterable[str] = ()
    ) -> None:
        """A series at 0 for every label set known at the start (see the module's doc);
        `kinds`: the kinds of keys the reconcilers decide."""
        reconcilers, clusters = list(reconcilers), list(clusters)
        for kind in kinds:
            self.keys_decided.add(0, {"kind": kind})
            self.keys_held.add(0, {"kind": kind})
        for name in EVENT_TYPES:
            self.events_appended.add(0, {"type": name})
        for reconciler in reconcilers:
            self.admissions.add(0, {"reconciler": reconciler})
            self.preemptions.add(0, {"reconciler": reconciler})
            for code in SEEDED_REASONS.get(reconciler, ()):
                self.decisions.add(0, {"reconciler": reconciler, "reason": code})
        for cluster in clusters:
            for source in ERROR_SOURCES:
                for code in SEEDED_CODES:
                    self.api_errors.add(0, {"cluster": cluster, "source": source, "code": code})
        plain: list[Mapping[str, str]] = [{}]
        self._empty_histogram("kbatchd.fold.lag", _LATENCY_BUCKETS, plain)
        self._empty_histogram("kbatchd.reconcile.duration", _LATENCY_BUCKETS, plain)
        self._empty_histogram("kbatchd.act.duration", _LATENCY_BUCKETS, plain)
        self._empty_histogram(
            "kbatchd.reconcile.latency",
            _LATENCY_BUCKETS,
            [{"reconciler": reconciler} for reconciler in reconcilers],
        )
        self._empty_histogram(
            "kbatchd.admission.wait", _WAIT_BUCKETS, [{"cluster": c} for c in clusters]
        )

    def _empty_histogram(
        self, name: str, bounds: tuple[float, ...], label_sets: list[Mapping[str, str]]
    ) -> None:
        instrument = getattr(self, name.removeprefix("kbatchd.").replace(".", "_"))
        now = time.time_ns()
        points = [
            HistogramDataPoint(
                attributes=labels,
                start_time_unix_nano=now,
                time_unix_nano=now,
                count=0,
                sum=0,
                bucket_counts=[0] * (len(bounds) + 1),
                explicit_bounds=bounds,
                min=math.inf,
                max=-math.inf,
            )
            for labels in label_sets
        ]
        data = Histogram(points, AggregationTemporality.CUMULATIVE)
        metric = Metric(name, instrument.description, instrument.unit, data)
        self._empty[name] = (metric, label_sets)

    @staticmethod
    def count_keys(counter: OtelCounter, keys: Iterable[str]) -> None:
        """Add `keys` to `counter`, by kind (the part of a ref before its first ``/``)."""
        for kind, count in Counter(key.partition("/")[0] for key in keys).items():
            counter.add(count, {"kind": kind})

    def decided(
        self,
        events: Iterable[Decided],
        state: State | None = None,
        *,
        woken_at: int = 0,
        logged_at: int = 0,
    ) -> None:
        """Counted by the reason's category, as `kbatchd replay --explain` tells them: one
        add per distinct label set of the batch (an add hashes its attributes, and a pass of
        the gang reconciler logs dozens of decisions with the same few). With the `state` the
        decisions were made on, an admission's wait is recorded; with the oldest watch event
        of the pass (`woken_at`, ms) and when its decisions were logged, the reconcile
        latency of each reconciler that decided."""
        decisions: Counter[tuple[str, str]] = Counter()
        admissions: Counter[str] = Counter()
        preemptions: Counter[str] = Counter()
        for event in events:
            decisions[event.reconciler, reason_code(event.reason)] += 1
            category = categorize(event.reason)
            if category == "admitted":
                admissions[event.reconciler] += 1
                if state is not None:
                    for cluster, seconds in admission_waits(state, event):
                        self.admission_wait.record(seconds, {"cluster": cluster})
            elif category == "preempted":
                preemptions[event.reconciler] += 1
        for (reconciler, code), count in decisions.items():
            self.decisions.add(count, {"reconciler": reconciler, "reason": code})
        for reconciler, count in admissions.items():
            self.admissions.add(count, {"reconciler": reconciler})
        for reconciler, count in preemptions.items():
            self.preemptions.add(count, {"reconciler": reconciler})
        if woken_at and logged_at:
            latency = max(0.0, (logged_at - woken_at) / 1000)
            for reconciler in {reconciler for reconciler, _ in decisions}:
                self.reconcile_latency.record(latency, {"reconciler": reconciler})

    def api_error(self, cluster: str, source: str, code: int | str) -> None:
        self.api_errors.add(1, {"cluster": cluster, "source": source, "code": str(code)})

    def render(self) -> str:
        return prometheus.render(self.reader.get_metrics_data(), self._zeros())

    def _zeros(self) -> list[Metric]:
        return [metric for metric, _ in self._empty.values()]

    def shutdown(self) -> None:
        self.provider.shutdown()


def _one(value: float | None) -> list[tuple[float, Mapping[str, str]]]:
    """A reading with no labels, or none when it cannot be made."""
    return [] if value is None else [(value, {})]


def admission_waits(state: State, event: Decided) -> list[tuple[str, float]]:
    """(cluster, seconds) for each PodGroup the decision admits (writes
    ``PodGroupScheduled=True`` on): from the group's creation, or, for a group admitted again
    after an eviction (a ready timeout, a lost leader), from that eviction, to the decision."""
    waits: list[tuple[str, float]] = []
    for intent in event.intents:
        if not (
            isinstance(intent, Patch)
            and intent.kind == "PodGroup"
            and intent.subresource == "status"
            and _schedules(intent.patch)
        ):
            continue
        group = state.table("PodGroup").get(f"{intent.cluster}/{intent.namespace}/{intent.name}")
        if not isinstance(group, PodGroup):
            continue
        waited = event.at - _waiting_since(intent.cluster, group)
        waits.append((intent.cluster, max(0.0, waited / 1000)))
    return waits


def _schedules(patch: object) -> bool:
    status = patch.get("status") if isinstance(patch, dict) else None
    conditions = status.get("conditions") if isinstance(status, dict) else None
    return any(
        isinstance(c, dict) and c.get("type") == SCHEDULED and c.get("status") == "True"
        for c in conditions or ()
    )


def _waiting_since(cluster: str, group: PodGroup) -> int:
    try:
        spec = group_spec(cluster, group)
    except GangSpecError:
        return group.created
    scheduled = spec.scheduled
    evicted = spec.evictions > 0 or spec.reason_is(READY_TIMEOUT, LEADER_LOST)
    if scheduled is not None and not scheduled.true and evicted and scheduled.since:
        return max(group.created, scheduled.since)
    return group.created


def _observing(readings: Readings) -> Callable[[CallbackOptions], Iterable[Observation]]:
    """The SDK's callback for an observable instrument: `readings` as observations."""

    def observe(_: CallbackOptions) -> Iterable[Observation]:
        return [Observation(value, dict(attributes)) for value, attributes in readings()]

    return observe
