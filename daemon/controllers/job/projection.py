"""What the fold remembers about a Job's pods after they are gone.

The Job reconciler decides from the pods the state holds, but a counted pod loses kbatchd's
tracking finalizer and may then be deleted by anyone, taking with it what only it showed.
Two facts must outlive it, so the fold keeps them per Job, keyed by the Job's reconciler key
``Job/cluster/namespace/name``:

- **The back-off record** (spec A5.4; upstream keeps it in memory in `backoff_utils.go`):
  failures since the newest success and when the newest failure finished. A pod counts once,
  when it is first observed finished while it still carries `JOB_TRACKING_FINALIZER` — the
  moment the reconciler's accounting picks it up too (pods kbatchd deletes for suspension or
  scale-down lose the finalizer first, so neither counts them). Under `podReplacementPolicy:
  TerminatingOrFailed` (no podFailurePolicy) a pod that gets a deletion timestamp before
  finishing is a failure at once, as upstream's `isPodFailed` makes it a new failed pod in
  the next sync (and KEP-3939: the delay counts from when it became terminating); it is not
  counted again when it then stops, and does not reset the record if it ends Succeeded
  (upstream counts it as failed). Under `Failed` such a pod counts when it turns Failed — or
  when kbatchd removes its finalizer while it still terminates, which happens only for pods
  it treats as failed because they are stuck on a NotReady node (or for a Job that is
  finishing or being deleted, whose back-off no longer matters). A success resets the record.
  Upstream sorts each sync's batch by finish time; here changes are taken in the order they
  are observed, which is the same except for a failure and a success observed in the same
  sync with the failure finishing later (upstream keeps that failure; here a success observed
  after it resets it). The policy is read from the Job when the pod changes: if it is switched
  while pods terminate, such a pod may be counted twice or not at all (upstream counts
  whatever is unaccounted at its next sync under the policy then in force). The record is
  dropped with the Job (upstream also drops it when the Job finishes; a finished Job creates
  no pods, so keeping it changes nothing).
- **When its status was last written**, by a decision of kbatchd's: where the batch window
  of the next write starts (`daemon.controllers.job.status.batched_until`).
- **The pod ordinal watermark**: one more than the highest `POD_ORDINAL_ANNOTATION` on any
  pod observed for the Job. Pod names are derived from the ordinal, and a pod created by
  kbatchd cannot disappear before kbatchd observed it (its finalizer holds it), so a create
  that starts at the watermark never reuses a name (see `daemon.controllers.job.pods`).

Cost: `fold` calls `pod_changed` only for a pod that is new to the state, turned Succeeded
or Failed, or whose deletion timestamp or finalizers changed; it returns at once unless the
pod's controller is a Job, and for a new pod unless it already finished or terminates.
`job_changed` does work only when a Job appears, is replaced or is deleted.
"""

from __future__ import annotations

from typing import Final

from events.hooks import Change, Dirty, FoldHooks
from events.intents import Patch
from events.objects import (
    JOB_TRACKING_FINALIZER,
    POD_ORDINAL_ANNOTATION,
    TERMINAL_PHASES,
    Job,
    Pod,
)
from events.schema import Decided
from events.state import BackoffRecord, State

_NONE: Final = 0
_FAILED: Final = 1
_SUCCEEDED: Final = 2
# More digits than any real ordinal; keeps int() away from absurd annotation values.
_MAX_ORDINAL_DIGITS: Final = 18


def finish_time(pod: Pod) -> int:
    """When the pod finished, in ms: the newest container `finishedAt` when every container
    terminated (or the Ready=False transition), else its deletion time less the grace period,
    else its creation time — upstream `getFinishedTime`'s order."""
    if pod.finished is not None:
        return pod.finished
    if pod.deletion_ts is not None:
        return pod.deletion_ts - pod.grace_seconds * 1000
    return pod.created


def only_replace_failed(job: Job) -> bool:
    """podReplacementPolicy `Failed`; a pod failure policy forces it even if unset (spec A1)."""
    spec = job.spec
    return spec.get("podReplacementPolicy") == "Failed" or spec.get("podFailurePolicy") is not None


def pod_changed(state: State, cluster: str, old: Pod | None, new: Pod) -> None:
    """Fold one observed change of a pod that still exists into its Job's records."""
    owner = new.controller
    if owner is None or owner.kind != "Job":
        return
    if old is None:
        text = new.annotations.get(POD_ORDINAL_ANNOTATION)
        if text is not None:
            _saw_ordinal(state, f"Job/{cluster}/{new.namespace}/{owner.name}", text)
        if new.deletion_ts is None and new.phase not in TERMINAL_PHASES:
            return  # the common case: a pod just created, nothing finished yet
    tracked = JOB_TRACKING_FINALIZER in new.finalizers
    was_tracked = old is not None and JOB_TRACKING_FINALIZER in old.finalizers
    if not (tracked or was_tracked):
        return
    job = state.jobs.get(f"{cluster}/{new.namespace}/{owner.name}")
    if job is None or job.uid != owner.uid:
        # Not (yet) known, or a pod of an earlier Job of that name: `job_changed` counts the
        # pods already present when the Job appears.
        return
    only_failed = only_replace_failed(job)
    if old is not None and _outcome(old, only_failed) != _NONE:
        return  # a pod finishes once
    ref = f"Job/{cluster}/{new.namespace}/{owner.name}"
    outcome = _outcome(new, only_failed)
    if outcome == _FAILED:
        _failed(state, ref, finish_time(new))
    elif outcome == _SUCCEEDED:
        state.job_backoff.pop(ref, None)
    elif (
        was_tracked
        and not tracked
        and old is not None
        and old.deletion_ts is not None
        and new.phase != "Succeeded"
    ):
        # The finalizer went while the pod was still terminating: kbatchd counted it as
        # failed (stuck on a NotReady node) without waiting for it to stop.
        _failed(state, ref, finish_time(new))


def job_changed(state: State, key: str, old: Job | None, new: Job | None) -> None:
    """Fold one observed change of a Job (`new` None: deleted) keyed ``cluster/ns/name``."""
    if new is None:
        ref = "Job/" + key
        state.job_backoff.pop(ref, None)
        state.pod_ordinals.pop(ref, None)
        state.job_status_written.pop(ref, None)
        return
    if old is not None and old.uid == new.uid:
        return
    # New to the state, or a new Job under an old name: start its back-off record from the
    # pods already present (a relist may list pods before their Job), as upstream does from
    # the unaccounted pods after a restart: the failures that finished after the newest
    # success. Ordinals need no reset: a new Job's names derive from its own uid.
    ref = "Job/" + key
    state.job_backoff.pop(ref, None)
    state.job_status_written.pop(ref, None)
    keys = state.children.get(ref)
    if not keys:
        return
    only_failed = only_replace_failed(new)
    successes: list[int] = []
    failures: list[int] = []
    for pod_key in keys:
        pod = state.pods[pod_key]
        owner = pod.controller
        if owner is None or owner.uid != new.uid:
            continue
        outcome = _outcome(pod, only_failed)
        if outcome == _SUCCEEDED:
            successes.append(finish_time(pod))
        elif outcome == _FAILED:
            failures.append(finish_time(pod))
    if successes:
        newest = max(successes)
        failures = [t for t in failures if t > newest]
    if failures:
        state.job_backoff[ref] = BackoffRecord(len(failures), max(failures))


def may_count(pod: Pod) -> bool:
    """Whether the back-off may count the pod as finished, under either replacement policy:
    it carries the tracking finalizer and has finished or is terminating."""
    return JOB_TRACKING_FINALIZER in pod.finalizers and (
        pod.phase in TERMINAL_PHASES or pod.deletion_ts is not None
    )


def _outcome(pod: Pod, only_failed: bool) -> int:
    """How a pod that still carries the tracking finalizer has finished, as the back-off sees
    it; `_NONE` for a pod without it."""
    if not may_count(pod):
        return _NONE
    phase = pod.phase
    if phase == "Succeeded":
        return _SUCCEEDED
    if phase == "Failed" or not only_failed:  # failed, or terminating before it finished
        return _FAILED
    return _NONE


def _failed(state: State, ref: str, at: int) -> None:
    record = state.job_backoff.get(ref)
    if record is None:
        state.job_backoff[ref] = BackoffRecord(1, at)
    else:
        record.failures += 1
        # The newest failure's time, whatever order the failures are observed in (upstream
        # takes the newest of each sync's batch).
        record.last_failure_ms = max(record.last_failure_ms, at)


def _saw_ordinal(state: State, ref: str, text: str) -> None:
    if not text.isdecimal() or len(text) > _MAX_ORDINAL_DIGITS:
        return  # not one kbatchd wrote
    following = int(text) + 1
    if following > state.pod_ordinals.get(ref, 0):
        state.pod_ordinals[ref] = following


def _pod_observed(state: State, change: Change, dirty: Dirty | None) -> None:
    """Only a pod new to the state, or a change that can finish a pod for its Job's back-off
    (a terminal phase, a deletion, a finalizer gone) touches the Job's records; most pod
    events (binding, Running, readiness, resizes) do none of these."""
    old: Pod | None = change.old
    new: Pod | None = change.new
    if new is not None and (
        old is None
        or (old.phase != new.phase and new.phase in TERMINAL_PHASES)
        or old.deletion_ts != new.deletion_ts
        or old.finalizers != new.finalizers
    ):
        pod_changed(state, change.cluster, old, new)


def _job_observed(state: State, change: Change, dirty: Dirty | None) -> None:
    job_changed(state, change.key, change.old, change.new)


def status_written(state: State, seq: int, decision: Decided) -> None:
    """Note when a decision writes a Job's status."""
    for intent in decision.intents:
        if type(intent) is Patch and intent.kind == "Job" and intent.subresource == "status":
            state.job_status_written[intent.ref] = decision.at


FOLD: Final = FoldHooks(
    observed={"Pod": _pod_observed, "Job": _job_observed}, decided=status_written
)
