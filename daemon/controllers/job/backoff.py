"""Pod re-creation back-off after failures (upstream `backoff_utils.go`).

The Job-wide record (failures since the newest success, when the newest failed) is kept by the
fold (`job.projection`, `State.job_backoff`), because the pods it counts may be gone by the time
the back-off matters; per-index back-off reads the failed pod itself, which keeps its
finalizer (so stays) until its replacement exists. Both replay exactly: they are functions of
the logged events.
"""

from __future__ import annotations

from typing import Final

BASE_MS: Final = 10_000
# The docs say six minutes; the controller's `MaxJobPodFailureBackOff` is ten (spec A5.4).
MAX_MS: Final = 10 * 60_000
# Upstream never requeues sooner than its pod-event batching period.
MIN_REQUEUE_MS: Final = 1_000


def delay_ms(failures: int, base_ms: int = BASE_MS, max_ms: int = MAX_MS) -> int:
    """The wait after `failures` consecutive failures: base doubling per failure, capped."""
    if failures <= 0:
        return 0
    delay = base_ms
    for _ in range(failures - 1):
        delay *= 2
        if delay >= max_ms:
            return max_ms
    return min(delay, max_ms)


def ready_at(failures: int, last_failure: int | None, base_ms: int, max_ms: int) -> int | None:
    """The event time from which pods may be created again; None when there is no wait."""
    if failures <= 0 or last_failure is None:
        return None
    return last_failure + delay_ms(failures, base_ms, max_ms)
