"""The Job controller for Jobs whose `spec.managedBy` names kbatchd (spec A0–A5).

`JobReconciler.decide` is one upstream `syncJob` (the sync itself is `jobsync.Sync`), cut
where upstream waits on an API call: writes a sync makes one after another become intents of
successive decisions, each computed from a state that shows the previous one's effects (the
runtime does not decide a key again before its intents are observed).

Accounting — where counts live and why nothing is counted twice. The Job's status in the
state is the only durable record, as upstream. A finished pod that still carries kbatchd's
tracking finalizer is not yet counted. Counting takes three decisions:

1. the pod's UID is written to `status.uncountedTerminatedPods` (Indexed successes: its
   index to `completedIndexes`, which also sets `succeeded`);
2. once that write is observed, the finalizer is removed from the pod;
3. once that is observed (or the pod is gone), the UID leaves the uncounted list and
   `succeeded`/`failed` grow by one, in that single status write.

So a pod without the finalizer and not in the uncounted lists has been counted (or needed no
counting), a UID moves into the counters in exactly one write, and a pod that vanishes after
step 2 stays counted. Every status write carries the Job's resourceVersion as a precondition,
so a write computed from a status the server has since changed is refused instead of counting
from stale numbers. Pods deleted for suspension or scale-down lose the finalizer in one
decision and are deleted by the next, so they are never counted and no decision touches a
pod twice.

What outlives the pods. A counted pod may vanish, and with it what only it showed; two facts
the reconciler needs later are therefore folded into the state from the pods' changes
(`job.projection`): the Job-wide back-off record (failures since the newest success, when the
newest finished: spec A5.4), and the highest pod ordinal the Job's pods carried, from which
new pods are numbered and named so that no name recurs in the Job's life (`jobpods`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from daemon.controllers.base import Decision, split_ref
from daemon.controllers.job import backoff
from daemon.controllers.job.gang import gang_for, served
from daemon.controllers.job.pods import owned_pods, release_patch
from daemon.controllers.job.spec import JobSpecError, managed_by, view_job
from daemon.controllers.job.sync import Sync
from events.intents import Patch
from events.objects import JOB_TRACKING_FINALIZER, Job, Pod
from events.state import State

DEFAULT_MANAGER: Final = "kbatchd.dev/job-controller"
DEFAULT_FINALIZER: Final = JOB_TRACKING_FINALIZER
DEFAULT_READY_DECREASE_GRACE_MS: Final = 0
DEFAULT_BATCH_MS: Final = 1000

if TYPE_CHECKING:
    from daemon.service.config import Settings


@dataclass(frozen=True)
class JobReconciler:
    """The Job reconciler's settings; `decide` is pure."""

    managed_by: str = DEFAULT_MANAGER
    # Beyond upstream (enhancements #6262): a pod terminating this long on a NotReady node is
    # treated as failed and replaced even under podReplacementPolicy Failed. None: off.
    stuck_terminating_after_ms: int | None = None
    # Never `batch.kubernetes.io/job-tracking`: external controllers must not use the
    # built-in controller's finalizer (spec A0). The fold's back-off record follows
    # JOB_TRACKING_FINALIZER, so another value would leave the Job-wide back-off blind.
    finalizer: str = DEFAULT_FINALIZER
    # Pod re-creation back-off after failures: base doubling per failure, capped (A5.4).
    backoff_base_ms: int = backoff.BASE_MS
    backoff_max_ms: int = backoff.MAX_MS
    # A drop of status.ready is written only once it outlasts this (0: at once, as upstream);
    # see `jobready` for why.
    ready_decrease_grace_ms: int = DEFAULT_READY_DECREASE_GRACE_MS
    # Upstream's sync batch period. A Job's pod changes are decided at most once this often
    # (`batch_windows`), and while pods run, counters-only status changes wait until this
    # long after the Job's previous status write (`status.batched_until`). 0: neither waits.
    batch_ms: int = DEFAULT_BATCH_MS
    # Jobs without spec.scheduling get a Workload and PodGroup too, as upstream's
    # WorkloadWithJob gate gives them (`daemon.controllers.job.gang`).
    workload_with_job: bool = False
    # The manager cluster of `[reconcilers.multicluster]` ("" = none) and its label: a Job
    # there with the label set to "true" runs in a worker, as a copy; the dispatcher handles
    # it on the manager, so this controller runs no pod of it there.
    dispatch_cluster: str = ""
    dispatch_label: str = ""

    @property
    def name(self) -> str:
        return "job"

    @property
    def kinds(self) -> frozenset[str]:
        # Pods too: a pod no Job of ours owns any more still carries the finalizer.
        return frozenset({"Job", "Pod"})

    @property
    def batch_windows(self) -> dict[str, int]:
        # A Job's pod changes are batched, as upstream's (`base.Batching`).
        return {"Job": self.batch_ms} if self.batch_ms else {}

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        kind, cluster, namespace, name = split_ref(key)
        if kind == "Pod":
            return self._release_orphan(state, cluster, f"{cluster}/{namespace}/{name}")
        if kind != "Job":
            return None
        job = state.jobs.get(f"{cluster}/{namespace}/{name}")
        if job is None:
            return self._release_orphans(state, cluster, namespace, name)
        if managed_by(job) != self.managed_by:
            return None
        if cluster == self.dispatch_cluster and job.labels.get(self.dispatch_label) == "true":
            return None
        try:
            view = view_job(job)
            gang = (
                None
                if view.finished
                else gang_for(view, served(state, cluster), self.workload_with_job)
            )
        except JobSpecError as exc:
            return Decision(f"InvalidJob: {namespace}/{name}: {exc}")
        pods = owned_pods(state.pods_of(key), job.uid)
        if view.finished:
            return self._release_finished(cluster, job, pods)
        return Sync(self, state, cluster, view, pods, now, gang).decide()

    # -- finalizers of pods nobody counts any more -----------------------------------------

    def release(self, cluster: str, pod: Pod) -> Patch:
        return release_patch(cluster, pod, self.finalizer)

    def _release_orphans(
        self, state: State, cluster: str, namespace: str, name: str
    ) -> Decision | None:
        orphans = sorted(
            (
                pod
                for pod in state.pods_of(f"Job/{cluster}/{namespace}/{name}")
                if self.finalizer in pod.finalizers
            ),
            key=lambda p: p.name,
        )
        if not orphans:
            return None
        return Decision(
            f"ReleaseOrphans: Job {namespace}/{name} is gone; removing the tracking finalizer "
            f"from {len(orphans)} pod(s)",
            tuple(self.release(cluster, pod) for pod in orphans),
        )

    def _release_orphan(self, state: State, cluster: str, key: str) -> Decision | None:
        """Upstream's orphan pods: a pod carrying the finalizer whose controller is no Job
        kbatchd sees (none, since `kubectl delete job --cascade=orphan` cleared its owner
        references; another kind; a Job gone, or replaced by one of the same name) is
        released, whenever that happened (a start decides every pod)."""
        pod = state.pods.get(key)
        if pod is None or self.finalizer not in pod.finalizers:
            return None  # the fast path: most pod changes are of pods no finalizer holds
        owner = pod.controller
        if owner is not None and owner.kind == "Job":
            job = state.jobs.get(f"{cluster}/{pod.namespace}/{owner.name}")
            if job is not None and job.uid == owner.uid:
                return None  # its Job's own decisions count and release it
        if f"Pod/{key}" in state.expected:
            return None  # already being released (by its gone Job's decision, say)
        whose = "no controller" if owner is None else f"{owner.kind} {owner.name}, not seen"
        return Decision(
            f"ReleaseOrphan: pod {pod.namespace}/{pod.name} ({whose}); removing the tracking "
            "finalizer",
            (self.release(cluster, pod),),
        )

    def _release_finished(self, cluster: str, job: Job, pods: list[Pod]) -> Decision | None:
        holding = [pod for pod in pods if self.finalizer in pod.finalizers]
        if not holding:
            return None
        return Decision(
            f"Finished: Job {job.namespace}/{job.name} is finished; removing the tracking "
            f"finalizer from {len(holding)} pod(s)",
            tuple(self.release(cluster, pod) for pod in holding),
        )


def configured(settings: Settings) -> JobReconciler:
    job = settings.reconcilers.job
    stuck = job.stuck_terminating_after_seconds
    return JobReconciler(
        managed_by=job.managed_by,
        stuck_terminating_after_ms=int(stuck * 1000) if stuck else None,
        backoff_base_ms=int(job.backoff_base_seconds * 1000),
        backoff_max_ms=int(job.backoff_max_seconds * 1000),
        ready_decrease_grace_ms=int(job.ready_decrease_grace_seconds * 1000),
        batch_ms=int(job.sync_batch_seconds * 1000),
        workload_with_job=job.workload_with_job,
        **dispatched(settings),
    )


def dispatched(settings: Settings) -> dict[str, str]:
    """``dispatch_cluster`` and ``dispatch_label`` of a controller that leaves to the
    multi-cluster dispatcher the workloads submitted to its manager cluster (none when it is
    off)."""
    section = settings.reconcilers.multicluster
    if not section.enabled:
        return {}
    return {"dispatch_cluster": section.manager, "dispatch_label": section.label}
