"""In-place restart of a JobSet (`failurePolicy.restartStrategy: InPlaceRestart`, spec B5.2,
KEP-467): the controller's half of the attempt barrier.

The other half runs in every pod: upstream's `in-place-restart-agent` writes the pod's attempt
(`jobset.sigs.k8s.io/in-place-restart-attempt`) when it starts — the JobSet's
`currentInPlaceRestartAttempt` + 1, or 0 on a fresh JobSet — restarts its pod in place (exit
code → the pod's `RestartAllContainers` rule, KEP-5532) once its attempt is at or below
`previousInPlaceRestartAttempt`, and lifts its barrier once its attempt equals
`currentInPlaceRestartAttempt`. Here, each decision (upstream `reconcileInPlaceRestart`):

1. any container restarted more than `maxRestarts` times → Failed, ReachedMaxRestarts;
2. the attempts of the pods that are not Failed and carry the annotation are collected;
3. the newest attempt, less the restarts that do not count, above `maxRestarts` → Failed;
4. every expected pod (Σ replicas × parallelism) reports and all agree →
   `currentInPlaceRestartAttempt` = that attempt (the barrier lifts everywhere);
5. otherwise, nothing reported or only 0s → nothing (a fresh JobSet);
6. otherwise `previousInPlaceRestartAttempt` = newest − 1, never lowered → every pod behind
   the newest attempt restarts in place.

A container crash thus costs two JobSet status writes, whatever the JobSet's size: no pod is
deleted, created, rescheduled or re-initialised by the API.
"""

from __future__ import annotations

from daemon.controllers.jobset.failure import (
    REACHED_MAX_RESTARTS,
    REACHED_MAX_RESTARTS_MESSAGE,
    fail,
)
from daemon.controllers.jobset.jobs import Children
from daemon.controllers.jobset.spec import IN_PLACE_RESTART_ATTEMPT, JobSetView
from daemon.controllers.jobset.status import StatusDraft
from events.objects import Pod
from events.state import State


class AttemptError(ValueError):
    """A pod's attempt annotation that is not a non-negative integer."""


def pods_of(state: State, cluster: str, children: Children) -> list[Pod]:
    """The pods of every child Job this JobSet controls (upstream lists them by the
    `jobset-name` index), in a stable order."""
    pods: list[Pod] = []
    for child in children.slots:
        job = child.job
        if job is None or child in children.foreign:
            continue
        for pod in state.pods_of(f"Job/{cluster}/{job.namespace}/{job.name}"):
            owner = pod.controller
            if owner is not None and owner.uid == job.uid:
                pods.append(pod)
    return pods


def attempts(pods: list[Pod]) -> list[int]:
    """upstream `getPodInPlaceRestartAttempts`: Failed pods (which may linger beside their
    replacement) and pods whose agent has not written yet are skipped."""
    values: list[int] = []
    for pod in pods:
        if pod.phase == "Failed":
            continue
        raw = pod.annotations.get(IN_PLACE_RESTART_ATTEMPT)
        if raw is None:
            continue
        if not raw.isdecimal():
            raise AttemptError(
                f"pod {pod.namespace}/{pod.name}: {IN_PLACE_RESTART_ATTEMPT}={raw!r} is not a "
                "non-negative integer"
            )
        values.append(int(raw))
    return values


def expected_pods(view: JobSetView) -> int:
    total = 0
    for rj in view.spec.replicated_jobs:
        parallelism = rj.job_spec.get("parallelism")
        total += rj.replicas * (parallelism if isinstance(parallelism, int) else 1)
    return total


def reconcile(view: JobSetView, pods: list[Pod], draft: StatusDraft) -> str | None:
    """One pass of the barrier protocol; returns a note for the decision's reason."""
    policy = view.spec.failure_policy
    assert policy is not None
    limit = policy.max_restarts
    most = max((p.max_container_restarts for p in pods), default=0)
    if most > limit:
        fail(draft, REACHED_MAX_RESTARTS, REACHED_MAX_RESTARTS_MESSAGE)
        return f"InPlaceRestart: a container restarted {most} times, more than maxRestarts {limit}"
    try:
        values = attempts(pods)
    except AttemptError as exc:
        return f"InPlaceRestart: {exc}"
    newest = max(values, default=0)
    uncounted = draft.restarts - draft.restarts_towards_max
    if newest - uncounted > limit:
        fail(draft, REACHED_MAX_RESTARTS, REACHED_MAX_RESTARTS_MESSAGE)
        return (
            f"InPlaceRestart: attempt {newest} ({uncounted} uncounted) is past maxRestarts {limit}"
        )
    expected = expected_pods(view)
    if len(values) == expected and values and all(v == values[0] for v in values):
        if draft.current_in_place != values[0]:
            draft.current_in_place = values[0]
            return (
                f"InPlaceRestart: all {expected} pods at attempt {values[0]}; "
                f"currentInPlaceRestartAttempt={values[0]} lifts the barrier"
            )
        return None
    if not values or newest == 0:
        return None
    previous = newest - 1
    if draft.previous_in_place is not None and previous <= draft.previous_in_place:
        return None
    draft.previous_in_place = previous
    behind = sum(1 for v in values if v < newest) + (expected - len(values))
    return (
        f"InPlaceRestart: a pod reached attempt {newest}; previousInPlaceRestartAttempt="
        f"{previous} restarts the {behind} pod(s) behind it in place"
    )
