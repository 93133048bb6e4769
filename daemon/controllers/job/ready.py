"""When a drop of a Job's `status.ready` is written: a deliberate deviation from upstream.

The upstream Job controller writes `ready` whenever the count of ready pods changes. In a
JobSet restarted in place (spec B5.2) every pod of every child Job goes not-ready for the few
seconds its containers restart, so each child Job writes its status twice (down, then back up)
and a 1,250-Job JobSet costs 2,500 status writes for one pod failure, where the restart itself
costs a handful of calls. kbatchd therefore holds back a *drop* of `ready` for a grace window:

- an increase is written at once (dependsOn `Ready` and `RestartingJobSet` wait on it);
- a pod that was counted ready stays counted for `grace` after its Ready condition turned
  False, so a drop that recovers inside the window is never written;
- once a drop is older than the window it is written, with the true count;
- any other status change (counters, conditions, terminating, …) is not held by this (the
  status batch window may still hold counters, `status.batched_until`) and carries the true
  count, so the held value never outlives the next write;
- a grace of 0 is upstream's behaviour.
"""

from __future__ import annotations

from collections.abc import Iterable


def hold_ready_drop(
    written: int | None,
    ready: int,
    not_ready_since: Iterable[int | None],
    now: int,
    grace_ms: int,
) -> int | None:
    """Until when the drop from `written` (the observed `status.ready`) to `ready` (the pods
    ready now) is held back, or None when the count is to be written now.

    `not_ready_since` has, for each active pod that is not ready, when its Ready condition last
    changed (None when it has none). The hold ends at the first instant at which the pods that
    turned not-ready within the window no longer cover the drop."""
    if grace_ms <= 0 or written is None or ready >= written:
        return None
    expiries = sorted(t + grace_ms for t in not_ready_since if t is not None and t + grace_ms > now)
    drop = written - ready
    if len(expiries) < drop:
        return None
    # Once the `len - drop + 1` earliest expiries have passed, the rest no longer cover it.
    return expiries[len(expiries) - drop]
