"""Pod re-creation back-off after failures (upstream `backoff_utils.go`).

Upstream keeps an in-memory record per Job (failures since the last success, time of the
newest failure) fed by the pods that finished since the previous sync, and loses it on
restart. Here the record is recomputed from the pods the state still holds, terminal ones
included (the controller never deletes finished pods), so it is a pure function of the state
and replays exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from events.objects import Pod

BASE_MS: Final = 10_000
# The docs say six minutes; the controller's `MaxJobPodFailureBackOff` is ten (spec A5.4).
MAX_MS: Final = 10 * 60_000
# Upstream never requeues sooner than its pod-event batching period.
MIN_REQUEUE_MS: Final = 1_000


def finish_time(pod: Pod) -> int:
    """When the pod finished, in ms: the newest container `finishedAt` when every container
    terminated (or the Ready=False transition), else its deletion time less the grace period,
    else its creation time — upstream `getFinishedTime`'s order."""
    if pod.finished is not None:
        return pod.finished
    if pod.deletion_ts is not None:
        return pod.deletion_ts - pod.grace_seconds * 1000
    return pod.created


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


class Record:
    """Failures since the newest success and when the newest of them happened."""

    __slots__ = ("failures", "last_failure")

    def __init__(self, failures: int = 0, last_failure: int | None = None) -> None:
        self.failures = failures
        self.last_failure = last_failure


def job_record(succeeded: Iterable[Pod], failed: Iterable[Pod]) -> Record:
    """The Job-wide record: failures that finished after the newest success."""
    last_success = max((finish_time(p) for p in succeeded), default=None)
    times = [finish_time(p) for p in failed]
    if last_success is not None:
        times = [t for t in times if t > last_success]
    return Record(len(times), max(times, default=None))
