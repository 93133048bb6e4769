"""The multi-cluster dispatcher: a Job or a JobSet submitted to the manager cluster with
kbatchd's ``managedBy`` and the label ``kbatchd.dev/multicluster: "true"`` runs in exactly one
worker (a gang Job as that worker's gang: its controller there makes it).

Each step is one decision about the manager's workload, with its reason:

- ``Dispatched``: a suspended copy (`workload.copy_body`) in each worker the dispatcher
  nominates (`dispatch`).
- ``Admitted``: the first worker holding a copy in which the pods fit as it stands
  (`plan.choose`): the manager's workload is annotated ``kbatchd.dev/cluster``, that copy
  resumed, every other copy deleted. The log holds the choice before any of it is carried
  out (``State.placed``), so a restart finishes it there and nowhere else. Its room stays
  held in that worker until its pods are bound there: no other workload is admitted to it
  meanwhile.
- ``Reserved``: no worker fits, and the lightest preemption is claimed (`plan.claim_of`,
  written as ``kbatchd.dev/claim``); worse-ranked claims that evict nothing yet and collide
  with it are taken off in the same decision (the reason names them), and their workloads
  plan again.
- ``Evicting``: the victims marked ``DisruptionTarget`` (the claim now evicting: it stands
  against any rank), then deleted; deletes are issued again for victims still there.
- ``Committed``: every victim gone and the pods still fit: as ``Admitted``, in the claimed
  worker, and the claim taken off.
- ``Aborted``: the worker refused to evict a victim or could not be reached, the deadline
  passed (`plan.abort_reason`), or its room is gone once the victims are: the claim is taken
  off, no eviction not yet issued ever is, and the workload waits again (sparing the victims
  refused for as long as a claim may last). A step is decided from what the log holds, so a
  restart resumes or aborts, never both.
- A worker the log knows it cannot reach (``State.unreachable``) is given no copy and chosen
  for nothing until it is heard from again.
- The copy that runs has its status written to the manager's workload; a manager's workload
  that is deleted has its copies deleted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from msgspec.structs import replace

from daemon.controllers.base import Decision, split_ref
from daemon.controllers.gang import preempt
from daemon.controllers.gang.place import ClusterView
from daemon.controllers.job.reconciler import DEFAULT_MANAGER
from daemon.controllers.job.spec import managed_by
from daemon.controllers.jobset.reconciler import DEFAULT_MANAGER as JOBSET_MANAGER
from daemon.controllers.multicluster import dispatch
from daemon.controllers.multicluster.dispatch import Dispatcher
from daemon.controllers.multicluster.plan import (
    Demand,
    Option,
    abort_reason,
    binds,
    choose,
    claim_of,
    collides,
    options,
    place_pods,
    room_of,
)
from daemon.controllers.multicluster.projection import (
    CLAIM,
    ORIGIN,
    PLACED,
    WORKLOAD_KINDS,
    encode_claim,
)
from daemon.controllers.multicluster.settings import LABEL, workers_of
from daemon.controllers.multicluster.workload import (
    Workload,
    WorkloadError,
    copy_body,
    demand_of,
    unbound,
)
from events.intents import Create, Delete, Intent, Patch
from events.objects import JobSet, rfc3339
from events.state import Claim, State

if TYPE_CHECKING:
    from daemon.service.config import Settings

NAME: Final = "multicluster"
ALL_AT_ONCE: Final = Dispatcher()
DEADLINE_MS: Final = 120_000
RETRY_MS: Final = 2_000


class Cycle:
    """The decisions of one pass: a claim decided in it binds the ones after it before the
    fold has it (`pending`), and a claim taken off in it no longer binds (`revoked`). Each
    worker's view is made once a pass (`view`), and an admission decided in the pass holds
    its room in it for the decisions after."""

    def __init__(self, reconciler: MulticlusterReconciler, state: State) -> None:
        self.reconciler = reconciler
        self.state = state
        self.pending: list[Claim] = []
        self.revoked: set[str] = set()
        self._views: dict[str, ClusterView] = {}

    def view(self, worker: str) -> ClusterView:
        """`worker` as placement sees it, with the room held for workloads admitted to it
        whose pods are not all bound there yet."""
        found = self._views.get(worker)
        if found is None:
            found = self._views[worker] = self.reconciler.held_view(self.state, worker)
        return found

    def release(self, queue: str) -> list[str]:
        return []

    def decide(self, key: str, now: int) -> Decision | None:
        return self.reconciler.decide_in(self, key, now)

    def claim(self, key: str) -> Claim | None:
        if key in self.revoked:
            return None
        fresh = next((c for c in self.pending if c.preemptor == key), None)
        return fresh or self.state.claims.get(key)


@dataclass(frozen=True)
class MulticlusterReconciler:
    manager: str
    workers: tuple[str, ...]
    dispatcher: Dispatcher = ALL_AT_ONCE
    managed_by: str = DEFAULT_MANAGER
    jobset_managed_by: str = JOBSET_MANAGER
    label: str = LABEL
    deadline_ms: int = DEADLINE_MS
    retry_ms: int = RETRY_MS

    @property
    def name(self) -> str:
        return NAME

    @property
    def kinds(self) -> frozenset[str]:
        return WORKLOAD_KINDS

    def memo(self) -> None:
        return None

    def cycle(self, state: State, memo: None = None) -> Cycle:
        return Cycle(self, state)

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        return self.cycle(state).decide(key, now)

    # -- one workload -------------------------------------------------------------------------

    def decide_in(self, run: Cycle, key: str, now: int) -> Decision | None:
        kind, cluster, namespace, name = split_ref(key)
        if cluster != self.manager or kind not in WORKLOAD_KINDS:
            return None
        state = run.state
        copies = self._copies(state, key, namespace, name)
        job: Workload | None = state.table(kind).get(f"{cluster}/{namespace}/{name}")  # type: ignore[assignment]
        if job is None or job.deletion_ts is not None:
            going = tuple(_delete(c, w) for w, c in copies.items() if c.deletion_ts is None)
            if not going:
                return None
            return Decision(f"Removed: {key} is gone; {len(going)} copy(ies) deleted", going)
        manager = self.managed_by if kind == "Job" else self.jobset_managed_by
        if job.labels.get(self.label) != "true" or managed_by(job) != manager:
            return None
        placed = state.placed.get(key) or job.annotations.get(PLACED)
        if placed:
            return self._running(job, placed, copies)
        if job.spec.get("suspend") is True:
            return None
        try:
            demand = demand_of(state, cluster, key, job)
        except WorkloadError as exc:
            return Decision(f"InvalidWorkload: {exc}")
        claim = run.claim(key)
        if claim is not None:
            return self._claimed(run, job, demand, claim, copies, now)
        return self._place(run, job, demand, copies, now)

    def _copies(self, state: State, key: str, namespace: str, name: str) -> dict[str, Workload]:
        """The copies of the manager's workload `key` in the workers that can be reached, by
        worker. One that cannot is left alone: it is woken when its copy is seen again."""
        found = {}
        table = state.table(key.partition("/")[0])
        for worker in self.workers:
            if worker in state.unreachable:
                continue
            copy: Workload | None = table.get(f"{worker}/{namespace}/{name}")  # type: ignore[assignment]
            if copy is not None and copy.annotations.get(ORIGIN) == key:
                found[worker] = copy
        return found

    def held_view(self, state: State, worker: str) -> ClusterView:
        """A view of `worker` holding the room of every workload admitted to it whose pods
        are not all bound there yet (their copy resumed, its pods being made and placed):
        without it, every workload decided before those pods are seen fits the same room."""
        view = ClusterView(state, worker)
        for key, placed in sorted(state.placed.items()):
            if placed != worker:
                continue
            rest = unbound(state, self.manager, key, worker)
            if rest is None:
                continue
            slots = place_pods(view, rest)
            if not isinstance(slots, str):
                view.hold(room_of(slots))
        return view

    # -- waiting for a worker -----------------------------------------------------------------

    def _place(
        self, run: Cycle, job: Workload, demand: Demand, copies: Mapping[str, Workload], now: int
    ) -> Decision:
        since = job.created
        nominated = dispatch.nominated(self.dispatcher, self.workers, since, now)
        unreachable = run.state.unreachable
        missing = [w for w in nominated if w not in copies and w not in unreachable]
        intents: list[Intent] = [
            _create(w, job, copy_body(job, demand.key, self.label)) for w in missing
        ]
        prefix = f"Dispatched: copies to {', '.join(missing)}; " if missing else ""
        holding = [w for w in nominated if w in copies and copies[w].deletion_ts is None]
        # A victim a worker refused to evict is spared for as long as a claim may last.
        spared = [
            victim
            for victim, refusal in run.state.refusals.get(demand.key, {}).items()
            if now - refusal.at < self.deadline_ms
        ]
        views = [run.view(w) for w in holding]
        answers = options(views, demand, run.pending, unreachable, spared)
        chosen = choose(answers)
        # The least disruption is chosen among every nominated worker: a preemption waits
        # for the copies still to come (each wakes it), a fit does not.
        coming = [w for w in nominated if w not in holding and w not in unreachable]
        # A claim the log no longer holds (taken off by a better-ranked preemptor, its
        # write landing after ours) leaves no annotation behind.
        stale = {CLAIM: None} if CLAIM in job.annotations else {}
        if chosen is None or (chosen.victims and coming):
            if chosen is None:
                why = "; ".join(f"{a.cluster}: {a.refused}" for a in answers) or "no copy yet"
            else:
                why = f"to preempt, the copies in {', '.join(coming)} first"
            more = dispatch.next_round(self.dispatcher, self.workers, since, now)
            wake = now + self.retry_ms if more is None else min(more, now + self.retry_ms)
            if stale:
                intents.append(_annotate(self.manager, job, stale))
            reason = f"{prefix}Waiting: no worker takes it now ({why})"
            return Decision(reason, tuple(intents), wake)
        if not chosen.victims:
            run.view(chosen.cluster).hold(room_of(list(chosen.slots)))
            intents += self._admit(job, chosen.cluster, copies, stale)
            return Decision(
                f"{prefix}Admitted: runs in {chosen.cluster} ({len(chosen.slots)} pod(s) fit "
                f"as it stands)",
                tuple(intents),
            )
        return self._reserve(run, job, demand, chosen, tuple(intents), prefix, now)

    def _reserve(
        self,
        run: Cycle,
        job: Workload,
        demand: Demand,
        chosen: Option,
        intents: tuple[Intent, ...],
        prefix: str,
        now: int,
    ) -> Decision:
        claim = claim_of(demand, chosen, now, now + self.deadline_ms)
        standing = {c.preemptor: c for c in run.state.claims.values()}
        standing.update((c.preemptor, c) for c in run.pending)  # this pass's word is newer
        ousted = [
            c
            for c in standing.values()
            if c.preemptor not in run.revoked and not binds(c, demand) and collides(claim, c)
        ]
        writes: list[Intent] = [_annotate(self.manager, job, {CLAIM: encode_claim(claim)})]
        for other in ousted:
            kind, cluster, namespace, name = split_ref(other.preemptor)
            annotations = {"metadata": {"annotations": {CLAIM: None}}}
            writes.append(_patch(kind, cluster, namespace, name, annotations))
            run.revoked.add(other.preemptor)
            run.pending = [c for c in run.pending if c.preemptor != other.preemptor]
        run.pending.append(claim)
        taken = f"; takes the place of {', '.join(c.preemptor for c in ousted)}" if ousted else ""
        return Decision(
            f"{prefix}Reserved: preempts in {chosen.cluster}: "
            f"{preempt.describe(list(chosen.victims))} (weight {chosen.weight}), "
            f"{len(claim.room)} node(s) held, deadline {rfc3339(claim.deadline)}{taken}",
            (*intents, *writes),
            claim.deadline,
        )

    # -- a preemption under way ---------------------------------------------------------------

    def _claimed(
        self,
        run: Cycle,
        job: Workload,
        demand: Demand,
        claim: Claim,
        copies: Mapping[str, Workload],
        now: int,
    ) -> Decision:
        state = run.state
        left = [
            pod
            for key in sorted(claim.victims)
            if (pod := state.pods.get(key)) is not None and not pod.terminal
        ]
        why = abort_reason(
            claim,
            now,
            left=len(left),
            reachable=claim.cluster not in state.unreachable,
            refused={
                victim: refusal.why
                for victim, refusal in state.refusals.get(claim.preemptor, {}).items()
                if refusal.at >= claim.reserved
            },
        )
        if why is not None:
            return self._abort(job, claim, why)
        if not claim.evicting:
            message = (
                f"kbatchd: preempting to accommodate a higher priority workload "
                f"{job.namespace}/{job.name} from cluster {self.manager}"
            )
            stamp = rfc3339(now)
            marks: list[Intent] = [
                Patch(
                    claim.cluster, "Pod", p.namespace, p.name,
                    patch=preempt.disruption(message, stamp), patch_type="strategic",
                    subresource="status",
                )
                for p in left
            ]  # fmt: skip
            evicting = replace(claim, evicting=True)
            # From this decision on it stands against any rank, in this pass too.
            run.pending = [c for c in run.pending if c.preemptor != claim.preemptor]
            run.pending.append(evicting)
            return Decision(
                f"Evicting: marks {len(left)} victim pod(s) in {claim.cluster}",
                (*marks, _annotate(self.manager, job, {CLAIM: encode_claim(evicting)})),
                claim.deadline,
            )
        if left:
            deletes = tuple(
                Delete(claim.cluster, "Pod", p.namespace, p.name, precondition_uid=p.uid)
                for p in left
                if p.deletion_ts is None
            )
            return Decision(
                f"Evicting: {len(left)} victim pod(s) in {claim.cluster} still to go, "
                f"{len(deletes)} deleted now",
                deletes,
                claim.deadline,
            )
        answers = options([run.view(claim.cluster)], demand, run.pending)
        if answers[0].refused or answers[0].victims:
            why = answers[0].refused or "more victims would be needed"
            return self._abort(job, claim, f"its room in {claim.cluster} is gone ({why})")
        return Decision(
            f"Committed: runs in {claim.cluster} after evicting {len(claim.victims)} pod(s)",
            tuple(self._admit(job, claim.cluster, copies, {CLAIM: None})),
        )

    def _abort(self, job: Workload, claim: Claim, why: str) -> Decision:
        return Decision(
            f"Aborted: the preemption in {claim.cluster}: {why}; waits for a worker again",
            (_annotate(self.manager, job, {CLAIM: None}),),
        )

    # -- admitted -----------------------------------------------------------------------------

    def _admit(
        self,
        job: Workload,
        worker: str,
        copies: Mapping[str, Workload],
        annotations: Mapping[str, Any] | None = None,
    ) -> list[Intent]:
        """The choice first (the manager's Job names the worker), then the copies: the chosen
        one resumed, the others deleted."""
        intents: list[Intent] = [
            _annotate(self.manager, job, {**(annotations or {}), PLACED: worker})
        ]
        copy = copies.get(worker)
        if copy is not None:
            intents.append(_resume(copy, worker))
        intents += [
            _delete(c, w) for w, c in copies.items() if w != worker and c.deletion_ts is None
        ]
        return intents

    def _running(
        self, job: Workload, worker: str, copies: Mapping[str, Workload]
    ) -> Decision | None:
        """Keep the one copy that runs, resumed, and its status mirrored on the manager; the
        choice written there too (a restart may find it logged and not yet written)."""
        intents: list[Intent] = []
        if job.annotations.get(PLACED) != worker:
            intents.append(_annotate(self.manager, job, {PLACED: worker}))
        intents += [
            _delete(c, w) for w, c in copies.items() if w != worker and c.deletion_ts is None
        ]
        copy = copies.get(worker)
        if copy is not None:
            if copy.spec.get("suspend") is True:
                intents.append(_resume(copy, worker))
            else:
                status = _mirrored(copy.status)
                if status and status != job.status:
                    intents.append(_status(self.manager, job, _replacing(job.status, status)))
        if not intents:
            return None
        return Decision(f"Running: in {worker}", tuple(intents))


# Each write names its kind literally: config/rbac.yaml is checked against what the code
# writes (tests/daemon/test_rbac.py).


def _create(cluster: str, workload: Workload, body: dict[str, Any]) -> Create:
    namespace, name = workload.namespace, workload.name
    if isinstance(workload, JobSet):
        return Create(cluster, "JobSet", namespace, name, body=body)
    return Create(cluster, "Job", namespace, name, body=body)


def _patch(kind: str, cluster: str, namespace: str, name: str, patch: dict[str, Any]) -> Patch:
    if kind == "JobSet":
        return Patch(cluster, "JobSet", namespace, name, patch=patch)
    return Patch(cluster, "Job", namespace, name, patch=patch)


def _status(cluster: str, workload: Workload, status: dict[str, Any]) -> Patch:
    namespace, name, patch = workload.namespace, workload.name, {"status": status}
    if isinstance(workload, JobSet):
        return Patch(cluster, "JobSet", namespace, name, patch=patch, subresource="status")
    return Patch(cluster, "Job", namespace, name, patch=patch, subresource="status")


def _delete(copy: Workload, worker: str) -> Delete:
    namespace, name, uid = copy.namespace, copy.name, copy.uid
    if isinstance(copy, JobSet):
        return Delete(worker, "JobSet", namespace, name, precondition_uid=uid)
    return Delete(worker, "Job", namespace, name, precondition_uid=uid)


def _annotate(cluster: str, job: Workload, annotations: Mapping[str, Any]) -> Patch:
    patch = {"metadata": {"annotations": dict(annotations)}}
    return _patch(type(job).__name__, cluster, job.namespace, job.name, patch)


def _mirrored(status: Mapping[str, Any]) -> dict[str, Any]:
    """A copy's status as the manager's Job shows it: without the conditions of the copy's
    suspension while it waited, which the manager's Job never had."""
    conditions = [c for c in status.get("conditions") or () if c.get("type") != "Suspended"]
    mirrored = {k: v for k, v in status.items() if k != "conditions"}
    if conditions:
        mirrored["conditions"] = conditions
    return mirrored


def _replacing(current: Mapping[str, Any], wanted: dict[str, Any]) -> dict[str, Any]:
    """The merge patch that makes status `current` into `wanted`: a field `wanted` lacks is
    removed (null), as the API server leaves a zero counter out (a finished copy has no
    `active`, and a finished Job with `active` > 0 is refused)."""
    return {**dict.fromkeys(sorted(current.keys() - wanted.keys())), **wanted}


def _resume(copy: Workload, worker: str) -> Patch:
    return _patch(
        type(copy).__name__, worker, copy.namespace, copy.name, {"spec": {"suspend": False}}
    )


def configured(settings: Settings) -> MulticlusterReconciler:
    section = settings.reconcilers.multicluster
    return MulticlusterReconciler(
        manager=section.manager,
        workers=tuple(workers_of(section, [c.name for c in settings.clusters])),
        dispatcher=Dispatcher(section.dispatcher, section.step, int(section.round_seconds * 1000)),
        managed_by=settings.reconcilers.job.managed_by,
        jobset_managed_by=settings.reconcilers.jobset.managed_by,
        label=section.label,
        deadline_ms=int(section.preemption_deadline_seconds * 1000),
        retry_ms=int(section.retry_seconds * 1000),
    )
