"""The Kubernetes Events a decision's intents announce, as upstream's controllers write them.

Events are a side channel of acting, as client-go's recorder is: nothing here is in the log or
replayed. Each note waits on one intent of the decision and is written once its outcome is
known: most when the intent is carried out (a pod created, a condition newly set), a few when
it fails (``FailedCreate``, with the API's error). Whether a status patch sets a condition
*newly* is read against the object as the state holds it when the decision is handed to the
actuator, which is the state the decision was made from.

- Job (the reconciler ``job``): ``SuccessfulCreate``/``FailedCreate`` and
  ``SuccessfulDelete``/``FailedDelete`` for its pods (messages ``Created pod: NAME``,
  ``Error creating: ERROR``, ...); ``Suspended``, ``Resumed``, ``Completed`` (and
  ``TooManySucceededPods``), and for a failed Job a Warning with the Failed condition's
  reason and message (``BackoffLimitExceeded``, ``DeadlineExceeded``, ...), as upstream's
  ``syncJob`` and ``recordJobFinished``.
- JobSet: every condition its status patch changes, with the condition's reason and message
  (``SuspendedJobs``, ``ResumeJobs``, ``AllJobsCompleted``, ``FailedJobs``, ...; Warning for
  Failed), and ``JobCreationFailed``, ``HeadlessServiceCreationFailed``,
  ``PVCCreationFailed`` when a create fails, as the JobSet controller's.
- Gang: ``Scheduled`` on each bound pod (kube-scheduler's ``Successfully assigned NS/NAME to
  NODE``); on the PodGroup, ``Scheduled`` when it is admitted, ``FailedScheduling`` with the
  placement reason when it newly does not fit (on each member waiting for a node too, as
  kube-scheduler writes it), and the reason of any other refusal (``PodsReadyTimeout``,
  ``LeaderLost``, ...); ``Preempted`` on each member it evicts, and on each victim of a
  gang's preemption (``Preempted by podgroup NS/NAME``, naming the preemptor).

A note may also carry a milestone, a line for the daemon's own log: a Job or JobSet finished,
a gang admitted or given up on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal

import msgspec

from daemon.controllers.base import split_ref
from daemon.controllers.gang.spec import (
    LIMIT_EXCEEDED,
    NOT_ENOUGH_MEMBERS,
    SCHEDULED,
    UNSCHEDULABLE,
    live,
)
from daemon.controllers.job.spec import COMPLETE, FAILED, SUSPENDED
from events.intents import Bind, Create, Delete, Intent, Patch
from events.objects import Job, Pod
from events.schema import Decided
from events.state import State

EventType = Literal["Normal", "Warning"]

# The JobSet controller's reasons for a failed create, by the kind created.
_JOBSET_CREATE_FAILED: Final = {
    "Job": "JobCreationFailed",
    "Service": "HeadlessServiceCreationFailed",
    "PersistentVolumeClaim": "PVCCreationFailed",
}
_JOBSET_COMPLETED: Final = "Completed"
_JOBSET_FAILED: Final = "Failed"


class Involved(msgspec.Struct, frozen=True, gc=False):
    """The object an Event is about."""

    cluster: str
    kind: str
    namespace: str
    name: str
    uid: str = ""

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.cluster}/{self.namespace}/{self.name}"


class Note(msgspec.Struct, frozen=True, gc=False):
    """One Event to write once intent `index` of the decision has an outcome.

    `on_failure`: written only if the intent fails, the API's error appended to `message`;
    otherwise only if it is carried out. `milestone`: a line for the daemon's log as well,
    logged with the object's ref and `reason`."""

    index: int
    about: Involved
    type: EventType
    reason: str
    message: str
    on_failure: bool = False
    milestone: str = ""
    # The reason the milestone's line gives, when not the Event's (a Job's Complete condition
    # says CompletionsReached or SuccessPolicy where the Event says Completed).
    why: str = ""


def notes_for(state: State, decision: Decided) -> list[Note]:
    """The Events `decision`'s intents announce, read against `state` (the state it was made
    from). Empty for decisions of reconcilers upstream has no events for."""
    if not decision.intents:
        return []
    if decision.reconciler == "job":
        return _job_notes(state, decision)
    if decision.reconciler == "jobset":
        return _jobset_notes(state, decision)
    if decision.reconciler == "gang":
        return _gang_notes(state, decision)
    return []


# -- Jobs ---------------------------------------------------------------------------------------


def _job_notes(state: State, decision: Decided) -> list[Note]:
    kind, cluster, namespace, name = split_ref(decision.key)
    if kind != "Job":
        return []
    job = state.jobs.get(f"{cluster}/{namespace}/{name}")
    if job is None:
        return []
    about = Involved(cluster, "Job", namespace, name, job.uid)
    notes: list[Note] = []
    for index, intent in enumerate(decision.intents):
        if intent.kind == "Pod" and isinstance(intent, Create):
            notes.append(
                Note(index, about, "Normal", "SuccessfulCreate", f"Created pod: {intent.name}")
            )
            notes.append(Note(index, about, "Warning", "FailedCreate", "Error creating: ", True))
        elif intent.kind == "Pod" and isinstance(intent, Delete):
            notes.append(
                Note(index, about, "Normal", "SuccessfulDelete", f"Deleted pod: {intent.name}")
            )
            notes.append(Note(index, about, "Warning", "FailedDelete", "Error deleting: ", True))
        elif _is_status_of(intent, "Job", name):
            notes += _job_conditions(index, about, job, _patched_status(intent))
    return notes


def _job_conditions(index: int, about: Involved, job: Job, status: Mapping[str, Any]) -> list[Note]:
    spec, before = job.spec, job.status
    notes: list[Note] = []
    for condition in _newly_set(before.get("conditions"), status.get("conditions")):
        type_, value = condition.get("type"), condition.get("status")
        if type_ == SUSPENDED and value == "True":
            notes.append(Note(index, about, "Normal", "Suspended", "Job suspended"))
        elif type_ == SUSPENDED and value == "False":
            notes.append(Note(index, about, "Normal", "Resumed", "Job resumed"))
        elif type_ == COMPLETE and value == "True":
            succeeded = status.get("succeeded", before.get("succeeded")) or 0
            completions = spec.get("completions")
            if isinstance(completions, int) and succeeded > completions:
                notes.append(
                    Note(
                        index,
                        about,
                        "Warning",
                        "TooManySucceededPods",
                        "Too many succeeded pods running after completion count reached",
                    )
                )
            why = str(condition.get("reason") or "")
            notes.append(
                Note(
                    index,
                    about,
                    "Normal",
                    "Completed",
                    "Job completed",
                    False,
                    "Job completed",
                    why,
                )
            )
        elif type_ == FAILED and value == "True":
            notes.append(_condition_note(index, about, condition, "Warning", "Job failed"))
    return notes


# -- JobSets ------------------------------------------------------------------------------------


def _jobset_notes(state: State, decision: Decided) -> list[Note]:
    kind, cluster, namespace, name = split_ref(decision.key)
    if kind != "JobSet":
        return []
    jobset = state.jobsets.get(f"{cluster}/{namespace}/{name}")
    if jobset is None:
        return []
    about = Involved(cluster, "JobSet", namespace, name, jobset.uid)
    notes: list[Note] = []
    for index, intent in enumerate(decision.intents):
        failed = _JOBSET_CREATE_FAILED.get(intent.kind)
        if isinstance(intent, Create) and failed is not None:
            notes.append(Note(index, about, "Warning", failed, "", True))
        elif _is_status_of(intent, "JobSet", name):
            conditions = _patched_status(intent).get("conditions")
            for condition in _newly_set(jobset.status.get("conditions"), conditions):
                type_, value = condition.get("type"), condition.get("status")
                if type_ == _JOBSET_FAILED and value == "True":
                    notes.append(
                        _condition_note(index, about, condition, "Warning", "JobSet failed")
                    )
                elif type_ == _JOBSET_COMPLETED and value == "True":
                    notes.append(
                        _condition_note(index, about, condition, "Normal", "JobSet completed")
                    )
                else:
                    notes.append(_condition_note(index, about, condition, "Normal"))
    return notes


# -- gangs --------------------------------------------------------------------------------------


def _gang_notes(state: State, decision: Decided) -> list[Note]:
    notes: list[Note] = []
    # Why each PodGroup's members go, for their Preempted events: its condition's reason.
    refusals: dict[str, str] = {}
    for index, intent in enumerate(decision.intents):
        if intent.kind != "PodGroup" or not _is_status_of(intent, "PodGroup", intent.name):
            continue
        group = state.podgroups.get(intent.key)
        about = Involved(intent.cluster, "PodGroup", intent.namespace, intent.name)
        if group is not None:
            about = msgspec.structs.replace(about, uid=group.uid)
        before = group.status.get("conditions") if group is not None else None
        conditions = _patched_status(intent).get("conditions")
        for condition in _newly_set(before, conditions):
            if condition.get("type") != SCHEDULED:
                continue
            reason = str(condition.get("reason") or "")
            if condition.get("status") == "True":
                notes.append(_condition_note(index, about, condition, "Normal", "gang admitted"))
                continue
            refusals[intent.key] = f"{reason}: {condition.get('message') or ''}"
            if reason == UNSCHEDULABLE:
                message = str(condition.get("message") or "")
                notes.append(Note(index, about, "Warning", "FailedScheduling", message))
                # And on each member waiting for a node when placing was tried, as
                # kube-scheduler writes it (not while members are missing: its PreEnqueue
                # holds such pods back silently). The recorder's per-object spam filter
                # bounds a gang retried again and again.
                tried = not message.startswith(NOT_ENOUGH_MEMBERS)
                for waiting in _waiting_members(state, intent.key) if tried else ():
                    member = Involved(
                        intent.cluster, "Pod", waiting.namespace, waiting.name, waiting.uid
                    )
                    notes.append(Note(index, member, "Warning", "FailedScheduling", message))
            else:
                milestone = "gang not requeued" if reason == LIMIT_EXCEEDED else ""
                notes.append(_condition_note(index, about, condition, "Warning", milestone))
    for index, intent in enumerate(decision.intents):
        if isinstance(intent, Bind):
            about = Involved(intent.cluster, "Pod", intent.namespace, intent.name, intent.uid)
            message = f"Successfully assigned {intent.namespace}/{intent.name} to {intent.node}"
            notes.append(Note(index, about, "Normal", "Scheduled", message))
        elif isinstance(intent, Delete) and intent.kind == "Pod":
            about = Involved(
                intent.cluster, "Pod", intent.namespace, intent.name, intent.precondition_uid
            )
            pod = state.pods.get(intent.key)
            group_key = f"{intent.cluster}/{intent.namespace}/{pod.pod_group}" if pod else ""
            why = refusals.get(group_key) or decision.reason.split(";", 1)[0]
            message = f"Preempted by kbatchd: {why}"
            if decision.reason.startswith("WaitingForPreemption:"):
                # A victim of a gang's preemption (KEP-5710): the preemptor is the decision's
                # PodGroup, as kube-scheduler names it.
                _, _, namespace, name = split_ref(decision.key)
                message = f"Preempted by podgroup {namespace}/{name}"
            notes.append(Note(index, about, "Normal", "Preempted", message))
    return notes


def _waiting_members(state: State, group_key: str) -> list[Pod]:
    """The group's live members with no node and no scheduling gate, by name."""
    pods = (state.pods.get(key) for key in state.group_members.get(group_key, ()))
    return sorted(
        (
            p
            for p in pods
            if p is not None and live(p) and not p.node_name and not p.scheduling_gates
        ),
        key=lambda p: p.name,
    )


# -- shared -------------------------------------------------------------------------------------


def _is_status_of(intent: Intent, kind: str, name: str) -> bool:
    return (
        isinstance(intent, Patch)
        and intent.kind == kind
        and intent.name == name
        and intent.subresource == "status"
    )


def _patched_status(intent: Intent) -> Mapping[str, Any]:
    patch = intent.patch if isinstance(intent, Patch) else None
    status = patch.get("status") if isinstance(patch, dict) else None
    return status if isinstance(status, dict) else {}


def _newly_set(before: object, after: object) -> Iterable[Mapping[str, Any]]:
    """The conditions of `after` that `before` does not hold with the same status, reason and
    message (upstream's controllers announce a condition whenever they rewrite it). Only a
    listed condition can be new: a merge patch lists them all, a strategic one (the gang's)
    only those it changes."""
    had = {
        c.get("type"): (c.get("status"), c.get("reason") or "", c.get("message") or "")
        for c in (before if isinstance(before, list) else ())
        if isinstance(c, dict)
    }
    for condition in after if isinstance(after, list) else ():
        if not isinstance(condition, dict):
            continue
        type_ = condition.get("type")
        now = (
            condition.get("status"),
            condition.get("reason") or "",
            condition.get("message") or "",
        )
        if had.get(type_) == now:
            continue
        if type_ not in had and now[0] == "False" and type_ == SUSPENDED:
            continue  # never suspended: nothing was resumed
        yield condition


def _condition_note(
    index: int, about: Involved, condition: Mapping[str, Any], type_: EventType, milestone: str = ""
) -> Note:
    return Note(
        index,
        about,
        type_,
        str(condition.get("reason") or ""),
        str(condition.get("message") or ""),
        milestone=milestone,
    )
