"""The daemon's metrics before anything happens (every series at 0, the build and process
readings) and the two waits it measures: an admission's, from its PodGroup's creation or last
eviction, and a decision's, from the watch event that woke its pass."""

from __future__ import annotations

import os
import platform
import re
import time

from daemon.service.metrics import Metrics
from daemon.service.provenance import kbatchd_version, rules_digest
from events.schema import Decided
from tests.daemon.controllers.gang_builders import SECOND, T0, key, members, nodes, podgroup
from tests.daemon.controllers.world import GangWorld
from tests.processes import metric_samples


def _families(text: str) -> list[str]:
    return re.findall(r"^# TYPE (\S+) ", text, re.MULTILINE)


def test_every_counter_and_histogram_has_its_series_at_zero_from_the_start() -> None:
    metrics = Metrics()
    metrics.seed(["job", "gang"], ["east", "west"], ["Job", "Pod"])
    text = metrics.render()
    samples = metric_samples(text)
    for kind in ("Job", "Pod"):
        assert samples[f'kbatchd_keys_decided_total{{kind="{kind}"}}'] == 0
        assert samples[f'kbatchd_keys_held_total{{kind="{kind}"}}'] == 0
    for name in ("Observed", "Resynced", "Tick", "Decided", "Outcome", "Started"):
        assert samples[f'kbatchd_events_appended_total{{type="{name}"}}'] == 0
    for reconciler in ("job", "gang"):
        assert samples[f'kbatchd_admissions_total{{reconciler="{reconciler}"}}'] == 0
        assert samples[f'kbatchd_preemptions_total{{reconciler="{reconciler}"}}'] == 0
        latency = f'kbatchd_reconcile_latency_seconds_count{{reconciler="{reconciler}"}}'
        assert samples[latency] == 0
    assert samples['kbatchd_decisions_total{reason="Admitted",reconciler="gang"}'] == 0
    assert samples['kbatchd_decisions_total{reason="BackoffLimitExceeded",reconciler="job"}'] == 0
    for cluster in ("east", "west"):
        for source in ("ingest", "actuator", "leader"):
            error = f'kbatchd_api_errors_total{{cluster="{cluster}",code="500",source="{source}"}}'
            assert samples[error] == 0
        wait = f'kbatchd_admission_wait_seconds_bucket{{cluster="{cluster}",le="+Inf"}}'
        assert samples[wait] == 0
    for histogram in ("fold_lag", "reconcile_duration", "act_duration"):
        assert samples[f"kbatchd_{histogram}_seconds_count"] == 0
        assert samples[f'kbatchd_{histogram}_seconds_bucket{{le="0.001"}}'] == 0
    # A histogram's first record replaces its zero series, and only that one.
    metrics.reconcile_latency.record(0.2, {"reconciler": "gang"})
    metrics.act_duration.record(0.02)
    text = metrics.render()
    samples = metric_samples(text)
    assert samples['kbatchd_reconcile_latency_seconds_count{reconciler="gang"}'] == 1
    assert samples['kbatchd_reconcile_latency_seconds_count{reconciler="job"}'] == 0
    assert samples["kbatchd_act_duration_seconds_count"] == 1
    assert samples['kbatchd_act_duration_seconds_bucket{le="+Inf"}'] == 1
    families = _families(text)
    assert len(families) == len(set(families))


def test_build_info_and_the_process_metrics_of_prometheus_clients() -> None:
    metrics = Metrics()
    began = time.time()
    cpu = os.times().user + os.times().system
    samples = metric_samples(metrics.render())
    build = (
        f'kbatchd_build_info{{python_version="{platform.python_version()}",'
        f'rules="{rules_digest()}",version="{kbatchd_version()}"}}'
    )
    assert samples[build] == 1
    assert samples["process_cpu_seconds_total"] >= cpu
    assert 1e6 < samples["process_resident_memory_bytes"] <= samples["process_virtual_memory_bytes"]
    assert samples["process_virtual_memory_max_bytes"] > 0
    assert 0 < samples["process_open_fds"] <= samples["process_max_fds"]
    # The kernel counts the start in clock ticks: within a tick or two of the truth.
    assert began - 3600 * 24 < samples["process_start_time_seconds"] <= began + 0.05


def _admit(world: GangWorld, ref: str) -> Decided:
    decision = world.decide(ref)
    assert decision is not None
    assert decision.reason.startswith("Admitted:")
    return Decided(
        at=world.now, reconciler="gang", key=ref, reason=decision.reason, intents=decision.intents
    )


def test_an_admission_waits_from_its_pod_groups_creation() -> None:
    world = GangWorld(nodes())
    first, second = members("g", 2, gpus=1)
    world.add(podgroup("g", 2), first)
    world.advance(30 * SECOND)
    world.add(second)
    metrics = Metrics()
    metrics.decided([_admit(world, key("g"))], world.state)
    samples = metric_samples(metrics.render())
    assert samples['kbatchd_admission_wait_seconds_count{cluster="c1"}'] == 1
    assert samples['kbatchd_admission_wait_seconds_sum{cluster="c1"}'] == 30.0
    assert samples['kbatchd_admission_wait_seconds_bucket{cluster="c1",le="30.0"}'] == 1
    assert samples['kbatchd_admission_wait_seconds_bucket{cluster="c1",le="10.0"}'] == 0


def test_an_admission_after_an_eviction_waits_from_the_eviction() -> None:
    evicted = {
        "type": "PodGroupScheduled",
        "status": "False",
        "reason": "PodsReadyTimeout",
        "message": "evicted",
        "lastTransitionTime": "2026-01-01T00:01:00Z",
    }
    world = GangWorld(nodes())
    group = podgroup("g", 2, conditions=[evicted], annotations={"kbatchd.dev/evictions": "1"})
    world.add(group, *members("g", 2, gpus=1))
    world.advance(75 * SECOND)  # past the eviction's back-off (10 s)
    metrics = Metrics()
    metrics.decided([_admit(world, key("g"))], world.state)
    samples = metric_samples(metrics.render())
    assert world.now == T0 + 75 * SECOND
    assert samples['kbatchd_admission_wait_seconds_sum{cluster="c1"}'] == 15.0


def test_reconcile_latency_runs_from_the_oldest_watch_event_of_the_pass() -> None:
    metrics = Metrics()
    decisions = [
        Decided(at=0, reconciler="job", key="Job/c/ns/a", reason="CreatePods: 2"),
        Decided(at=0, reconciler="job", key="Job/c/ns/b", reason="Status"),
        Decided(at=0, reconciler="gang", key="PodGroup/c/ns/g", reason="NotEnoughMembers: 1"),
    ]
    metrics.decided(decisions, woken_at=T0, logged_at=T0 + 250)
    metrics.decided(decisions[:1])  # a pass no watch event woke (a tick, an outcome)
    samples = metric_samples(metrics.render())
    assert samples['kbatchd_reconcile_latency_seconds_count{reconciler="job"}'] == 1
    assert samples['kbatchd_reconcile_latency_seconds_sum{reconciler="job"}'] == 0.25
    assert samples['kbatchd_reconcile_latency_seconds_count{reconciler="gang"}'] == 1


def test_a_count_kept_elsewhere_is_a_counter_read_at_collection() -> None:
    metrics = Metrics()
    counts = {"written": 0, "dropped": 0}
    metrics.observed_counter(
        "kbatchd.kube_events",
        "Kubernetes Events",
        lambda: [(float(n), {"outcome": outcome}) for outcome, n in counts.items()],
        "{event}",
    )
    assert metric_samples(metrics.render())['kbatchd_kube_events_total{outcome="written"}'] == 0
    counts["written"] = 3
    text = metrics.render()
    assert "# TYPE kbatchd_kube_events_total counter" in text
    assert metric_samples(text)['kbatchd_kube_events_total{outcome="written"}'] == 3
    assert metric_samples(text)['kbatchd_kube_events_total{outcome="dropped"}'] == 0
