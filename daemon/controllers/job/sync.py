"""One sync of one managed, unfinished Job (upstream `syncJob`), as one pure decision.

In upstream's order: count what finished, decide what the Job is finishing towards
(`FailureTarget`/`SuccessCriteriaMet`), otherwise manage its pods (suspend, scale down,
create within back-off), then account finished pods and write the status the API server
accepts. The accounting protocol is described in `daemon.controllers.job.reconciler`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from daemon.controllers.base import Decision
from daemon.controllers.job import backoff, exclusive, podfailure
from daemon.controllers.job.gang import (
    JobGang,
    controlled_by,
    never_started,
    podgroup_body_for,
    workload_body_for,
)
from daemon.controllers.job.indexes import Indexes
from daemon.controllers.job.pods import (
    UNKNOWN_INDEX,
    absolute_failure_count,
    annotation_count,
    completion_index,
    is_active,
    is_terminating,
    pod_body,
    pod_name,
    pods_for_removal,
    release_patch,
)
from daemon.controllers.job.projection import finish_time
from daemon.controllers.job.ready import hold_ready_drop
from daemon.controllers.job.spec import (
    COMPLETE,
    FAILED,
    FAILURE_TARGET,
    INDEX_FAILURE_COUNT,
    SUCCESS_CRITERIA_MET,
    SUSPENDED,
    JobView,
)
from daemon.controllers.job.status import (
    Desired,
    batched_until,
    ensure_condition,
    parse_time,
    status_patch,
)
from daemon.controllers.job.successpolicy import success_policy_message
from events.intents import Create, Delete, Intent, Patch
from events.objects import Pod, rfc3339
from events.state import State


class Options(Protocol):
    """What a sync reads of the Job reconciler's settings (`reconciler.JobReconciler`)."""

    @property
    def finalizer(self) -> str: ...
    @property
    def stuck_terminating_after_ms(self) -> int | None: ...
    @property
    def backoff_base_ms(self) -> int: ...
    @property
    def backoff_max_ms(self) -> int: ...
    @property
    def ready_decrease_grace_ms(self) -> int: ...
    @property
    def batch_ms(self) -> int: ...


# upstream MaxPodCreateDeletePerSync and MaxUncountedPods
MAX_POD_CHANGES: Final = 500
MAX_UNCOUNTED: Final = 500

# kbatchd's own condition for pods treated as failed because they are stuck terminating.
STUCK_TERMINATING: Final = "PodsStuckTerminating"
_STUCK_LISTED: Final = 5

# `Sync.link` while the Job's Workload is being made: no pod is created before it exists.
_WAIT: Final = "\0wait"

_SUCCESS: Final = "success"
_FAILURE: Final = "failure"


@dataclass(frozen=True)
class _Target:
    """The outcome the Job is finishing towards (upstream `finishedCondition`)."""

    kind: str
    reason: str
    message: str
    new: bool

    @property
    def interim(self) -> str:
        return SUCCESS_CRITERIA_MET if self.kind == _SUCCESS else FAILURE_TARGET

    @property
    def terminal(self) -> str:
        return COMPLETE if self.kind == _SUCCESS else FAILED


@dataclass
class _Books:
    """Counters and uncounted UIDs as this decision writes them."""

    uncounted_succeeded: list[str]
    uncounted_failed: list[str]
    succeeded: int = 0
    failed: int = 0
    moved: tuple[int, int] = (0, 0)
    added: tuple[int, int] = (0, 0)
    new_indexes: list[int] = field(default_factory=list)
    released: int = 0
    truncated: bool = False

    @property
    def in_flight(self) -> int:
        return len(self.new_indexes) + len(self.uncounted_succeeded) + len(self.uncounted_failed)

    @property
    def settled(self) -> bool:
        return self.in_flight == 0 and not self.truncated


@dataclass
class _Plan:
    """What one decision does, collected while the sync runs."""

    releases: list[Pod] = field(default_factory=list)
    deletes: list[Pod] = field(default_factory=list)
    # Pods marked DisruptionTarget before an exclusive-placement deletion (`exclusive`).
    disruptions: list[Pod] = field(default_factory=list)
    creates: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # The Job's Workload or PodGroup (`gang`), created before (or with) its pods.
    objects: list[Create] = field(default_factory=list)
    requeue: list[int] = field(default_factory=list)
    head: str | None = None
    notes: list[str] = field(default_factory=list)
    # Pods held back for their exclusive-placement leader: worth a decision of its own.
    holding: str | None = None

    @property
    def releasing(self) -> set[str]:
        return {pod.name for pod in self.releases}


class Sync:
    """One sync of one managed, unfinished Job."""

    def __init__(
        self,
        rec: Options,
        state: State,
        cluster: str,
        view: JobView,
        pods: list[Pod],
        now: int,
        gang: JobGang | None = None,
    ) -> None:
        self.rec = rec
        self.state = state
        self.cluster = cluster
        self.view = view
        self.job = view.job
        # The key of the fold's per-Job records (back-off, pod ordinals).
        self.key = f"Job/{cluster}/{view.job.namespace}/{view.job.name}"
        self.pods = pods
        self.now = now
        self.plan = _Plan()
        self.policy = view.spec.pod_failure_policy
        self.stuck = self._stuck_pods()
        self.active_pods = [p for p in pods if is_active(p)]
        self.uncounted_succeeded = set(view.uncounted_succeeded)
        self.uncounted_failed = set(view.uncounted_failed)
        self.matches: dict[str, podfailure.Match] = {}
        self.exclusive_key = exclusive.topology_key(view.template_meta)
        self._leader: exclusive.Leader | None = None
        self.gang = gang
        # The PodGroup new pods join (`_gang_link`): a name, None (ungrouped) or _WAIT.
        self.link: str | None = None

    # -- pod predicates ----------------------------------------------------------------------

    def tracked(self, pod: Pod) -> bool:
        return self.rec.finalizer in pod.finalizers

    def considered_failed(self, pod: Pod) -> bool:
        """upstream `isPodFailed`, plus pods stuck terminating on a NotReady node."""
        if pod.phase == "Failed":
            return True
        if not is_terminating(pod):
            return False
        return not self.view.only_replace_failed or pod.name in self.stuck

    def valid_index(self, pod: Pod) -> bool:
        if not self.view.indexed:
            return True
        index = completion_index(pod)
        return index != UNKNOWN_INDEX and index < self.view.index_limit

    def match(self, pod: Pod) -> podfailure.Match:
        verdict = self.matches.get(pod.name)
        if verdict is None:
            verdict = self.matches[pod.name] = podfailure.match(self.policy, pod)
        return verdict

    def counts_as_failure(self, pod: Pod) -> bool:
        return self.match(pod).counts

    def _stuck_pods(self) -> dict[str, str]:
        """Pods terminating on a NotReady (or vanished) node past the bound → their node.
        Only Jobs that otherwise wait for terminating pods are affected."""
        bound = self.rec.stuck_terminating_after_ms
        if bound is None or not self.view.only_replace_failed:
            return {}
        stuck: dict[str, str] = {}
        for pod in self.pods:
            if not is_terminating(pod) or not pod.node_name:
                continue
            assert pod.deletion_ts is not None
            due = pod.deletion_ts + bound
            if self.now < due:
                self.plan.requeue.append(due)
                continue
            node = self.state.nodes.get(f"{self.cluster}//{pod.node_name}")
            if node is None or not node.ready:
                stuck[pod.name] = pod.node_name
        return stuck

    def leader(self) -> exclusive.Leader:
        """The leader pod followers are placed by (exclusive placement only)."""
        if self._leader is None:
            assert self.exclusive_key is not None
            self._leader = exclusive.find_leader(
                self.pods, self.state.nodes, self.cluster, self.exclusive_key
            )
        return self._leader

    # -- the sync ------------------------------------------------------------------------------

    def decide(self) -> Decision | None:
        view = self.view
        new_succeeded = [
            p
            for p in self.pods
            if self.tracked(p)
            and p.uid not in self.uncounted_succeeded
            and self.valid_index(p)
            and p.phase == "Succeeded"
        ]
        new_failed = [
            p
            for p in self.pods
            if self.tracked(p)
            and p.uid not in self.uncounted_failed
            and self.valid_index(p)
            and self.considered_failed(p)
        ]
        self.succeeded_total = (
            (view.status.succeeded or 0) + len(new_succeeded) + len(self.uncounted_succeeded)
        )
        self.failed_total = (
            (view.status.failed or 0)
            + sum(1 for p in new_failed if self.counts_as_failure(p))
            + len(self.uncounted_failed)
        )
        self.start = view.status.start_time
        if self.start is None and not view.suspended:
            self.start = rfc3339(self.now)
        self.conditions = view.conditions
        self.completed = Indexes()
        self.failed_indexes = Indexes()
        self.delayed: dict[int, Pod] = {}
        target = self._target()
        finishing = target is not None
        if not finishing:
            target = self._manage_or_complete()
        books = self._books(target)
        if finishing:
            self._finish()
        deleted = self.plan.deletes
        active = len(self.active_pods) - len(deleted) + len(self.plan.creates)
        ready = sum(1 for p in self.active_pods if p.ready) - sum(1 for p in deleted if p.ready)
        terminating = sum(1 for p in self.pods if is_terminating(p)) + len(deleted)
        self._note_stuck()
        return self._conclude(target, books, active, ready, terminating)

    # -- what the Job is finishing towards ---------------------------------------------------

    def _target(self) -> _Target | None:
        view = self.view
        existing = self._existing_target()
        target = existing or self._pod_failure_policy_target()
        if target is None:
            target = self._limit_target()
        if view.indexed:
            self.completed = view.completed_indexes.union(
                completion_index(p)
                for p in self.pods
                if p.phase == "Succeeded" and self.tracked(p) and self.valid_index(p)
            )
            self.succeeded_total = self.completed.total()
            if view.per_index:
                self.failed_indexes = view.failed_indexes
                if existing is None:
                    # While finishing, the pods failing are the ones being terminated for
                    # it; they fail no index.
                    self.failed_indexes = self.failed_indexes.union(
                        completion_index(p)
                        for p in self.pods
                        if self.tracked(p) and self.valid_index(p) and self._index_failed(p)
                    )
                if target is None:
                    target = self._failed_indexes_target()
                self.delayed = self._delayed_per_index()
            if target is None:
                target = self._success_policy_target()
        return target

    def _existing_target(self) -> _Target | None:
        met = self.view.condition_true(SUCCESS_CRITERIA_MET)
        if met is not None:
            return _Target(_SUCCESS, met.get("reason") or "", met.get("message") or "", False)
        aimed = self.view.condition_true(FAILURE_TARGET)
        if aimed is not None:
            return _Target(_FAILURE, aimed.get("reason") or "", aimed.get("message") or "", False)
        return None

    def _pod_failure_policy_target(self) -> _Target | None:
        if self.policy is None:
            return None
        for pod in sorted(self.pods, key=lambda p: (finish_time(p), p.name)):
            if self.considered_failed(pod):
                message = self.match(pod).message
                if message is not None:
                    return _Target(_FAILURE, "PodFailurePolicy", message, True)
        return None

    def _limit_target(self) -> _Target | None:
        view = self.view
        if self.failed_total > view.backoff_limit or self._past_restart_limit():
            return _Target(
                _FAILURE,
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                True,
            )
        deadline = self._deadline()
        if deadline is None:
            return None
        if self.now >= deadline:
            return _Target(
                _FAILURE, "DeadlineExceeded", "Job was active longer than specified deadline", True
            )
        self.plan.requeue.append(deadline)
        return None

    def _deadline(self) -> int | None:
        seconds = self.view.spec.active_deadline_seconds
        started = parse_time(self.start)
        if seconds is None or started is None or self.view.suspended:
            return None
        return started + _ceil_ms(_go_duration_ns(seconds))

    def _past_restart_limit(self) -> bool:
        """`restartPolicy: OnFailure` restarts count against backoffLimit."""
        if self.view.restart_policy != "OnFailure":
            return False
        restarts = sum(p.restart_count for p in self.pods if p.phase in ("Pending", "Running"))
        limit = self.view.backoff_limit
        return restarts > 0 if limit == 0 else restarts >= limit

    def _index_failed(self, pod: Pod) -> bool:
        if not self.considered_failed(pod):
            return False
        verdict = self.match(pod)
        if verdict.action == podfailure.FAIL_INDEX:
            return True
        limit = self.view.spec.backoff_limit_per_index or 0
        return verdict.counts and annotation_count(pod, INDEX_FAILURE_COUNT) >= limit

    def _failed_indexes_target(self) -> _Target | None:
        failed = self.failed_indexes.total()
        maximum = self.view.spec.max_failed_indexes
        if maximum is not None and failed > maximum:
            return _Target(
                _FAILURE,
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes",
                True,
            )
        if failed > 0 and failed + self.completed.total() >= self.view.index_limit:
            return _Target(_FAILURE, "FailedIndexes", "Job has failed indexes", True)
        return None

    def _success_policy_target(self) -> _Target | None:
        message = success_policy_message(
            self.view.spec.success_policy, self.view.index_limit, self.completed
        )
        if message is None:
            return None
        return _Target(_SUCCESS, "SuccessPolicy", message, True)

    def _delayed_per_index(self) -> dict[int, Pod]:
        """The newest failed pod of each index still waiting for a replacement: it keeps its
        finalizer so that the replacement can inherit its failure count."""
        active = {completion_index(p) for p in self.active_pods}
        delayed: dict[int, Pod] = {}
        for pod in self.pods:
            if not (self.tracked(pod) and self.valid_index(pod) and self.considered_failed(pod)):
                continue
            index = completion_index(pod)
            if index in self.completed or index in self.failed_indexes or index in active:
                continue
            current = delayed.get(index)
            if current is None or (
                absolute_failure_count(current) <= absolute_failure_count(pod)
                and finish_time(pod) >= finish_time(current)
            ):
                delayed[index] = pod
        return delayed

    # -- pods ---------------------------------------------------------------------------------

    def _finish(self) -> None:
        """Delete the active pods, keeping finalizers so that they are counted; a pod whose
        finalizer this decision removes is deleted by the next one (never both at once)."""
        releasing = self.plan.releasing
        doomed = [p for p in self.active_pods if p.name not in releasing][:MAX_POD_CHANGES]
        self.plan.deletes += doomed
        if doomed:
            self.plan.notes.append(f"deleting {len(doomed)} active pod(s)")

    def _manage_or_complete(self) -> _Target | None:
        view = self.view
        managed = self.job.deletion_ts is None
        if managed:
            self._manage()
        active = len(self.active_pods) - len(self.plan.deletes) + len(self.plan.creates)
        if view.completions is None:
            complete = self.succeeded_total > 0 and active == 0
        else:
            complete = self.succeeded_total >= view.completions and active == 0
        if complete:
            message = "Reached expected number of succeeded pods"
            return _Target(_SUCCESS, "CompletionsReached", message, True)
        if managed:
            self._suspension(active)
        return None

    def _manage(self) -> None:
        """upstream `manageJob`, deletions in two steps: the tracking finalizer is removed
        first, so that a pod deleted for suspension or scale-down is never counted, and the
        pod is deleted by a later decision that sees the removal. Intents of one decision
        then never touch the same pod twice, whatever order the actuator runs them in."""
        view = self.view
        if self.gang is not None:
            self.link = self._gang_link(self.gang)
        active = len(self.active_pods)
        released = [p for p in self.active_pods if not self.tracked(p)]
        if released:
            # Only pods chosen for deletion run without the finalizer; their outcome would
            # not be counted, so they are deleted even if no longer in excess.
            doomed = released[:MAX_POD_CHANGES]
            self.plan.deletes += doomed
            verb = "Suspended" if view.suspended else "DeletePods"
            self.plan.head = f"{verb}: deleting {len(doomed)} released pod(s)"
            return
        if view.suspended:
            doomed = pods_for_removal(view, self.active_pods, active)[:MAX_POD_CHANGES]
            self.plan.releases += doomed
            if doomed:
                self.plan.head = (
                    f"Suspended: removing the tracking finalizer of {len(doomed)} active pod(s) "
                    "to delete them"
                )
            return
        if self._misplaced():
            return
        want = self._wanted(active)
        doomed = pods_for_removal(view, self.active_pods, max(active - want, 0))
        doomed = doomed[:MAX_POD_CHANGES]
        if doomed:
            # A sync that deletes never also creates; deletion wins (upstream).
            self.plan.releases += doomed
            self.plan.head = (
                f"DeletePods: removing the tracking finalizer of {len(doomed)} pod(s) to delete "
                f"them; {active} active of {want} wanted"
            )
            return
        waiting = 0
        if view.only_replace_failed:
            waiting = sum(1 for p in self.pods if is_terminating(p) and p.name not in self.stuck)
        missing = min(want - waiting - active, MAX_POD_CHANGES)
        if missing > 0:
            self._create(missing, active, want)

    def _gang_link(self, gang: JobGang) -> str | None:
        """The PodGroup the Job's new pods join, making the Job's Workload or PodGroup where
        it is missing (`daemon.controllers.job.gang`); `_WAIT` while the Workload is made."""
        job, view = self.job, self.view
        prefix = f"{self.cluster}/{job.namespace}/"
        workload = self.state.workloads.get(prefix + gang.workload)
        if workload is None:
            if not never_started(view, self.pods):
                self.plan.notes.append(
                    f"pods ungrouped: the Job started without its Workload {gang.workload}"
                )
                return None
            body = workload_body_for(view, gang)
            self.plan.objects.append(
                Create(self.cluster, "Workload", job.namespace, gang.workload, body=body)
            )
            self.plan.head = (
                f"WorkloadCreated: creating Workload {gang.workload} "
                f"({_policy(gang)}); the pods wait for it"
            )
            return _WAIT
        if not controlled_by(workload, job.uid):
            self.plan.notes.append(
                f"pods ungrouped: Workload {gang.workload} is not controlled by this Job"
            )
            return None
        podgroup = self.state.podgroups.get(prefix + gang.podgroup)
        if podgroup is None:
            body = podgroup_body_for(view, gang, workload)
            self.plan.objects.append(
                Create(self.cluster, "PodGroup", job.namespace, gang.podgroup, body=body)
            )
            self.plan.notes.append(f"PodGroupCreated: creating PodGroup {gang.podgroup}")
        elif not controlled_by(podgroup, job.uid):
            self.plan.notes.append(
                f"pods ungrouped: PodGroup {gang.podgroup} is not controlled by this Job"
            )
            return None
        return gang.podgroup

    def _misplaced(self) -> bool:
        """upstream's exclusive-placement pod reconciler: followers sent to another domain
        than their leader's are marked DisruptionTarget, then deleted by a later decision
        (a decision never touches a pod twice)."""
        key = self.exclusive_key
        if key is None:
            return False
        followers = exclusive.misplaced_followers(self.pods, key, self.leader())
        if not followers:
            return False
        followers = followers[:MAX_POD_CHANGES]
        marked = [p for p in followers if p.conditions.get(exclusive.DISRUPTION_TARGET) == "True"]
        self.plan.deletes += marked
        self.plan.disruptions += [p for p in followers if p not in marked]
        self.plan.head = (
            f"{exclusive.VIOLATION_REASON}: leader pod is in {key}={self.leader().domain} but "
            f"a follower's nodeSelector names another domain; deleting {len(marked)} and "
            f"marking {len(followers) - len(marked)} follower pod(s) DisruptionTarget"
        )
        return True

    def _wanted(self, active: int) -> int:
        view = self.view
        if view.completions is None:
            # A work queue: after the first success let the running pods finish, add none.
            return active if self.succeeded_total > 0 else view.parallelism
        return max(0, min(view.completions - self.succeeded_total, view.parallelism))

    def _create(self, missing: int, active: int, want: int) -> None:
        view = self.view
        if self.link == _WAIT:
            if view.status.start_time is None:
                self.start = None  # not started until its pods can be made
            return
        # Per-index back-off gates each index below instead (upstream ignores the Job-wide
        # record when backoffLimitPerIndex is set).
        record = None if view.per_index else self.state.job_backoff.get(self.key)
        if record is not None:
            ready_at = backoff.ready_at(
                record.failures,
                record.last_failure_ms,
                self.rec.backoff_base_ms,
                self.rec.backoff_max_ms,
            )
            if ready_at is not None and ready_at > self.now:
                self._back_off(ready_at, f"{record.failures} failure(s) since the last success")
                return
        slots: list[int | None] = [None] * missing
        if view.indexed:
            indexes = self._pending_indexes(missing)
            if view.per_index:
                indexes = self._indexes_past_backoff(indexes)
            slots = list(indexes)
        self._create_pods(slots)
        if self.plan.creates:
            self.plan.head = (
                f"CreatePods: creating {len(self.plan.creates)} pod(s); "
                f"{active} active of {want} wanted"
            )

    def _back_off(self, ready_at: int, why: str) -> None:
        due = max(ready_at, self.now + backoff.MIN_REQUEUE_MS)
        self.plan.requeue.append(due)
        self.plan.head = f"BackOff: no new pods before {rfc3339(due)} ({why})"

    def _pending_indexes(self, count: int) -> list[int]:
        busy = [completion_index(p) for p in self.active_pods]
        if self.view.only_replace_failed:
            busy += [
                completion_index(p)
                for p in self.pods
                if is_terminating(p) and p.name not in self.stuck
            ]
        taken = self.completed.union(i for i in busy if i != UNKNOWN_INDEX)
        taken = taken.merge(self.failed_indexes)
        return taken.first_missing(count, self.view.index_limit)

    def _indexes_past_backoff(self, indexes: list[int]) -> list[int]:
        ready: list[int] = []
        soonest: int | None = None
        for index in indexes:
            previous = self.delayed.get(index)
            due = None
            if previous is not None:
                due = backoff.ready_at(
                    absolute_failure_count(previous) + 1,
                    finish_time(previous),
                    self.rec.backoff_base_ms,
                    self.rec.backoff_max_ms,
                )
            if due is None or due <= self.now:
                ready.append(index)
            elif soonest is None or due < soonest:
                soonest = due
        if soonest is not None:
            if ready:
                # The indexes still backing off are created by a later decision.
                self.plan.requeue.append(max(soonest, self.now + backoff.MIN_REQUEUE_MS))
            else:
                self._back_off(soonest, f"index back-off for index(es) {Indexes.of(indexes)}")
        return ready

    def _create_pods(self, indexes: list[int | None]) -> None:
        """Number the new pods on from the highest ordinal any pod of the Job ever carried
        (see `jobpods`), skipping a name some other pod in the namespace holds."""
        job = self.job
        pods = self.state.pods
        prefix = f"{self.cluster}/{job.namespace}/"
        ordinal = self.state.pod_ordinals.get(self.key, 0)
        shaped = exclusive.shaped(self.view.template_meta)
        key = self.exclusive_key if self.view.indexed else None
        held = 0
        for index in indexes:
            name = pod_name(job.name, job.uid, index, ordinal)
            while prefix + name in pods:
                ordinal += 1
                name = pod_name(job.name, job.uid, index, ordinal)
            counts = self._failure_counts(index) if self.view.per_index else None
            body = pod_body(self.view, name, ordinal, self.rec.finalizer, index, counts, self.link)
            if shaped:
                leader = self.leader() if key is not None and index != 0 else None
                if not exclusive.shape_pod(body, index, key, leader):
                    held += 1
                    continue
            self.plan.creates.append((name, body))
            ordinal += 1
        if held:
            # Upstream's pod webhook rejects such a follower and the Job controller retries;
            # kbatchd creates its pods itself, so it holds them until the leader is bound.
            self.plan.holding = (
                f"ExclusivePlacement: holding {held} follower pod(s) until the leader is "
                f"bound ({self.leader().waiting})"
            )
            self.plan.notes.append(self.plan.holding)

    def _failure_counts(self, index: int | None) -> tuple[int, int]:
        previous = None if index is None else self.delayed.get(index)
        if previous is None:
            return 0, 0
        failures = annotation_count(previous, INDEX_FAILURE_COUNT)
        ignored = absolute_failure_count(previous) - failures
        if self.counts_as_failure(previous):
            return failures + 1, ignored
        return failures, ignored + 1

    def _suspension(self, active: int) -> None:
        if self.view.suspended:
            if active > 0:
                return  # Suspended=True once no pod is active (what the API server checks)
            # Cleared while suspended (KEP-5440), so that a queueing controller can change
            # the template and resume in one call; resuming sets it again.
            self.start = None
            if ensure_condition(
                self.conditions, SUSPENDED, "True", "JobSuspended", "Job suspended", self.now
            ):
                self.plan.head = self.plan.head or "Suspended: Job suspended"
        elif ensure_condition(
            self.conditions, SUSPENDED, "False", "JobResumed", "Job resumed", self.now
        ):
            # startTime restarts from now because it was cleared while suspended; one still
            # set may not change on an unsuspended Job (the API server refuses it).
            self.plan.notes.append("Job resumed")

    def _note_stuck(self) -> None:
        if self.stuck:
            listed = ", ".join(
                f"{self.job.namespace}/{name} (node {node})"
                for name, node in sorted(self.stuck.items())[:_STUCK_LISTED]
            )
            more = len(self.stuck) - _STUCK_LISTED
            message = (
                f"{len(self.stuck)} pod(s) terminating on a NotReady node for at least "
                f"{(self.rec.stuck_terminating_after_ms or 0) // 1000}s were treated as failed "
                f"and replaced: {listed}" + (f" and {more} more" if more > 0 else "")
            )
            if ensure_condition(
                self.conditions, STUCK_TERMINATING, "True", "NodeNotReady", message, self.now
            ):
                self.plan.notes.append(f"StuckTerminating: {message}")
        elif ensure_condition(
            self.conditions,
            STUCK_TERMINATING,
            "False",
            "NoneStuck",
            "no pod is stuck terminating",
            self.now,
        ):
            self.plan.notes.append("no pod is stuck terminating any more")

    # -- accounting and the status write ------------------------------------------------------

    def _books(self, target: _Target | None) -> _Books:
        """The counters after this decision's status write: UIDs whose pod lost its
        finalizer (or vanished) move from the uncounted lists into the counters, newly
        finished pods enter the lists."""
        view = self.view
        with_finalizer = {p.uid for p in self.pods if self.tracked(p)}
        books = _Books(
            uncounted_succeeded=[u for u in view.uncounted_succeeded if u in with_finalizer],
            uncounted_failed=[u for u in view.uncounted_failed if u in with_finalizer],
        )
        books.moved = (
            len(view.uncounted_succeeded) - len(books.uncounted_succeeded),
            len(view.uncounted_failed) - len(books.uncounted_failed),
        )
        books.succeeded = (view.status.succeeded or 0) + books.moved[0]
        books.failed = (view.status.failed or 0) + books.moved[1]
        self._account(target, books)
        if view.indexed:
            books.succeeded = self.completed.total()
        return books

    def _conclude(
        self, target: _Target | None, books: _Books, active: int, ready: int, terminating: int
    ) -> Decision | None:
        view = self.view
        if target is not None and target.new:
            ensure_condition(
                self.conditions, target.interim, "True", target.reason, target.message, self.now
            )
        # The terminal condition is written once everything is counted and every finalizer
        # removed: nothing uncounted, nothing recorded by this very write, nothing running.
        finished = target is not None and books.settled and active == 0 and terminating == 0
        completion_time = None
        if finished:
            assert target is not None
            ensure_condition(
                self.conditions, target.terminal, "True", target.reason, target.message, self.now
            )
            if target.kind == _SUCCESS:
                completion_time = rfc3339(self.now)
            if self.start is None:
                self.start = rfc3339(self.now)
        want = Desired(
            active=active,
            ready=ready,
            terminating=terminating,
            succeeded=books.succeeded,
            failed=books.failed,
            start_time=self.start,
            uncounted_succeeded=books.uncounted_succeeded,
            uncounted_failed=books.uncounted_failed,
            conditions=self.conditions,
            completed_indexes=str(self.completed) if view.indexed else None,
            failed_indexes=str(self.failed_indexes) if view.per_index else None,
            completion_time=completion_time,
        )
        patch = self._hold_ready_drop(status_patch(view, want), ready)
        intents = self._intents(self._batch(patch, active))
        requeue = min((t for t in self.plan.requeue if t > self.now), default=None)
        if not intents:
            if self.plan.holding is not None:
                return Decision(self.plan.holding, (), requeue)
            if requeue is None:
                return None
            waiting = self.plan.head or f"Waiting: nothing to do before {rfc3339(requeue)}"
            return Decision(waiting, (), requeue)
        reason = self._reason(target, finished, books, active, terminating)
        return Decision(reason, intents, requeue)

    def _hold_ready_drop(self, patch: dict[str, Any], ready: int) -> dict[str, Any]:
        """Leave out a patch that would only lower `ready` while the drop is in its grace
        window (`jobready`); any other change is written at once with the true count."""
        if set(patch) != {"ready"}:
            return patch
        written = self.view.status.ready
        until = hold_ready_drop(
            written,
            ready,
            (p.ready_changed for p in self.active_pods if not p.ready),
            self.now,
            self.rec.ready_decrease_grace_ms,
        )
        if until is None:
            return patch
        self.plan.requeue.append(until)
        self.plan.head = self.plan.head or (
            f"ReadyDropHeld: status.ready stays {written} while {ready} pod(s) are ready; "
            f"the drop is written at {rfc3339(until)} unless the pods are ready again"
        )
        return {}

    def _batch(self, patch: dict[str, Any], active: int) -> dict[str, Any]:
        """Leave out a counters-only patch inside the batch window (`status.batched_until`)."""
        until = batched_until(
            patch,
            active,
            self.state.job_status_written.get(self.key),
            self.now,
            self.rec.batch_ms,
        )
        if until is None:
            return patch
        self.plan.requeue.append(until)
        plan = self.plan
        if plan.creates or plan.deletes or plan.releases or plan.disruptions or plan.objects:
            plan.notes.append(f"status counters written at {rfc3339(until)}")
        else:
            plan.head = plan.head or (
                f"StatusBatched: the Job's counters are written at {rfc3339(until)}"
            )
        return {}

    def _account(self, target: _Target | None, books: _Books) -> None:
        """upstream `trackJobStatusAndRemoveFinalizers`: record newly finished pods in the
        uncounted lists or in `completedIndexes`, and release the finalizer of every pod whose
        accounting the observed status already holds."""
        releasing = self.plan.releasing
        pods = [p for p in self.pods if self.tracked(p) and p.name not in releasing]
        if self.view.indexed:
            # Completed indexes are introduced in index order, as upstream does.
            pods.sort(key=lambda p: (completion_index(p), p.name))
        for pod in pods:
            failed = self.considered_failed(pod)
            if not self._may_release(pod, failed, target):
                continue
            record = self._record_needed(pod, failed, target)
            if record == "index":
                books.new_indexes.append(completion_index(pod))
            elif record == "succeeded":
                books.uncounted_succeeded.append(pod.uid)
                books.added = (books.added[0] + 1, books.added[1])
            elif record == "failed":
                books.uncounted_failed.append(pod.uid)
                books.added = (books.added[0], books.added[1] + 1)
            else:
                self.plan.releases.append(pod)
                books.released += 1
            if books.in_flight >= MAX_UNCOUNTED:
                books.truncated = True
                return

    def _record_needed(self, pod: Pod, failed: bool, target: _Target | None) -> str | None:
        """Where a finished pod must be recorded before its finalizer may go: ``"index"``
        (completedIndexes), ``"succeeded"``/``"failed"`` (uncounted lists), or None when the
        observed status already accounts for it or it does not count."""
        if pod.phase == "Succeeded" and pod.uid not in self.uncounted_failed:
            if self.view.indexed:
                known = completion_index(pod) in self.view.completed_indexes
                return None if known or not self.valid_index(pod) else "index"
            return None if pod.uid in self.uncounted_succeeded else "succeeded"
        # Once the Job is failing, every pod that did not succeed counts as failed.
        if not failed and not (target is not None and target.kind == _FAILURE):
            return None
        if pod.uid in self.uncounted_failed or not self.valid_index(pod):
            return None
        return "failed" if self.counts_as_failure(pod) else None

    def _may_release(self, pod: Pod, failed: bool, target: _Target | None) -> bool:
        """upstream `canRemoveFinalizer`."""
        if self.job.deletion_ts is not None or target is not None or pod.phase == "Succeeded":
            return True
        if not failed:
            return False
        return not (self.view.per_index and self.delayed.get(completion_index(pod)) is pod)

    def _intents(self, patch: dict[str, Any]) -> tuple[Intent, ...]:
        job, cluster, rec = self.job, self.cluster, self.rec
        intents: list[Intent] = []
        if patch:
            intents.append(
                Patch(
                    cluster,
                    "Job",
                    job.namespace,
                    job.name,
                    patch={"status": patch},
                    patch_type="merge",
                    subresource="status",
                    precondition_rv=job.rv,
                )
            )
        intents += [
            release_patch(cluster, pod, rec.finalizer)
            for pod in sorted(self.plan.releases, key=_name)
        ]
        stamp = rfc3339(self.now)
        intents += [
            Patch(
                cluster,
                "Pod",
                pod.namespace,
                pod.name,
                patch=exclusive.disruption_patch(pod, stamp),
                patch_type="strategic",
                subresource="status",
            )
            for pod in self.plan.disruptions
        ]
        intents += [
            Delete(cluster, "Pod", pod.namespace, pod.name, precondition_uid=pod.uid)
            for pod in self.plan.deletes
        ]
        intents += self.plan.objects
        intents += [
            Create(cluster, "Pod", job.namespace, name, body=body)
            for name, body in self.plan.creates
        ]
        return tuple(intents)

    def _reason(
        self,
        target: _Target | None,
        finished: bool,
        books: _Books,
        active: int,
        terminating: int,
    ) -> str:
        head = self.plan.head
        if target is not None:
            reason = target.reason or target.terminal
            if finished:
                head = f"{reason}: {target.terminal} ({target.message or 'finished'})"
            elif target.new:
                head = f"{reason}: {target.interim} ({target.message})"
            else:
                head = f"{reason}: finishing, {terminating} pod(s) terminating"
        (added_s, added_f), (moved_s, moved_f) = books.added, books.moved
        details = list(self.plan.notes)
        if added_s or added_f:
            details.append(f"uncounted +{added_s} succeeded +{added_f} failed")
        if books.new_indexes:
            details.append(f"{len(books.new_indexes)} index(es) completed")
        if moved_s or moved_f:
            details.append(f"counted {moved_s} succeeded {moved_f} failed")
        if books.released:
            details.append(f"releasing {books.released} counted pod(s)")
        if head is None:
            tracking = details != self.plan.notes
            verb = "TrackPods" if tracking else "Status"
            head = f"{verb}: {active} active, {terminating} terminating"
        return "; ".join([head, *details])


def _name(pod: Pod) -> str:
    return pod.name


def _policy(gang: JobGang) -> str:
    count = gang.template.min_count
    return "basic" if count is None else f"gang of {count}"


def _go_duration_ns(seconds: int) -> int:
    """``time.Duration(seconds) * time.Second`` as upstream's controller computes the allowed
    duration: int64 nanoseconds, wrapping past 2^63. The API takes any positive int64, and a
    value that wraps (2^63-1, 10^10) gives a deadline long past or far off, as upstream's does:
    a Job of 2^63-1 seconds fails at once with DeadlineExceeded on the built-in controller."""
    return (seconds * 1_000_000_000 + 2**63) % 2**64 - 2**63


def _ceil_ms(ns: int) -> int:
    """The first whole millisecond at or after `ns` nanoseconds (the deadline is reached
    once the elapsed time is at least the allowed duration)."""
    return -(-ns // 1_000_000)
