"""Writing a Job's status the way the API server accepts it from an external controller.

The status is sent as a JSON merge patch on the `status` subresource holding only the fields
that change; lists (conditions, uncounted UIDs) are always sent whole because a merge patch
replaces lists. Times are RFC 3339 at second precision, which is what `metav1.Time` keeps.

Writes are batched as upstream batches its pod-triggered syncs (`SyncJobBatchPeriod`, 1 s):
while pods run, a change of the counters alone waits until a window has passed since the
Job's previous status write, so a Job whose pods start, turn ready and finish one by one
writes once a window instead of once a pod (`batched_until`).
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from daemon.controllers.job.spec import JobView
from events.objects import ObjectError, rfc3339, timestamp_ms


def parse_time(text: str | None) -> int | None:
    try:
        return timestamp_ms(text)
    except ObjectError:
        return None


def new_condition(type_: str, status: str, reason: str, message: str, now: int) -> dict[str, Any]:
    stamp = rfc3339(now)
    return {
        "type": type_,
        "status": status,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
        "reason": reason,
        "message": message,
    }


def ensure_condition(
    conditions: list[dict[str, Any]],
    type_: str,
    status: str,
    reason: str,
    message: str,
    now: int,
) -> bool:
    """upstream `ensureJobConditionStatus`: replace the condition of that type when its status,
    reason or message differ, append it when absent unless it would be False; report whether
    the list changed."""
    for i, condition in enumerate(conditions):
        if condition.get("type") != type_:
            continue
        if (
            condition.get("status") == status
            and (condition.get("reason") or "") == reason
            and (condition.get("message") or "") == message
        ):
            return False
        conditions[i] = new_condition(type_, status, reason, message, now)
        return True
    if status == "False":
        return False
    conditions.append(new_condition(type_, status, reason, message, now))
    return True


class Desired(msgspec.Struct, kw_only=True):
    """The status a decision wants, in API field terms."""

    active: int
    ready: int
    terminating: int
    succeeded: int
    failed: int
    start_time: str | None
    uncounted_succeeded: list[str]
    uncounted_failed: list[str]
    conditions: list[dict[str, Any]]
    completed_indexes: str | None = None
    failed_indexes: str | None = None
    completion_time: str | None = None


def status_patch(view: JobView, want: Desired) -> dict[str, Any]:
    """The fields of `want` that differ from the Job's observed status (empty if none)."""
    have = view.status
    patch: dict[str, Any] = {}
    for field, current, value in (
        ("active", have.active or 0, want.active),
        ("succeeded", have.succeeded or 0, want.succeeded),
        ("failed", have.failed or 0, want.failed),
        ("ready", have.ready, want.ready),
        ("terminating", have.terminating, want.terminating),
        ("startTime", have.start_time, want.start_time),
    ):
        if current != value:
            patch[field] = value
    if want.completion_time is not None and have.completion_time != want.completion_time:
        patch["completionTime"] = want.completion_time
    if want.completed_indexes is not None and (have.completed_indexes or "") != (
        want.completed_indexes
    ):
        patch["completedIndexes"] = want.completed_indexes
    if want.failed_indexes is not None and have.failed_indexes != want.failed_indexes:
        patch["failedIndexes"] = want.failed_indexes
    if (
        view.uncounted_succeeded != want.uncounted_succeeded
        or view.uncounted_failed != want.uncounted_failed
    ):
        patch["uncountedTerminatedPods"] = {
            "succeeded": want.uncounted_succeeded,
            "failed": want.uncounted_failed,
        }
    if view.conditions != want.conditions:
        patch["conditions"] = want.conditions
    return patch


# The fields whose change may wait for the batch window: counters and the accounting lists.
# Conditions, startTime, completionTime and failedIndexes change what others act on (the
# Job finishing or failing, its deadline, an index given up), so they are written at once.
BATCHED_FIELDS: Final = frozenset(
    {
        "active",
        "ready",
        "terminating",
        "succeeded",
        "failed",
        "completedIndexes",
        "uncountedTerminatedPods",
    }
)


def batched_until(
    patch: dict[str, Any], active: int, written_at: int | None, now: int, window_ms: int
) -> int | None:
    """Until when the status `patch` waits, or None to write it now.

    It waits only while pods are active (the write that lets a Job finish goes at once), only
    if every field it changes is a batched one, and only until `window_ms` after the Job's
    previous status write (`written_at`, None: none is known, as after a restart)."""
    if window_ms <= 0 or not patch or active == 0 or written_at is None:
        return None
    if not BATCHED_FIELDS.issuperset(patch):
        return None
    until = written_at + window_ms
    return until if until > now else None
