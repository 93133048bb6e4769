"""The JobSet controller for JobSets whose `spec.managedBy` names kbatchd (spec Part B).

`JobSetReconciler.decide` is one upstream JobSet `reconcile`, in upstream's order (spec B0):
classify the child Jobs → per-replicatedJob counters → a finished JobSet only cleans up →
delete the previous attempt's Jobs → failure policy (and stop) → success policy (and stop if
complete) → headless Service → volume claims → the gang's objects, when the JobSet asks for one
(`gangs`) → create the Jobs that may start (dependsOn, InOrder, BlockingRecreate) → suspend or
resume → in-place restart bookkeeping → one status write. All
its writes go out as the intents of one decision, as upstream makes them in one reconcile; a
write that must be seen before the next one (clearing a suspended Job's `startTime` before
resuming it) is left to the next decision, which the runtime takes only once the first is
observed.

Child Jobs are created with `spec.managedBy` naming kbatchd's Job controller, so that kbatchd
runs them too (upstream leaves them to the built-in Job controller).

Beyond upstream: a JobSet that breaks the webhook's rules (see `jobsetvalidation`) — which a
cluster without the webhook accepts — is refused: decision reason ``InvalidJobSet: ...`` and
`Failed=True` with that reason, since its spec is immutable and it can never run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import msgspec

from daemon.controllers.base import Decision, split_ref
from daemon.controllers.job.gang import controlled_by
from daemon.controllers.job.reconciler import DEFAULT_MANAGER as JOB_MANAGER
from daemon.controllers.job.reconciler import dispatched
from daemon.controllers.job.spec import managed_by
from daemon.controllers.job.status import parse_time
from daemon.controllers.jobset import failure, gangs, inplace, order
from daemon.controllers.jobset.jobs import Child, Children, classify, count, job_body
from daemon.controllers.jobset.service import missing_service
from daemon.controllers.jobset.spec import (
    FAILED,
    IN_PLACE_RESTART,
    RESTARTING,
    SUSPENDED,
    JobSetSpec,
    JobSetSpecError,
    JobSetStatus,
    JobSetView,
    ReplicatedJob,
    view_jobset,
)
from daemon.controllers.jobset.status import StatusDraft
from daemon.controllers.jobset.validation import validate
from daemon.controllers.jobset.volumes import finished_scratch, missing_claims
from events.intents import Create, Delete, Intent, Patch
from events.objects import Job, JobSet, rfc3339
from events.state import State

DEFAULT_MANAGER: Final = "kbatchd.dev/jobset-controller"
INVALID: Final = "InvalidJobSet"
# Listed by name in a reason at most this many times; the rest are counted.
_LISTED: Final = 5

if TYPE_CHECKING:
    from daemon.service.config import Settings


@dataclass(frozen=True)
class JobSetReconciler:
    """The JobSet reconciler's settings; `decide` is pure."""

    managed_by: str = DEFAULT_MANAGER
    # What child Jobs carry in `spec.managedBy`: the Job reconciler's name.
    job_managed_by: str = JOB_MANAGER
    # JobSets labelled `dispatch_label` "true" in cluster `dispatch_cluster` are the
    # multi-cluster dispatcher's: they run in a worker, as a copy.
    dispatch_cluster: str = ""
    dispatch_label: str = ""

    @property
    def name(self) -> str:
        return "jobset"

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset({"JobSet"})

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        kind, cluster, namespace, name = split_ref(key)
        if kind != "JobSet":
            return None
        jobset = state.jobsets.get(f"{cluster}/{namespace}/{name}")
        # A JobSet being deleted is left to the garbage collector (upstream skips it too).
        if jobset is None or jobset.deletion_ts is not None:
            return None
        if managed_by(jobset) != self.managed_by:
            return None
        if cluster == self.dispatch_cluster and jobset.labels.get(self.dispatch_label) == "true":
            return None
        try:
            view = view_jobset(jobset)
        except JobSetSpecError as exc:
            return _invalid(cluster, jobset, [("spec", str(exc))], now)
        problems = validate(name, view.spec)
        if problems:
            return _invalid(cluster, jobset, problems, now)
        version, composite = gangs.served(state, cluster)
        try:
            gang = gangs.gang_of(view, version, composite) if version is not None else None
        except JobSetSpecError as exc:
            return _invalid(cluster, jobset, [("metadata.annotations", str(exc))], now)
        return _Sync(self, state, cluster, view, now, gang).decide()


def _invalid(cluster: str, jobset: JobSet, problems: list[tuple[str, str]], now: int) -> Decision:
    text = "; ".join(f"{path}: {message}" for path, message in problems)
    reason = f"{INVALID}: {jobset.namespace}/{jobset.name}: {text}"
    try:
        status = msgspec.convert(jobset.status, JobSetStatus)
    except msgspec.ValidationError:
        return Decision(reason)
    draft = StatusDraft.of(JobSetView(jobset, JobSetSpec(), status), now)
    failure.fail(draft, INVALID, f"the JobSet is invalid: {text}")
    patch = draft.patch()
    if not patch:
        return Decision(reason)
    return Decision(reason, (_status_intent(cluster, jobset, patch),))


def _status_intent(cluster: str, jobset: JobSet, patch: dict[str, Any]) -> Patch:
    return Patch(
        cluster,
        "JobSet",
        jobset.namespace,
        jobset.name,
        patch={"status": patch},
        patch_type="merge",
        subresource="status",
        precondition_rv=jobset.rv,
    )


def _names(children: list[Child]) -> str:
    listed = ", ".join(c.name for c in children[:_LISTED])
    more = len(children) - _LISTED
    return listed + (f" and {more} more" if more > 0 else "")


class _Sync:
    """One reconcile of one valid, managed JobSet."""

    def __init__(
        self,
        rec: JobSetReconciler,
        state: State,
        cluster: str,
        view: JobSetView,
        now: int,
        gang: gangs.SetGang | None = None,
    ) -> None:
        self.rec = rec
        self.gang = gang
        self.state = state
        self.cluster = cluster
        self.view = view
        self.now = now
        self.draft = StatusDraft.of(view, now)
        self.intents: list[Intent] = []
        self.head: str | None = None
        self.notes: list[str] = []
        self.requeue: int | None = None

    def decide(self) -> Decision | None:
        view = self.view
        children = classify(self.state, self.cluster, view)
        self.draft.set_counters(count(view, children))
        if view.finished:
            self._finished(children)
            return self._conclude()
        self._delete_previous(children)
        self._restarting_done()
        if children.failed:
            self.head = failure.execute(view, children, self.draft)
            return self._conclude()
        if children.succeeded and failure.succeeded(view, children):
            failure.complete(self.draft)
            self.head = (
                f"Completed: success policy {view.spec.success_policy.operator} met "
                f"({len(children.succeeded)} Job(s) succeeded)"
            )
            return self._conclude()
        service = missing_service(self.state, self.cluster, view)
        if service is not None:
            self.intents.append(service)
            self.notes.append(f"creating headless Service {view.subdomain}")
        claims = missing_claims(self.state, self.cluster, view)
        if claims:
            self.intents += claims
            self.notes.append(f"creating {len(claims)} volume claim(s)")
        if self._gang_ready():
            self._create(children)
        if view.suspended:
            self._suspend(children)
        else:
            self._resume(children)
        if view.strategy == IN_PLACE_RESTART:
            pods = inplace.pods_of(self.state, self.cluster, children)
            note = inplace.reconcile(view, pods, self.draft)
            if note:
                self.head = self.head or note
        return self._conclude()

    # -- steps ---------------------------------------------------------------------------------

    def _finished(self, children: Children) -> None:
        """upstream: a finished JobSet deletes its remaining active Jobs and applies its TTL;
        kbatchd also deletes its scratch claims."""
        doomed = [c for c in children.active if c.job is not None and c.job.deletion_ts is None]
        self._delete_jobs(doomed)
        if doomed:
            self.head = f"Finished: deleting {len(doomed)} active Job(s): {_names(doomed)}"
        scratch = finished_scratch(self.state, self.cluster, self.view)
        if scratch:
            self.intents += scratch
            self.notes.append(f"deleting {len(scratch)} scratch volume claim(s)")
        self._ttl()

    def _ttl(self) -> None:
        ttl = self.view.spec.ttl_seconds_after_finished
        if ttl is None:
            return
        finished_at = None
        for type_ in ("Completed", FAILED):
            condition = self.view.condition(type_)
            if condition is not None and condition.get("status") == "True":
                finished_at = parse_time(condition.get("lastTransitionTime"))
        if finished_at is None:
            return
        due = finished_at + ttl * 1000
        if self.now < due:
            self.requeue = due
            self.head = self.head or f"Finished: TTL expires at {rfc3339(due)}"
            return
        jobset = self.view.jobset
        self.intents.append(
            Delete(
                self.cluster,
                "JobSet",
                jobset.namespace,
                jobset.name,
                precondition_uid=jobset.uid,
                propagation="Foreground",
            )
        )
        self.head = f"TTLExpired: deleting the JobSet {ttl}s after it finished"

    def _delete_jobs(self, children: list[Child]) -> None:
        for child in children:
            job = child.job
            assert job is not None
            self.intents.append(
                Delete(
                    self.cluster,
                    "Job",
                    job.namespace,
                    job.name,
                    precondition_uid=job.uid,
                    propagation="Foreground",
                )
            )

    def _delete_previous(self, children: Children) -> None:
        doomed = [c for c in children.previous if c.job is not None and c.job.deletion_ts is None]
        if doomed:
            self._delete_jobs(doomed)
            self.notes.append(
                f"deleting {len(doomed)} Job(s) of a previous attempt: {_names(doomed)}"
            )
        elif children.previous:
            self.notes.append(
                f"waiting for {len(children.previous)} Job(s) of a previous attempt to be gone"
            )

    def _restarting_done(self) -> None:
        if self.view.suspended:
            return
        total = sum(c.ready + c.succeeded for c in map(self.draft.counters, self._rj_names()))
        if total == self.view.total_replicas:
            self.draft.set_condition(RESTARTING, "False", "JobsReady", "all jobs are ready")

    def _rj_names(self) -> list[str]:
        return [rj.name for rj in self.view.spec.replicated_jobs]

    def _create(self, children: Children) -> None:
        creates, steps = order.to_create(self.view, children, self.draft)
        view = self.view
        for child in creates:
            restarts = view.job_restarts(child.rj.name)
            attempt = restarts[child.index] if child.index < len(restarts) else 0
            group = (
                gangs.group_name(child.name, self.gang.attempt) if self.gang is not None else None
            )
            body = job_body(
                view, child.rj, child.index, attempt, self.rec.job_managed_by, pod_group=group
            )
            self.intents.append(Create(self.cluster, "Job", view.namespace, child.name, body=body))
        if creates:
            by_rj: dict[str, int] = {}
            for child in creates:
                by_rj[child.rj.name] = by_rj.get(child.rj.name, 0) + 1
            parts = ", ".join(f"{n} of {rj}" for rj, n in by_rj.items())
            verb = "suspended " if view.suspended else ""
            self.head = (
                f"CreateJobs: creating {len(creates)} {verb}Job(s) ({parts}) at attempt "
                f"{view.status.restarts}"
            )
        if children.foreign:
            self.notes.append(
                f"{len(children.foreign)} Job name(s) held by objects this JobSet does not "
                f"control: {_names(children.foreign)}"
            )
        self.notes += steps.waiting

    def _gang_ready(self) -> bool:
        """Make the JobSet's gang objects (`jobset.gangs`) one step at a time; whether the
        child Jobs may be created now (their groups exist or are made in this decision)."""
        gang, view, state, cluster = self.gang, self.view, self.state, self.cluster
        if gang is None:
            return True
        ns = view.namespace
        self._drop_previous_groups(gang)
        workload = state.workloads.get(f"{cluster}/{ns}/{gang.workload}")
        if workload is None:
            body = gangs.workload_body_for(view, gang)
            self.intents.append(Create(cluster, "Workload", ns, gang.workload, body=body))
            self.head = f"GangObjects: creating Workload {gang.workload}"
            return False
        if not controlled_by(workload, view.jobset.uid):
            self.notes.append(f"ungrouped: Workload {gang.workload} is not this JobSet's")
            self.gang = None
            return True
        parent = gang.parent
        if parent is not None and f"{cluster}/{ns}/{parent}" not in state.compositepodgroups:
            body = gangs.composite_body_for(view, gang, workload.uid)
            self.intents.append(Create(cluster, "CompositePodGroup", ns, parent, body=body))
            self.head = f"GangObjects: creating CompositePodGroup {parent}"
            return False
        missing = [
            (rj, name)
            for rj, name in gangs.groups_of(view, gang.attempt)
            if f"{cluster}/{ns}/{name}" not in state.podgroups
        ]
        for rj, name in missing:
            body = gangs.podgroup_body_for(view, gang, rj, workload.uid)
            self.intents.append(Create(cluster, "PodGroup", ns, name, body=body))
        if missing:
            note = f"creating {len(missing)} PodGroup(s)"
            if parent is None:
                note += (
                    "; CompositeUnavailable: the cluster serves no CompositePodGroup "
                    "(scheduling.k8s.io/v1alpha3), so each Job is a gang of its own and the "
                    "set is not one"
                )
            else:
                note += f" under CompositePodGroup {parent}"
            self.notes.append(note)
        return True

    def _drop_previous_groups(self, gang: gangs.SetGang) -> None:
        """The groups of the attempt before this one: the new attempt has its own."""
        if gang.attempt == 0:
            return
        view, state, cluster, ns = self.view, self.state, self.cluster, self.view.namespace
        uid = view.jobset.uid
        doomed: list[Intent] = []
        for _, name in gangs.groups_of(view, gang.attempt - 1):
            group = state.podgroups.get(f"{cluster}/{ns}/{name}")
            if group is not None and group.deletion_ts is None and controlled_by(group, uid):
                doomed.append(Delete(cluster, "PodGroup", ns, name))
        parent = gangs.composite_name(gang.workload, gang.attempt - 1)
        found = state.compositepodgroups.get(f"{cluster}/{ns}/{parent}")
        if found is not None and found.deletion_ts is None and controlled_by(found, uid):
            doomed.append(Delete(cluster, "CompositePodGroup", ns, parent))
        self.intents += doomed
        if doomed:
            self.notes.append(f"deleting {len(doomed)} group(s) of attempt {gang.attempt - 1}")

    def _suspend(self, children: Children) -> None:
        running = [
            c
            for c in children.active
            if c.job is not None and c.job.spec.get("suspend") is not True
        ]
        for child in running:
            job = child.job
            assert job is not None
            self.intents.append(
                Patch(
                    self.cluster, "Job", job.namespace, job.name, patch={"spec": {"suspend": True}}
                )
            )
        if running:
            self.head = self.head or f"Suspend: suspending {len(running)} Job(s)"
        self.draft.set_condition(SUSPENDED, "True", "SuspendedJobs", "jobset is suspended")

    def _resume(self, children: Children) -> None:
        resumes, resumed = order.to_resume(self.view, children, self.draft)
        cleared = 0
        templates = {rj.name: rj for rj in self.view.spec.replicated_jobs}
        for child in resumes:
            job = child.job
            assert job is not None
            if job.status.get("startTime") is not None:
                # The template of a started Job is immutable: startTime goes first, and the
                # resume waits for a decision that sees it gone.
                cleared += 1
                self.intents.append(
                    Patch(
                        self.cluster,
                        "Job",
                        job.namespace,
                        job.name,
                        patch={"status": {"startTime": None}},
                        subresource="status",
                        precondition_rv=job.rv,
                    )
                )
                continue
            self.intents.append(
                Patch(
                    self.cluster,
                    "Job",
                    job.namespace,
                    job.name,
                    patch={"spec": resume_patch(job, templates[child.rj.name])},
                )
            )
        if resumes:
            resuming = len(resumes) - cleared
            self.head = self.head or (
                f"Resume: resuming {resuming} Job(s)"
                + (f", clearing startTime of {cleared} first" if cleared else "")
            )
        if resumed:
            self.draft.set_condition(SUSPENDED, "False", "ResumeJobs", "jobset is resumed")

    # -- the decision --------------------------------------------------------------------------

    def _conclude(self) -> Decision | None:
        patch = self.draft.patch()
        if patch:
            self.intents.insert(0, _status_intent(self.cluster, self.view.jobset, patch))
        notes = [*self.draft.notes, *self.notes]
        if not self.intents:
            if self.requeue is not None or notes or self.head:
                reason = "; ".join([self.head or "Waiting", *notes])
                return Decision(reason, (), self.requeue)
            return None
        head = self.head or ("Status: " + _summary(self.draft))
        return Decision("; ".join([head, *notes]), tuple(self.intents), self.requeue)


def _summary(draft: StatusDraft) -> str:
    return ", ".join(
        f"{e.get('name')} ready {e.get('ready', 0)} succeeded {e.get('succeeded', 0)} "
        f"failed {e.get('failed', 0)}"
        for e in draft.replicated
    )


def _merge_list(base: Any, extra: Any) -> list[Any]:
    """upstream `collections.MergeSlices`: the Job's items, then the template's not yet there."""
    result = list(base) if isinstance(base, list) else []
    for item in extra if isinstance(extra, list) else ():
        if item not in result:
            result.append(item)
    return result


def resume_patch(job: Job, rj: ReplicatedJob) -> dict[str, Any]:
    """upstream `resumeJob`: merge (not replace) the replicatedJob's current pod-template
    labels, annotations, nodeSelector, tolerations and schedulingGates into the Job's template
    (what a queueing system may have changed while the JobSet was suspended), and unsuspend."""
    template = rj.pod_template
    meta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    spec = rj.pod_spec
    job_template = job.spec.get("template") or {}
    job_meta = job_template.get("metadata") or {}
    job_spec = job_template.get("spec") or {}
    patch_meta: dict[str, Any] = {}
    patch_spec: dict[str, Any] = {}
    assert isinstance(meta, dict)
    for field in ("labels", "annotations"):
        merged = {**(job_meta.get(field) or {}), **(meta.get(field) or {})}
        if merged != (job_meta.get(field) or {}):
            patch_meta[field] = merged
    merged_selector = {**(job_spec.get("nodeSelector") or {}), **(spec.get("nodeSelector") or {})}
    if merged_selector != (job_spec.get("nodeSelector") or {}):
        patch_spec["nodeSelector"] = merged_selector
    for field in ("tolerations", "schedulingGates"):
        merged_list = _merge_list(job_spec.get(field), spec.get(field))
        if merged_list != list(job_spec.get(field) or ()):
            patch_spec[field] = merged_list
    patch: dict[str, Any] = {"suspend": False}
    if patch_meta or patch_spec:
        patch["template"] = {
            **({"metadata": patch_meta} if patch_meta else {}),
            **({"spec": patch_spec} if patch_spec else {}),
        }
    return patch


def configured(settings: Settings) -> JobSetReconciler:
    return JobSetReconciler(
        managed_by=settings.reconcilers.jobset.managed_by,
        job_managed_by=settings.reconcilers.job.managed_by,
        **dispatched(settings),
    )
