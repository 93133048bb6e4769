"""Which replicatedJobs may start: `dependsOn` (spec B1, KEP-672) and `startupPolicy: InOrder`
(B2, KEP-104), both for creating child Jobs and for resuming suspended ones (upstream
`reconcileReplicatedJobs` and `resumeJobsIfNecessary` walk the replicatedJobs the same way).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from daemon.controllers.jobset.jobs import Child, Children
from daemon.controllers.jobset.spec import (
    BLOCKING_RECREATE,
    COMPLETE,
    STARTUP_COMPLETED,
    STARTUP_IN_PROGRESS,
    JobSetView,
    ReplicatedJob,
)
from daemon.controllers.jobset.status import Counters, StatusDraft

IN_PROGRESS_REASON: Final = "InOrderStartupPolicyInProgress"
IN_PROGRESS_MESSAGE: Final = "in order startup policy is in progress"
COMPLETED_REASON: Final = "InOrderStartupPolicyCompleted"
COMPLETED_MESSAGE: Final = "in order startup policy has completed"


def dependency_reached(
    rj: ReplicatedJob, replicas: dict[str, int], counters: dict[str, Counters]
) -> str | None:
    """upstream `dependencyReachedStatus`: None when every dependency holds, else what is
    awaited. `replicas` holds only the replicatedJobs walked so far (earlier ones), so a
    dependency on a later or unknown one never holds."""
    for dep in rj.depends_on or ():
        wanted = replicas.get(dep.name)
        status = counters.get(dep.name)
        if wanted is None or status is None:
            return f"{rj.name} waits for {dep.name} {dep.status} (no status yet)"
        if dep.status == COMPLETE:
            if status.succeeded != wanted:
                return (
                    f"{rj.name} waits for {dep.name} Complete "
                    f"({status.succeeded}/{wanted} succeeded)"
                )
        elif status.ready + status.succeeded + status.failed != wanted:
            reached = status.ready + status.succeeded + status.failed
            return f"{rj.name} waits for {dep.name} Ready ({reached}/{wanted} ready or finished)"
    return None


def started(rj: ReplicatedJob, counters: dict[str, Counters]) -> bool:
    """upstream `allReplicasStarted`: ready + succeeded + failed Jobs equal replicas."""
    status = counters.get(rj.name) or Counters()
    return status.ready + status.succeeded + status.failed == rj.replicas


@dataclass
class Walk:
    """The replicatedJobs one pass may act on, and why the others wait."""

    allowed: list[ReplicatedJob] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    in_progress: bool = False


def walk(view: JobSetView, counters: dict[str, Counters], *, ordered: bool) -> Walk:
    """Walk replicatedJobs in spec order, skipping those whose dependencies do not hold; with
    `ordered` (InOrder and not suspended) skip those already started and stop after the first
    that has not."""
    result = Walk()
    replicas: dict[str, int] = {}
    for rj in view.spec.replicated_jobs:
        replicas[rj.name] = rj.replicas
        waiting = dependency_reached(rj, replicas, counters)
        if waiting is not None:
            result.waiting.append(waiting)
            continue
        if ordered and started(rj, counters):
            continue
        result.allowed.append(rj)
        if ordered:
            result.in_progress = True
            later = [r.name for r in view.spec.replicated_jobs[len(replicas) :]]
            if later:
                result.waiting.append(f"InOrder: {', '.join(later)} wait for {rj.name} to start")
            break
    return result


def _counters(view: JobSetView, draft: StatusDraft) -> dict[str, Counters]:
    return {rj.name: draft.counters(rj.name) for rj in view.spec.replicated_jobs}


def to_create(view: JobSetView, children: Children, draft: StatusDraft) -> tuple[list[Child], Walk]:
    """upstream `reconcileReplicatedJobs`: the missing Jobs this pass creates. A name still
    held by any Job (a previous attempt's being deleted, a foreign one) is not missing; with
    `BlockingRecreate` nothing is created while any previous Job exists. Sets the startup
    conditions (never while suspended)."""
    ordered = view.in_order and not view.suspended
    steps = walk(view, _counters(view, draft), ordered=ordered)
    blocked = view.strategy == BLOCKING_RECREATE and bool(children.previous)
    creates: list[Child] = []
    if not blocked:
        allowed = {rj.name for rj in steps.allowed}
        creates = [c for c in children.missing if c.rj.name in allowed]
    elif steps.allowed:
        steps.waiting.append(
            f"BlockingRecreate: no Job is created while {len(children.previous)} Job(s) of "
            "the previous attempt exist"
        )
    if ordered:
        if steps.in_progress:
            draft.set_condition(
                STARTUP_IN_PROGRESS, "True", IN_PROGRESS_REASON, IN_PROGRESS_MESSAGE
            )
        else:
            draft.set_condition(STARTUP_COMPLETED, "True", COMPLETED_REASON, COMPLETED_MESSAGE)
    return creates, steps


def to_resume(view: JobSetView, children: Children, draft: StatusDraft) -> tuple[list[Child], bool]:
    """upstream `resumeJobsIfNecessary`: the suspended active Jobs this pass resumes, and
    whether the JobSet counts as resumed (with InOrder, only once every replicatedJob has
    started; until then the pass sets StartupPolicyInProgress)."""
    steps = walk(view, _counters(view, draft), ordered=view.in_order)
    allowed = {rj.name for rj in steps.allowed}
    resumes = [
        c
        for c in children.active
        if c.rj.name in allowed and c.job is not None and c.job.spec.get("suspend") is True
    ]
    if view.in_order and steps.in_progress:
        draft.set_condition(STARTUP_IN_PROGRESS, "True", IN_PROGRESS_REASON, IN_PROGRESS_MESSAGE)
        return resumes, False
    return resumes, True
