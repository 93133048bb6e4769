"""Gang admission: kbatchd as the scheduler of pods whose ``schedulerName`` is its own
(``scheduling.k8s.io/v1alpha2`` PodGroups, spec A.2–A.6, B, C; placement per the TAS spec).

**Admission.** A group is admitted only when at least ``gang.minCount`` live, ungated members
exist and the placement library finds room for all of them (members are placed together as
one pod set, under the PodGroup's ``schedulingConstraints.topology`` key as a required level
and the Kueue pod set annotations on their template); then every member is bound in one
decision, with ``PodGroupScheduled=True`` (reason ``Scheduled``). A group that does not fit
binds nothing and gets ``PodGroupScheduled=False``, reason ``Unschedulable``, the placement
reason as message (machine-readable first: ``TopologyPlacementFailed: ...``), the same text
as the decision's reason. A group short of members is logged as such (``NotEnoughMembers``)
but gets that condition only over one it already has (`_Step.short_of_members`). Members
that arrive after admission (replacements, extras) are bound into the domain the group
already occupies.

**Retry without a busy loop.** The fold dirties waiting groups when capacity is released on
their cluster (`gang.projection`); besides, an unplaced group asks to be decided again on an
exponential schedule (1 s doubling to a cap, aligned on when it started waiting so that
repeated requeues of one key coincide).

**Ready timeout** (Kueue's ``waitForPodsReady``, not upstream's fixed 5-minute Permit wait):
the admission time is the ``PodGroupScheduled=True`` condition's ``lastTransitionTime``, in
the cluster object so it survives restarts. If ready + succeeded members do not reach
``minCount`` by then + the timeout, every member is deleted (its controller recreates it),
``PodGroupScheduled=False`` reason ``PodsReadyTimeout`` is written and the
``kbatchd.dev/evictions`` annotation counts up; the group is not admitted again before
``base × 2^(evictions-1)`` (capped) has passed since then. Reaching the group once is
recorded as ``PodsReady=True`` (reason ``Started``) and ends the timer.

**Coordinated Workloads** are decided at the Workload's key (the fold dirties it for every
change of its groups and their members), because their groups are admitted in relation to
each other; every other PodGroup is decided at its own key.

- *Leader before workers* (spec B.2, F.5): a Workload with a template named ``leader`` (or
  the one its ``kbatchd.dev/leader-template`` annotation names) and at least one other
  template. Groups made from the leader template are admitted first; groups from the other
  templates only once every leader group is admitted and all its members are Running; a
  worker group that requires the same topology level as the leader is confined to the
  leader's domain at that level. If an admitted leader group loses members (fewer live and
  succeeded members than ``minCount``) or times out, every member of every group of the
  Workload is deleted and every group is reset (``LeaderLost``): the whole job restarts.
- *Role ratios* (`daemon.controllers.gang.ratios`): admitted only in whole units, each unit
  within one domain of the unit level.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from daemon.controllers.base import Decision, split_ref
from daemon.controllers.gang import preempt, ratios
from daemon.controllers.gang.place import (
    ClusterView,
    Pass,
    Restrict,
    Slots,
    anchor,
    demand,
    domain_of,
    domain_with_room,
    fit,
    fits,
    levels_for,
    pod_set,
    restrict_to,
    short_of,
)
from daemon.controllers.gang.projection import (
    QUEUE,
    dirty_group,
    workload_name,
)
from daemon.controllers.gang.spec import (
    EVICTIONS,
    LEADER_LOST,
    LIMIT_EXCEEDED,
    NOT_ENOUGH_MEMBERS,
    PODS_READY,
    READY_TIMEOUT,
    ROLE_RATIO,
    ROLE_RATIO_TOPOLOGY,
    SCHEDULED,
    SCHEDULED_REASON,
    SCHEDULER_ERROR,
    STARTED,
    UNSCHEDULABLE,
    WAIT_FOR_START,
    CompositeSpec,
    GangSpecError,
    GroupSpec,
    Members,
    composite_spec,
    conditions_of,
    group_spec,
    max_requests,
    members,
    template_names,
    topology_request,
)
from daemon.controllers.labels import DEFAULT_LEADER_TEMPLATE, LEADER_TEMPLATE
from events.intents import Bind, Delete, Intent, Patch
from events.objects import Pod, PodGroup, Workload, rfc3339
from events.quantity import format_units
from events.state import Admission, State

DEFAULT_SCHEDULER: Final = "kbatchd"
# Kueue's waitForPodsReady defaults (v1beta2 / 0.19): 30 min timeout, back-off 60 s doubling
# to an hour.
READY_TIMEOUT_MS: Final = 30 * 60_000
BACKOFF_BASE_MS: Final = 60_000
BACKOFF_MAX_MS: Final = 3_600_000
RETRY_FIRST_MS: Final = 1_000
RETRY_MAX_MS: Final = 60_000
INVALID: Final = "InvalidRequest:"
# The message prefix of a group whose admission a crash cut short and could not be finished.
INTERRUPTED: Final = "AdmissionInterrupted:"
NO_ROOM: Final = "InsufficientRoom:"
# Placement verdicts that say the room is short; while the cluster's free room stays below a
# waiting group's demand, its condition keeps the last of these instead of a fresh count.
ROOM_REASONS: Final = ("TopologyPlacementFailed:", "NodeAssignmentFailed:", NO_ROOM)
# The condition message of a gang whose preemption is under way (KEP-5710's wording).
WAITING_FOR_PREEMPTION: Final = (
    "WaitingForPreemption: pod group is waiting for preemption to complete"
)
# The condition message of a group evicted whole, back in the queue.
VICTIM_REQUEUED: Final = "Preempted: its members are evicted by a higher-priority pod group"
# How many waiting groups in a row that the free room cannot hold a queue pass looks past
# before it stops: a bound on the pass's work, not on who gets room (every waiting group is
# also retried on its own schedule).
QUEUE_LOOKAHEAD: Final = 32

if TYPE_CHECKING:
    from daemon.service.config import Settings


def backoff_ms(evictions: int, base_ms: int, max_ms: int) -> int:
    """Kueue's requeue delay after the n-th eviction: base × 2^(n-1), capped (no jitter: it
    must replay)."""
    if evictions <= 0:
        return 0
    delay: int = base_ms * 2 ** min(evictions - 1, 40)
    return min(max_ms, delay)


def retry_at(since: int, now: int, first_ms: int, max_ms: int) -> int:
    """The next retry of a group waiting since `since`: since + first, then doubling gaps up
    to `max_ms`, then every `max_ms`. Computed from `since`, not from `now`, so every requeue
    of one key lands on the same instants."""
    gap, at = first_ms, since + first_ms
    while at <= now and gap < max_ms:
        gap = min(gap * 2, max_ms)
        at += gap
    if at <= now:
        at += ((now - at) // max_ms + 1) * max_ms
    return at


def short_room(view: ClusterView, pods: Sequence[Pod], level: str | None) -> str | None:
    """Why `pods` cannot be placed for want of room, before any placement is tried: what they
    request together exceeds the free room of the whole cluster or, under a required `level`,
    of every one of its domains. None when the room may suffice (placement decides)."""
    need = demand(pods)
    free = view.free()
    short = short_of(need, free)
    where = "in the whole cluster"
    if not short and level is not None:
        rooms = view.room(level)
        if domain_with_room(need, rooms) is not None:
            return None
        free = {
            name: max((room.get(name, 0) for room in rooms.values()), default=0) for name in need
        }
        short = short_of(need, free) or sorted(need)
        where = f"in any one {level}"
    if not short:
        return None
    amounts = ", ".join(
        f"{name} {format_units(name, need[name])} ({format_units(name, free.get(name, 0))} free)"
        for name in short
    )
    return f"{NO_ROOM} {len(pods)} pod(s) request {amounts} {where}"


def _admitted_reason(spec: GroupSpec, became_ready: str | None) -> str:
    """An admitted group's reason, read from its conditions: a pass that finds nothing new
    says what the decision that wrote them said, so it is not logged again (a no-intent
    decision per admission, and one more count of the admissions metric, before this)."""
    if became_ready is not None:
        return f"{PODS_READY}: {became_ready}"
    if spec.pods_ready is not None and spec.pods_ready.true:
        return f"{PODS_READY}: {spec.pods_ready.message}"
    message = spec.scheduled.message if spec.scheduled is not None else ""
    return f"Admitted: {spec.namespace}/{spec.name}: {message}"


def _floor_s(ms: int) -> int:
    """`ms` as a condition's lastTransitionTime will read back (whole seconds)."""
    return ms - ms % 1000


class _Group:
    """A group under decision: its spec and members, or why it cannot be read. Never changed
    once read (`Reads` hands the same one to later passes); `need` is filled on first use."""

    __slots__ = ("error", "members", "need", "spec")

    def __init__(self, spec: GroupSpec, members: Members) -> None:
        self.spec = spec
        self.members = members
        self.error: str | None = None
        # What the pending members request together and the level they must share (release).
        self.need: tuple[dict[str, int], str | None] | None = None


class Reads:
    """Groups read in earlier passes, handed out again while the PodGroup and every member
    are the very objects they were read from. The fold replaces an object on every change
    and never edits one, so a reused read is the read that would be made: no answer changes.
    Thousands of gangs waiting for room are looked at on every pass that frees some; reading
    each afresh (its spec parsed, its members sorted) was a quarter of the daemon's time."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[str, tuple[PodGroup, tuple[tuple[str, Pod | None], ...], _Group]] = {}

    def get(self, state: State, key: str) -> _Group | None:
        entry = self._entries.get(key)
        if entry is None or state.podgroups.get(key) is not entry[0]:
            return None
        keys = state.group_members.get(key, ())
        members = entry[1]
        if len(keys) != len(members):
            return None
        pods = state.pods
        for pod_key, pod in members:
            if pods.get(pod_key) is not pod:
                return None
        return entry[2]

    def put(self, state: State, key: str, podgroup: PodGroup, group: _Group) -> None:
        pods = state.pods
        members = tuple((k, pods.get(k)) for k in state.group_members.get(key, ()))
        self._entries[key] = (podgroup, members, group)

    def prune(self, state: State) -> None:
        """Forget groups no longer waiting once they could outnumber the waiting ones: only
        waiting groups are remembered, so what this holds beyond the state itself stays
        bounded by the queues."""
        queues = state.waiting_gangs.values()
        if len(self._entries) > 2 * sum(map(len, queues)) + 1_000:
            waiting = {key for queue in queues for *_, key in queue}
            self._entries = {k: v for k, v in self._entries.items() if k in waiting}


class _Step:
    """What one decision collects, possibly over several groups of a Workload."""

    def __init__(self, now: int) -> None:
        self.now = now
        self.binds: list[Intent] = []
        self.deletes: list[Intent] = []
        self.patches: list[Intent] = []
        self.reasons: list[str] = []
        self.requeue: int | None = None
        self._conditions: dict[str, tuple[GroupSpec, list[dict[str, str]]]] = {}

    def wake(self, at: int) -> None:
        if self.requeue is None or at < self.requeue:
            self.requeue = at

    def reason(self, text: str) -> None:
        self.reasons.append(text)

    def condition(
        self, spec: GroupSpec, type_: str, status: str, reason: str, message: str
    ) -> None:
        """Set a condition on the group unless it already reads so; the transition time moves
        only when the status does."""
        current = spec.scheduled if type_ == SCHEDULED else spec.pods_ready
        if current is not None and (current.status, current.reason, current.message) == (
            status,
            reason,
            message,
        ):
            return
        since = self.now
        if current is not None and current.status == status and current.since is not None:
            since = current.since
        entry = self._conditions.setdefault(spec.key, (spec, []))
        entry[1][:] = [c for c in entry[1] if c["type"] != type_]
        entry[1].append(
            {
                "type": type_,
                "status": status,
                "reason": reason,
                "message": message,
                "lastTransitionTime": rfc3339(since),
            }
        )

    def short_of_members(self, spec: GroupSpec, message: str) -> None:
        """``PodGroupScheduled=False`` for want of members, but only over a condition the
        group already has: upstream's PreEnqueue holds such a group's pods and writes
        nothing, and a group is usually seen before its pods, so a first write here would
        cost every gang a status patch and an Event, queued ahead of its admission."""
        if spec.scheduled is not None:
            self.condition(spec, SCHEDULED, "False", UNSCHEDULABLE, message)

    def bind(self, cluster: str, slots: Slots) -> None:
        for pod, node in slots:
            self.binds.append(Bind(cluster, "Pod", pod.namespace, pod.name, node, pod.uid))

    def named(self, name: str, start: int) -> None:
        """Prefix the reasons added since `start` with a group's name (Workload decisions
        speak for several groups)."""
        self.reasons[start:] = [f"{name}: {r}" for r in self.reasons[start:]]

    def delete(self, cluster: str, pods: Sequence[Pod]) -> None:
        for pod in pods:
            self.deletes.append(
                Delete(cluster, "Pod", pod.namespace, pod.name, precondition_uid=pod.uid)
            )

    def patch_pod(
        self,
        cluster: str,
        pod: Pod,
        patch: dict[str, Any],
        patch_type: Literal["merge", "strategic"] = "strategic",
    ) -> None:
        """A pod status patch (a victim's ``DisruptionTarget``, a nomination)."""
        self.patches.append(
            Patch(
                cluster,
                "Pod",
                pod.namespace,
                pod.name,
                patch=patch,
                patch_type=patch_type,
                subresource="status",
            )
        )

    def annotate(self, spec: GroupSpec, key: str, value: str) -> None:
        self.patches.append(
            Patch(
                spec.cluster,
                "PodGroup",
                spec.namespace,
                spec.name,
                patch={"metadata": {"annotations": {key: value}}},
            )
        )

    def decision(self) -> Decision | None:
        if not self.reasons:
            return None
        status: list[Intent] = [
            Patch(
                spec.cluster,
                "PodGroup",
                spec.namespace,
                spec.name,
                patch={"status": {"conditions": conditions}},
                patch_type="strategic",
                subresource="status",
            )
            for spec, conditions in self._conditions.values()
        ]
        # Binds before the status that announces them; deletes before the status that
        # explains them.
        intents = (*self.binds, *self.deletes, *status, *self.patches)
        return Decision("; ".join(self.reasons), intents, self.requeue)


class Cycle(Pass):
    """One scheduling cycle of gang admission, as kube-scheduler and Kueue run theirs:
    a snapshot of the state (`Pass`: each cluster's nodes and their free room, decided binds
    included), the waiting groups released from it in queue order and decided in that
    order, each admission assumed into the snapshot as it is decided, so that the groups
    after it see its room as taken. `reads` are the groups read in earlier cycles (`Reads`),
    which the runtime keeps between them (`GangReconciler.memo`)."""

    def __init__(self, reconciler: GangReconciler, state: State, reads: Reads) -> None:
        super().__init__(state)
        self.reconciler = reconciler
        self.reads = reads

    def release(self, queue: str) -> list[str]:
        return self.reconciler.release_in(self, queue)

    def decide(self, key: str, now: int) -> Decision | None:
        return self.reconciler.decide_in(self, key, now)


@dataclass(frozen=True)
class GangReconciler:
    """The gang scheduler's settings. Its decisions are made in a `Cycle`; `decide` and
    `release` on their own make each a cycle of its own."""

    scheduler_name: str = DEFAULT_SCHEDULER
    # None: no ready timeout.
    ready_timeout_ms: int | None = READY_TIMEOUT_MS
    backoff_base_ms: int = BACKOFF_BASE_MS
    backoff_max_ms: int = BACKOFF_MAX_MS
    # Evictions after which a group is no longer requeued (Kueue's backoffLimitCount); 0: never.
    max_evictions: int = 0
    retry_first_ms: int = RETRY_FIRST_MS
    retry_max_ms: int = RETRY_MAX_MS
    # The level a role-ratio unit stays inside when the Workload does not say; "" = the level
    # above the lowest.
    ratio_level: str = ""

    @property
    def name(self) -> str:
        return "gang"

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset({"PodGroup", "Workload"})

    @property
    def queues(self) -> frozenset[str]:
        return frozenset({QUEUE})

    def memo(self) -> Reads:
        """What the runtime keeps for this reconciler between cycles."""
        return Reads()

    def cycle(self, state: State, memo: Reads | None = None) -> Cycle:
        """A scheduling cycle over `state` (`memo`: from `memo`, kept between cycles)."""
        return Cycle(self, state, Reads() if memo is None else memo)

    def release(self, state: State, queue: str) -> list[str]:
        return self.cycle(state).release(queue)

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        return self.cycle(state).decide(key, now)

    def release_in(self, run: Cycle, queue: str) -> list[str]:
        """The keys to decide now that room was released on a cluster: its waiting groups,
        oldest first, as many as the free room holds when each takes what its pending
        members request — from the whole cluster, and from one domain of the level it
        requires. Kueue's BestEffortFIFO, bounded by the room instead of trying every
        waiting workload at every change. A group whose admission is in flight (the writes
        of its decision not seen yet) is passed over: its binds take their room already
        (`State.assumed`), and it may not be decided before they are seen anyway."""
        state = run.state
        cluster = queue.split("/", 1)[1]
        run.reads.prune(state)
        waiting = state.waiting_gangs.get(cluster)
        if not waiting:
            return []
        view = run.cluster(cluster)
        budgets: dict[str | None, dict[tuple[str, ...], dict[str, int]]] = {}

        def budget(level: str | None) -> dict[tuple[str, ...], dict[str, int]]:
            found = budgets.get(level)
            if found is None:
                found = budgets[level] = {d: dict(a) for d, a in view.room(level).items()}
            return found

        keys: dict[str, None] = {}  # in queue order
        passed = 0
        awaiting = state.awaiting
        for _, _, group_key in waiting:
            if f"PodGroup/{group_key}" in awaiting:
                continue  # admitted, its binds in flight: they take their room already
            group = self._read(run, cluster, group_key, remember=True)
            if group is None or not group.members.pending:
                continue  # waiting for members, not room: their arrival wakes it
            workload = group.spec.workload
            if workload is not None and (
                f"Workload/{cluster}/{group.spec.namespace}/{workload}" in awaiting
            ):
                continue  # the same, decided by the Workload that coordinates it
            if any(p.nominated for p in group.members.pending):
                # A preemptor: the room it waits for is held for it (`State.nominated`) and
                # counted as taken in the budget; its own decision sees it free.
                released_now: set[str] = set()
                dirty_group(state, group_key, released_now)
                keys.update(dict.fromkeys(sorted(released_now)))
                continue
            if group.need is None:
                group.need = (demand(group.members.pending), self._required(group))
            need, level = group.need
            takes = [budget(None).get((), {})]
            if level is not None:
                rooms = budget(level)
                domain = domain_with_room(need, rooms)
                takes.append(rooms[domain] if domain is not None else {})
            if not all(fits(need, room) for room in takes):
                passed += 1
                if passed > QUEUE_LOOKAHEAD:
                    break
                continue
            passed = 0
            for room in takes:
                for name, amount in need.items():
                    room[name] = room.get(name, 0) - amount
            released: set[str] = set()
            dirty_group(state, group_key, released)
            keys.update(dict.fromkeys(sorted(released)))
        return list(keys)

    def decide_in(self, run: Cycle, key: str, now: int) -> Decision | None:
        state = run.state
        kind, cluster, namespace, name = split_ref(key)
        if kind == "PodGroup":
            return self._decide_group(state, run, cluster, namespace, name, now)
        if kind == "Workload":
            return self._decide_workload(state, run, cluster, namespace, name, now)
        return None

    # -- reading ----------------------------------------------------------------------------

    def _has_ours(self, state: State, group_key: str) -> bool:
        """Whether any pod of the group names kbatchd's scheduler (`Members.ours`), without
        reading them."""
        return self.scheduler_name in state.group_schedulers.get(group_key, {})

    def _members(self, state: State, group_key: str) -> Members:
        pods = state.pods
        # A group's pods share its namespace: their keys sort as their names.
        keys = sorted(state.group_members.get(group_key, ()))
        return members((pods[k] for k in keys if k in pods), self.scheduler_name)

    def _read(
        self, run: Cycle, cluster: str, group_key: str, *, remember: bool = False
    ) -> _Group | None:
        """The group and its members; `remember`: keep the read for later cycles (waiting
        groups, which `release` looks at again and again)."""
        state = run.state
        read = run.reads.get(state, group_key)
        if read is not None:
            return read
        group = state.podgroups.get(group_key)
        if group is None:
            return None
        read = self._read_afresh(state, cluster, group_key, group)
        if remember:
            run.reads.put(state, group_key, group, read)
        return read

    def _read_afresh(self, state: State, cluster: str, group_key: str, group: PodGroup) -> _Group:
        found = self._members(state, group_key)
        try:
            spec = group_spec(cluster, group)
        except GangSpecError as exc:
            # Enough of a spec to report the error on the group (once: its conditions are
            # read so that an unchanged report is not written again) and find its Workload.
            try:
                conditions = conditions_of(group.status, "PodGroup")
            except GangSpecError:
                conditions = {}
            spec = GroupSpec(
                cluster=cluster,
                namespace=group.namespace,
                name=group.name,
                uid=group.uid,
                min_count=1,
                topology_key=None,
                workload=workload_name(group),
                template=None,
                scheduled=conditions.get(SCHEDULED),
                pods_ready=conditions.get(PODS_READY),
                evictions=0,
            )
            result = _Group(spec, found)
            result.error = str(exc)
            return result
        return _Group(spec, found)

    def _coordinated(self, workload: Workload) -> bool:
        if ROLE_RATIO in workload.annotations or _composite(workload):
            return True
        templates = template_names(workload)
        # An empty annotation: no leader (a JobSet's Workload without its composite).
        leader = workload.annotations.get(LEADER_TEMPLATE, DEFAULT_LEADER_TEMPLATE)
        return bool(leader) and leader in templates and len(templates) > 1

    # -- a PodGroup on its own --------------------------------------------------------------

    def _decide_group(
        self, state: State, run: Cycle, cluster: str, namespace: str, name: str, now: int
    ) -> Decision | None:
        group_key = f"{cluster}/{namespace}/{name}"
        if not self._has_ours(state, group_key):
            # Not kbatchd's group (or no member yet: nothing to say about it).
            return None
        group = self._read(run, cluster, group_key)
        if group is None:
            return None
        spec = group.spec
        step = _Step(now)
        if spec.workload is not None and group.error is None:
            workload = state.workloads.get(f"{cluster}/{namespace}/{spec.workload}")
            if workload is None:
                # Watches of different kinds race; the apiserver admits a PodGroup only
                # after its Workload, so it is on its way.
                pod_group = state.podgroups[spec.key]
                step.reason(f"WaitingForWorkload: Workload {namespace}/{spec.workload} not seen")
                step.wake(retry_at(pod_group.created, now, self.retry_first_ms, self.retry_max_ms))
                return step.decision()
            if self._coordinated(workload):
                return None  # the Workload's key decides
        interrupted = self._interrupted(state, [group])
        if interrupted:
            self._resume(step, run.cluster(cluster), interrupted)
        else:
            self._one(step, run.cluster(cluster), state.topology.levels, group)
        return step.decision()

    def _one(
        self,
        step: _Step,
        view: ClusterView,
        levels: tuple[str, ...],
        group: _Group,
        *,
        blocked: str | None = None,
        leader: tuple[str, Sequence[Pod]] | None = None,
        within: Restrict = (),
    ) -> bool:
        """Decide one group into `step`. `blocked` keeps it from being admitted (why);
        `leader` is a (required level, bound pods) whose domain it must join at that level;
        `within` a domain it must be placed in. Returns whether the group was evicted."""
        spec, found = group.spec, group.members
        if group.error is not None:
            self._invalid(step, spec, group.error)
            return False
        if found.foreign and found.ours:
            self._unschedulable(
                step,
                spec,
                f"SchedulerNameMismatch: pods {', '.join(p.name for p in found.foreign[:3])} "
                f"name another scheduler than {self.scheduler_name}",
                None,
            )
            return False
        if spec.reason_is(LIMIT_EXCEEDED):
            step.reason(f"{LIMIT_EXCEEDED}: evicted {spec.evictions} time(s); not requeued")
            return False
        if spec.admitted:
            return self._admitted(step, view, levels, group)
        if self._backing_off(step, spec):
            return False
        if self._limit_reached(step, spec):
            return False
        if blocked is not None:
            self._unschedulable(step, spec, blocked, None)
            return False
        going = [p for p in found.bound if preempt.leaving(p)]
        if going:
            # Preempted (or otherwise disrupted): placed again only once they are gone.
            step.reason(f"Preempted: waiting for {len(going)} evicted member(s) to go")
            return False
        if found.count < spec.min_count:
            self._not_enough(step, spec, found)
            return False
        slots: Slots | str = []
        if found.pending:
            slots = self._place(view, levels, group, leader, within)
        if isinstance(slots, str):
            if slots.startswith(INVALID):
                self._invalid(step, spec, slots[len(INVALID) :].strip())
                return False
            if (
                not (leader or within)
                and slots.startswith(ROOM_REASONS)
                and self._preempt(step, view, levels, group)
            ):
                return False
            self._forget_nominations(step, spec, found)
            if slots.startswith(NO_ROOM):
                self._no_room(step, spec, slots)
            else:
                self._unschedulable(step, spec, slots, step.now)
            return False
        self._admit(step, view, spec, slots, found.bound)
        return False

    def _place(
        self,
        view: ClusterView,
        levels: tuple[str, ...],
        group: _Group,
        leader: tuple[str, Sequence[Pod]] | None = None,
        within: Restrict = (),
    ) -> Slots | str:
        """Nodes for every pending member, next to the bound ones (and the leader; else
        `within` a domain, when given)."""
        spec, found = group.spec, group.members
        # The room held for its own pods is free to it. (The pass's view keeps it charged if
        # the group is admitted: conservative, and only until the next pass.)
        view = view.free_nominations(spec.key, found.pending)
        try:
            request = topology_request(spec, (*found.bound, *found.pending))
        except GangSpecError as exc:
            return f"InvalidRequest: {exc}"
        levels = levels_for(levels, request)
        restrict: Restrict = ()
        level = request.required
        if level is not None:
            restrict = anchor(view, levels, level, found.bound)
            if not restrict and leader is not None and leader[0] == level:
                restrict = anchor(view, levels, level, leader[1])
            if not restrict:
                restrict = within
        pods = found.pending
        short = short_room(view, pods, None if restrict else level)
        if short is not None:
            return short
        wanted = pod_set(spec.name, len(pods), max_requests(pods), request, pods[0])
        slots = fit(view, levels, wanted, pods, restrict)
        if isinstance(slots, str) and restrict:
            where = ",".join(value for _, value in restrict)
            return f"{slots} (confined to {where})"
        return slots

    def _admit(
        self,
        step: _Step,
        view: ClusterView,
        spec: GroupSpec,
        slots: Slots,
        bound: Sequence[Pod],
        *,
        assumed: bool = False,
    ) -> None:
        """Bind `slots` and mark the group admitted (`bound`: members already on nodes;
        `assumed`: the view charges `slots` already)."""
        step.bind(spec.cluster, slots)
        if not assumed:
            view.assume(slots)
        nodes = len({node for _, node in slots} | {p.node_name for p in bound})
        message = f"{len(slots) + len(bound)} pod(s) bound to {nodes} node(s)"
        step.condition(spec, SCHEDULED, "True", SCHEDULED_REASON, message)
        step.reason(f"Admitted: {spec.namespace}/{spec.name}: {message}")
        if self.ready_timeout_ms is not None:
            step.condition(
                spec, PODS_READY, "False", WAIT_FOR_START, "waiting for minCount pods to be ready"
            )
            step.wake(_floor_s(step.now) + self.ready_timeout_ms)

    def _admitted(
        self, step: _Step, view: ClusterView, levels: tuple[str, ...], group: _Group
    ) -> bool:
        spec, found = group.spec, group.members
        going = [p for p in found.bound if preempt.leaving(p)]
        if going and spec.evicted_whole:
            # A victim evicted whole (KEP-5710) whose preemptor's requeue is not seen yet.
            step.condition(spec, SCHEDULED, "False", UNSCHEDULABLE, VICTIM_REQUEUED)
            step.reason(
                f"{VICTIM_REQUEUED}; {len(going)} member(s) marked DisruptionTarget, requeued"
            )
            return False
        if going:
            step.reason(f"Disrupted: {len(going)} member(s) marked DisruptionTarget")
        since = spec.admitted_at if spec.admitted_at is not None else step.now
        timing = self.ready_timeout_ms is not None and not (
            spec.pods_ready is not None and spec.pods_ready.true
        )
        became_ready: str | None = None
        if timing and self.ready_timeout_ms is not None:
            ready = found.ready()
            deadline = since + self.ready_timeout_ms
            if ready >= spec.min_count:
                became_ready = f"{ready} pod(s) ready"
                step.condition(spec, PODS_READY, "True", STARTED, became_ready)
            elif step.now >= deadline:
                self._evict(step, spec, found, ready)
                return True
            else:
                step.wake(deadline)
        if found.pending:
            slots = self._place(view, levels, group)
            if isinstance(slots, str):
                step.reason(f"ExtraMembersUnschedulable: {slots}")
                step.wake(retry_at(since, step.now, self.retry_first_ms, self.retry_max_ms))
                return False
            step.bind(spec.cluster, slots)
            view.assume(slots)
            step.reason(f"Extended: {len(slots)} more member(s) bound")
            return False
        step.reason(_admitted_reason(spec, became_ready))
        return False

    # -- preemption (KEP-5710) ---------------------------------------------------------------

    def _preempt(
        self, step: _Step, view: ClusterView, levels: tuple[str, ...], group: _Group
    ) -> bool:
        """Make room for a gang that did not fit by evicting lower-priority units
        (`gang.preempt`), or wait for the room an earlier preemption is freeing. Two
        decisions, since a decision touches a pod once: the first marks every victim pod
        ``DisruptionTarget`` (so a Job's podFailurePolicy can tell) and nominates the gang's
        pods to the nodes it was placed on; the next deletes the marked victims. False when
        preemption cannot help: the caller reports the gang unschedulable."""
        spec, found = group.spec, group.members
        lowest = view.lowest_priority()
        if not spec.preempts or lowest is None or lowest >= spec.priority:
            return False
        shared, view = view, view.free_nominations(spec.key, found.pending)
        preemptor = preempt.Preemptor(
            spec.namespace, spec.name, spec.priority, found.pending, self._required(group)
        )

        def place(on: ClusterView, within: Restrict) -> Slots | str:
            return self._place(on, levels, group, within=within)

        found_plan = preempt.plan(view, place, preemptor)
        if isinstance(found_plan, str):
            step.reason(f"NotPreempting: {found_plan}")
            return False
        if found_plan.waiting:
            self._await_victims(step, spec, found_plan.victims)
        else:
            self._mark_victims(step, spec, found_plan)
        self._requeue_victims(step, view.state, found_plan.victims)
        self._nominate(step, shared, found_plan.slots)
        step.condition(spec, SCHEDULED, "False", UNSCHEDULABLE, WAITING_FOR_PREEMPTION)
        step.wake(step.now + self.retry_first_ms)
        return True

    def _mark_victims(self, step: _Step, spec: GroupSpec, found: preempt.Plan) -> None:
        message = (
            f"{self.scheduler_name}: preempting to accommodate a higher priority podgroup "
            f"{spec.namespace}/{spec.name}"
        )
        stamp = rfc3339(step.now)
        for unit in found.victims:
            for pod in unit.pods:
                step.patch_pod(spec.cluster, pod, preempt.disruption(message, stamp))
        step.reason(
            f"Preempting: {spec.namespace}/{spec.name} (priority {spec.priority}) evicts "
            f"{preempt.describe(found.victims)} (weight {preempt.weight(found.victims)}); "
            f"{len(found.spared)} lower-priority unit(s) spared"
        )

    def _requeue_victims(self, step: _Step, state: State, victims: Sequence[preempt.Unit]) -> None:
        """Send kbatchd's groups evicted whole back to the queue, in the decision that
        evicts them: their own pass may come only once their members are gone, and a group
        with no member left naming kbatchd is not decided (`_decide_group`), so it would
        stay admitted, and members recreated for it would be bound one by one
        (`_admitted`) instead of placed together."""
        for unit in victims:
            podgroup = state.podgroups.get(unit.group) if unit.group else None
            if podgroup is None or not self._has_ours(state, unit.group):
                continue
            try:
                victim = group_spec(unit.group.split("/", 1)[0], podgroup)
            except GangSpecError:
                continue  # its own decisions report it
            if victim.admitted:
                step.condition(victim, SCHEDULED, "False", UNSCHEDULABLE, VICTIM_REQUEUED)

    def _await_victims(self, step: _Step, spec: GroupSpec, victims: Sequence[preempt.Unit]) -> None:
        """The gang fits once its victims, already leaving, are gone: delete those not yet
        being deleted, and wait. (Another preemptor's victims are that one's to delete.)"""
        marked = [p for u in victims for p in u.pods if p.deletion_ts is None]
        step.delete(spec.cluster, marked)
        gone = sum(len(u.pods) for u in victims)
        step.reason(
            f"WaitingForPreemption: {gone} victim pod(s) still to go, {len(marked)} deleted now"
        )

    def _nominate(self, step: _Step, view: ClusterView, slots: Slots) -> None:
        """Hold the nodes `slots` name for their pending pods until the preemption is done:
        the pods' ``nominatedNodeName``, which the fold charges to the node from the decision
        on (`events.expectations`), and the pass's `view` charged now, so that no other gang
        decided from either takes that room (two preemptors never claim one victim)."""
        moved = [(pod, node) for pod, node in slots if pod.nominated != node]
        for pod, node in moved:
            step.patch_pod(view.cluster, pod, {"status": {"nominatedNodeName": node}}, "merge")
        view.assume(moved)

    def _forget_nominations(self, step: _Step, spec: GroupSpec, found: Members) -> None:
        """A gang that gives up waiting for its preemption lets go of the room held for it
        (kube-scheduler clears nominations after a failed cycle)."""
        for pod in found.pending:
            if pod.nominated:
                step.patch_pod(spec.cluster, pod, {"status": {"nominatedNodeName": None}}, "merge")

    # -- an admission a crash cut short ------------------------------------------------------

    def _interrupted(
        self, state: State, groups: Sequence[_Group]
    ) -> list[tuple[_Group, Admission]]:
        """The groups whose admission is in the log (`State.admissions`) but not seen whole:
        the daemon stopped between its first bind and the status that announces it, or the
        API server refused some of its binds. (A group is decided again only once each of
        its decision's writes is seen or failed: a placed pod still unbound is not one whose
        bind is on its way.)"""
        found: list[tuple[_Group, Admission]] = []
        for group in groups:
            admission = state.admissions.get(group.spec.key)
            if (
                admission is not None
                and group.error is None
                and (not group.spec.admitted or self._planned(group, admission))
            ):
                found.append((group, admission))
        return found

    def _resume(
        self, step: _Step, view: ClusterView, interrupted: Sequence[tuple[_Group, Admission]]
    ) -> None:
        """Finish interrupted admissions with the binds they decided, or, where a decided node
        cannot take its pod any more, with the group's unbound members placed again next to
        its bound ones (if it has any). If any of them cannot be finished, evict what they
        bound and requeue them all (groups admitted together stand or fall together): never a
        gang left partly bound."""
        plans: list[tuple[_Group, Admission, Slots, bool]] = []
        for group, admission in interrupted:
            spec, found = group.spec, group.members
            slots = self._planned(group, admission)
            count = len(found.bound) + len(found.succeeded) + len(slots)
            if count < spec.min_count:
                why = f"{count} of minCount {spec.min_count} member(s) left to finish it"
            elif (refusal := view.refusal(slots)) is None:
                plans.append((group, admission, slots, False))
                continue
            else:
                why = refusal
                # Only next to members already bound: they hold the group to the domain its
                # admission chose (the leader's, in a Workload that places one first).
                if found.bound:
                    again = self._place(view, view.state.topology.levels, group)
                    if not isinstance(again, str):
                        # Charged now: another group of the Workload is placed after it.
                        view.assume(again)
                        plans.append((group, admission, again, True))
                        continue
            for each, _ in interrupted:
                self._revoke(step, each, f"{spec.name}: {why}")
            return
        for group, admission, slots, placed_again in plans:
            how = "placed again" if placed_again else "left"
            step.reason(
                f"AdmissionResumed: {group.spec.namespace}/{group.spec.name}: "
                f"{len(slots)} bind(s) {how} of decision {admission.decision}"
            )
            self._admit(step, view, group.spec, slots, group.members.bound, assumed=placed_again)

    @staticmethod
    def _planned(group: _Group, admission: Admission) -> Slots:
        """The admission's binds still to make: its unbound pods (the very pods it placed),
        each with the node it decided."""
        spec, planned = group.spec, admission.binds
        slots: Slots = []
        for pod in group.members.pending:
            bind = planned.get(f"{spec.cluster}/{pod.namespace}/{pod.name}")
            if bind is not None and bind[0] == pod.uid:
                slots.append((pod, bind[1]))
        return slots

    def _revoke(self, step: _Step, group: _Group, why: str) -> None:
        spec, bound = group.spec, group.members.bound
        step.delete(spec.cluster, bound)
        message = f"{INTERRUPTED} {why}; {len(bound)} bound member(s) evicted, requeued"
        self._unschedulable(step, spec, message, step.now)

    def _evict(self, step: _Step, spec: GroupSpec, found: Members, ready: int) -> None:
        evictions = spec.evictions + 1
        timeout_s = (self.ready_timeout_ms or 0) // 1000
        message = (
            f"{ready} of minCount {spec.min_count} pod(s) ready {timeout_s}s after admission; "
            f"evicted (eviction {evictions})"
        )
        step.delete(spec.cluster, (*found.bound, *found.pending, *found.gated))
        step.condition(spec, SCHEDULED, "False", READY_TIMEOUT, message)
        step.annotate(spec, EVICTIONS, str(evictions))
        step.reason(f"{READY_TIMEOUT}: {message}")
        step.wake(
            _floor_s(step.now) + backoff_ms(evictions, self.backoff_base_ms, self.backoff_max_ms)
        )

    def _backing_off(self, step: _Step, spec: GroupSpec) -> bool:
        scheduled = spec.scheduled
        if not spec.reason_is(READY_TIMEOUT) or scheduled is None or scheduled.since is None:
            return False
        until = scheduled.since + backoff_ms(
            spec.evictions, self.backoff_base_ms, self.backoff_max_ms
        )
        if step.now >= until:
            return False
        step.reason(f"BackingOff: evicted {spec.evictions} time(s); requeued at {rfc3339(until)}")
        step.wake(until)
        return True

    def _limit_reached(self, step: _Step, spec: GroupSpec) -> bool:
        if not self.max_evictions or spec.evictions < self.max_evictions:
            return False
        message = f"evicted {spec.evictions} time(s); the limit is {self.max_evictions}"
        step.condition(spec, SCHEDULED, "False", LIMIT_EXCEEDED, message)
        step.reason(f"{LIMIT_EXCEEDED}: {message}")
        return True

    def _not_enough(self, step: _Step, spec: GroupSpec, found: Members) -> None:
        # No count in the reason or the message: members arrive one by one, and a count
        # would log a decision (and write the status) per arriving pod.
        message = f"{NOT_ENOUGH_MEMBERS} waiting for minCount {spec.min_count} member pod(s)"
        step.short_of_members(spec, message)
        step.reason(message)

    def _unschedulable(
        self, step: _Step, spec: GroupSpec, message: str, retry_from: int | None
    ) -> None:
        """Not admitted: the reason goes to the condition, the decision and (via the runner)
        the log. `retry_from` set: ask to be decided again on the retry schedule."""
        step.condition(spec, SCHEDULED, "False", UNSCHEDULABLE, message)
        step.reason(f"Unschedulable: {message}")
        if retry_from is not None:
            scheduled = spec.scheduled
            since = _floor_s(retry_from)
            if scheduled is not None and not scheduled.true and scheduled.since is not None:
                since = scheduled.since
            step.wake(retry_at(since, step.now, self.retry_first_ms, self.retry_max_ms))

    def _no_room(self, step: _Step, spec: GroupSpec, message: str) -> None:
        """Not admitted for want of room (`short_room`). A group already waiting for room
        keeps its message: a fresh count would rewrite its status at every retry."""
        scheduled = spec.scheduled
        if (
            scheduled is not None
            and scheduled.status == "False"
            and scheduled.reason == UNSCHEDULABLE
            and scheduled.message.startswith(ROOM_REASONS)
        ):
            message = scheduled.message
        self._unschedulable(step, spec, message, step.now)

    def _invalid(self, step: _Step, spec: GroupSpec, message: str) -> None:
        step.condition(spec, SCHEDULED, "False", SCHEDULER_ERROR, f"InvalidSpec: {message}")
        step.reason(f"InvalidSpec: {message}")

    # -- coordinated Workloads --------------------------------------------------------------

    def _groups_of(self, run: Cycle, cluster: str, namespace: str, workload: str) -> list[_Group]:
        found: list[_Group] = []
        workload_key = f"{cluster}/{namespace}/{workload}"
        for key in sorted(run.state.workload_groups.get(workload_key, ())):
            if not self._has_ours(run.state, key):
                continue
            group = self._read(run, cluster, key)
            if group is not None:
                found.append(group)
        return found

    def _decide_workload(
        self, state: State, run: Cycle, cluster: str, namespace: str, name: str, now: int
    ) -> Decision | None:
        workload = state.workloads.get(f"{cluster}/{namespace}/{name}")
        if workload is None or not self._coordinated(workload):
            return None
        groups = self._groups_of(run, cluster, namespace, name)
        if not groups:
            return None
        step = _Step(now)
        view = run.cluster(cluster)
        levels = state.topology.levels
        interrupted = self._interrupted(state, groups)
        if interrupted:
            self._resume(step, view, interrupted)
        elif _composite(workload):
            by_parent: dict[str | None, list[_Group]] = {}
            for group in groups:
                by_parent.setdefault(group.spec.parent, []).append(group)
            for parent, children in sorted(by_parent.items(), key=lambda i: i[0] or ""):
                if parent is None:
                    for group in children:
                        start = len(step.reasons)
                        self._one(step, view, levels, group)
                        step.named(group.spec.name, start)
                else:
                    self._tree(step, view, levels, workload, parent, children)
        elif ROLE_RATIO in workload.annotations:
            self._ratio(step, view, levels, workload, groups)
        else:
            self._leader_first(step, view, levels, workload, groups)
        return step.decision()

    def _leader_first(
        self,
        step: _Step,
        view: ClusterView,
        levels: tuple[str, ...],
        workload: Workload,
        groups: list[_Group],
    ) -> None:
        template = workload.annotations.get(LEADER_TEMPLATE, DEFAULT_LEADER_TEMPLATE)
        leaders = [g for g in groups if g.spec.template == template]
        workers = [g for g in groups if g.spec.template != template]
        for group in leaders:
            spec, found = group.spec, group.members
            if group.error is None and spec.admitted:
                alive = len(found.bound) + len(found.succeeded)
                if alive < spec.min_count:
                    self._restart(
                        step,
                        groups,
                        f"leader group {spec.name} has {alive} of minCount {spec.min_count} "
                        f"pod(s) left",
                    )
                    return
        for group in leaders:
            start = len(step.reasons)
            evicted = self._one(step, view, levels, group)
            step.named(group.spec.name, start)
            if evicted:
                self._restart(
                    step, workers, f"leader group {group.spec.name} was evicted", evicted=True
                )
                return
        running = bool(leaders) and all(
            g.error is None
            and g.spec.admitted
            and g.members.bound
            and g.members.running() == len(g.members.bound)
            and g.members.running() >= g.spec.min_count
            for g in leaders
        )
        leader: tuple[str, Sequence[Pod]] | None = None
        if running:
            level = self._required(leaders[0])
            if level is not None:
                leader = (level, [p for g in leaders for p in g.members.bound])
        blocked = (
            None
            if running
            else (
                f"WaitingForLeader: the {template} group(s) of Workload {workload.name} must be "
                f"Running first"
            )
        )
        for group in workers:
            start = len(step.reasons)
            self._one(step, view, levels, group, blocked=blocked, leader=leader)
            step.named(group.spec.name, start)
        if not leaders:
            step.reason(f"WaitingForLeader: no {template} group of Workload {workload.name} yet")

    # -- composite groups (KEP-6012) ---------------------------------------------------------

    def _tree(
        self,
        step: _Step,
        view: ClusterView,
        levels: tuple[str, ...],
        workload: Workload,
        parent: str,
        children: list[_Group],
    ) -> None:
        """The child groups of one CompositePodGroup: admitted together (at least
        ``minGroupCount`` of them, each whole), all inside one domain of its topology level,
        each inside one of its own; the leader template's groups are bound first and the
        others once the leaders run, their room held for them meanwhile."""
        state = view.state
        namespace = workload.namespace
        found = state.compositepodgroups.get(f"{view.cluster}/{namespace}/{parent}")
        if found is None:
            step.reason(f"WaitingForParent: CompositePodGroup {namespace}/{parent} not seen")
            since = min(state.podgroups[g.spec.key].created for g in children)
            step.wake(retry_at(since, step.now, self.retry_first_ms, self.retry_max_ms))
            return
        try:
            composite = composite_spec(found)
        except GangSpecError as exc:
            for group in children:
                self._invalid(step, group.spec, str(exc))
            return
        template = workload.annotations.get(LEADER_TEMPLATE, DEFAULT_LEADER_TEMPLATE)
        ordered = sorted(children, key=lambda g: (g.spec.template != template, g.spec.name))
        leaders = [g for g in ordered if g.spec.template == template]
        if composite.min_group_count is None or any(g.spec.admitted for g in ordered):
            self._tree_started(step, view, levels, composite, ordered, leaders)
            return
        self._tree_admit(step, view, levels, composite, ordered, leaders)

    def _tree_admit(
        self,
        step: _Step,
        view: ClusterView,
        levels: tuple[str, ...],
        composite: CompositeSpec,
        ordered: list[_Group],
        leaders: list[_Group],
    ) -> None:
        """A tree none of whose groups is admitted yet: all at once or none."""
        name = composite.name
        wanted = composite.min_group_count or len(ordered)
        ready = [
            g
            for g in ordered
            if g.error is None
            and g.members.count >= g.spec.min_count
            and g.members.pending
            and not any(preempt.leaving(p) for p in g.members.bound)
        ]
        for group in ordered:
            if group.error is not None:
                self._invalid(step, group.spec, group.error)
        if len(ready) < wanted:
            message = (
                f"{NOT_ENOUGH_MEMBERS} waiting for minGroupCount {wanted} group(s) of "
                f"CompositePodGroup {name} to have their pods"
            )
            for group in ordered:
                if group.error is None:
                    step.short_of_members(group.spec, message)
            step.reason(f"{message} ({len(ready)} have)")
            return
        plan, why = self._tree_plan(view, levels, composite, ready)
        if plan is None:
            message = f"CompositeUnschedulable: CompositePodGroup {name}: {why}"
            for group in ready:
                self._unschedulable(step, group.spec, message, step.now)
            return
        pods = sum(len(slots) for _, slots in plan)
        summary = f"Admitted: CompositePodGroup {name}: {len(plan)} group(s), {pods} pod(s)"
        first = [g for g, _ in plan if g in leaders]
        if not first:
            step.reason(summary)
            for group, slots in plan:
                self._admit(step, view, group.spec, slots, group.members.bound)
            return
        step.reason(
            f"{summary} placed; the leader group(s) bound first, {len(plan) - len(first)} "
            f"group(s) hold their room"
        )
        for group, slots in plan:
            if group in leaders:
                self._admit(step, view, group.spec, slots, group.members.bound)
                continue
            # Bound once the leaders run; the room stays theirs meanwhile.
            self._nominate(step, view, slots)
            step.condition(
                group.spec,
                SCHEDULED,
                "False",
                UNSCHEDULABLE,
                f"WaitingForLeader: the leader group(s) of CompositePodGroup {name} must be "
                f"Running first",
            )

    def _tree_plan(
        self,
        view: ClusterView,
        levels: tuple[str, ...],
        composite: CompositeSpec,
        ready: list[_Group],
    ) -> tuple[list[tuple[_Group, Slots]] | None, str]:
        """Where every ready group goes, in one domain of the composite's level (the first,
        by name, that holds them all: upstream places the children greedily, in order, without
        backtracking), or why nowhere does."""
        level = composite.topology_key
        configured = view.state.topology.levels
        domains: list[tuple[str, ...]] = [()]
        if level is not None:
            need = demand([p for g in ready for p in g.members.pending])
            rooms = view.room(level)
            domains = sorted(d for d, room in rooms.items() if fits(need, room))
            if not domains:
                return None, f"no {level} has room for its {len(ready)} group(s)"
        why = ""
        for domain in domains:
            within = restrict_to(configured, level, domain) if level is not None else ()
            trial = view.copy()
            plan: list[tuple[_Group, Slots]] = []
            for group in ready:
                slots = self._place(trial, levels, group, within=within)
                if isinstance(slots, str):
                    where = ",".join(domain) or "the cluster"
                    why = f"group {group.spec.name} does not fit in {where}: {slots}"
                    break
                trial.assume(slots)
                plan.append((group, slots))
            else:
                return plan, ""
        return None, why

    def _tree_started(
        self,
        step: _Step,
        view: ClusterView,
        levels: tuple[str, ...],
        composite: CompositeSpec,
        ordered: list[_Group],
        leaders: list[_Group],
    ) -> None:
        """A tree already admitted (or a basic one): each group as on its own, the ones still
        waiting inside the domain the admitted ones occupy at the composite's level, and the
        workers only once the leaders run."""
        level = composite.topology_key
        configured = view.state.topology.levels
        within: Restrict = ()
        if level is not None:
            for group in ordered:
                for pod in group.members.bound:
                    labels = view.labels_of(pod.node_name)
                    domain = domain_of(labels, configured, level) if labels else None
                    if domain is not None:
                        within = restrict_to(configured, level, domain)
                        break
                if within:
                    break
        running = all(
            g.spec.admitted and g.members.bound and g.members.running() >= g.spec.min_count
            for g in leaders
        )
        blocked = (
            None
            if running
            else f"WaitingForLeader: the leader group(s) of CompositePodGroup {composite.name} "
            f"must be Running first"
        )
        for group in ordered:
            start = len(step.reasons)
            if group.spec.admitted or group in leaders:
                self._one(step, view, levels, group, within=within)
            else:
                self._one(step, view, levels, group, blocked=blocked, within=within)
            step.named(group.spec.name, start)

    def _required(self, group: _Group) -> str | None:
        """The level a group requires all its members in, None when none (or unreadable)."""
        if group.error is not None:
            return None
        found = group.members
        try:
            return topology_request(group.spec, (*found.bound, *found.pending)).required
        except GangSpecError:
            return None

    def _restart(
        self, step: _Step, groups: Sequence[_Group], why: str, *, evicted: bool = False
    ) -> None:
        """Delete every member of `groups` and reset them: the job starts over."""
        for group in groups:
            found = group.members
            step.delete(group.spec.cluster, (*found.bound, *found.pending, *found.gated))
            if group.error is None and (group.spec.admitted or not evicted):
                step.condition(group.spec, SCHEDULED, "False", LEADER_LOST, f"{LEADER_LOST}: {why}")
        step.reason(f"{LEADER_LOST}: {why}; restarting the workload")

    def _ratio(
        self,
        step: _Step,
        view: ClusterView,
        levels: tuple[str, ...],
        workload: Workload,
        groups: list[_Group],
    ) -> None:
        where = f"Workload {workload.namespace}/{workload.name}: annotation {ROLE_RATIO}"
        try:
            roles = ratios.parse_ratio(workload.annotations[ROLE_RATIO], where)
            unit_level = ratios.unit_level(
                workload.annotations.get(ROLE_RATIO_TOPOLOGY),
                self.ratio_level,
                levels,
                f"Workload {workload.namespace}/{workload.name}",
            )
            missing = [r.name for r in roles if r.name not in template_names(workload)]
            if missing:
                raise GangSpecError(f"{where}: no podGroupTemplate named {', '.join(missing)}")
        except GangSpecError as exc:
            for group in groups:
                self._invalid(step, group.spec, str(exc))
            return
        names = {r.name for r in roles}
        for group in groups:
            if group.spec.template not in names:
                # Not a role: an ordinary group that happens to share the Workload.
                self._one(step, view, levels, group)
        by_role: dict[str, list[_Group]] = {r.name: [] for r in roles}
        for group in groups:
            if group.spec.template in by_role:
                by_role[group.spec.template].append(group)
        role_groups: list[_Group] = []
        for role in roles:
            found = by_role[role.name]
            if len(found) > 1:
                for group in found:
                    self._invalid(
                        step, group.spec, f"{where}: more than one PodGroup for role {role.name}"
                    )
                return
            if not found:
                step.reason(f"{NOT_ENOUGH_MEMBERS} no PodGroup for role {role.name} yet")
                return
            if found[0].error is not None:
                self._invalid(step, found[0].spec, found[0].error)
                return
            role_groups.append(found[0])
        self._ratio_units(step, view, levels, roles, unit_level, role_groups)

    def _ratio_units(
        self,
        step: _Step,
        view: ClusterView,
        levels: tuple[str, ...],
        roles: tuple[ratios.Role, ...],
        unit_level: str,
        role_groups: list[_Group],
    ) -> None:
        specs = [g.spec for g in role_groups]
        if any(s.reason_is(LIMIT_EXCEEDED) for s in specs):
            step.reason(f"{LIMIT_EXCEEDED}: not requeued")
            return
        for group in role_groups:
            if group.members.foreign:
                self._one(step, view, levels, group)  # reports the scheduler mismatch
                return
        admitted = [g for g in role_groups if g.spec.admitted]
        # Readiness is judged per role group; one group missing its deadline evicts all.
        late = False
        for group in admitted:
            spec, found = group.spec, group.members
            if self.ready_timeout_ms is None or (spec.pods_ready and spec.pods_ready.true):
                continue
            ready = found.ready()
            deadline = (spec.admitted_at or step.now) + self.ready_timeout_ms
            if ready >= spec.min_count:
                step.condition(spec, PODS_READY, "True", STARTED, f"{ready} pod(s) ready")
            elif step.now >= deadline:
                late = True
            else:
                step.wake(deadline)
        if late:
            for group in role_groups:
                self._evict(step, group.spec, group.members, group.members.ready())
            return
        if not admitted:
            for spec in specs:
                if self._backing_off(step, spec):
                    return
            for spec in specs:
                if self._limit_reached(step, spec):
                    return
        text = ratios.describe(roles)
        units = min(
            len(g.members.pending) // r.weight for g, r in zip(role_groups, roles, strict=True)
        )
        needed = 1
        if not admitted:
            needed = max(
                -(-g.spec.min_count // r.weight) for g, r in zip(role_groups, roles, strict=True)
            )
        if units < needed:
            # Constant texts: a count would log a decision per arriving pod.
            if admitted:
                step.reason(f"Admitted: the pending members form no further unit of {text}")
                return
            message = f"{NOT_ENOUGH_MEMBERS} waiting for {needed} whole unit(s) of {text}"
            for spec in specs:
                step.short_of_members(spec, message)
            step.reason(message)
            return
        outer, problem = self._outer_level(role_groups, levels)
        if problem is not None:
            for spec in specs:
                self._invalid(step, spec, problem)
            return
        restrict: Restrict = ()
        if outer is not None:
            bound = [p for g in role_groups for p in g.members.bound]
            restrict = anchor(view, levels, outer, bound)
        demands = [
            ratios.Demand(r, max_requests(g.members.pending), g.members.pending)
            for g, r in zip(role_groups, roles, strict=True)
        ]
        slots = ratios.place_units(view, levels, unit_level, outer, restrict, demands, units)
        if isinstance(slots, str):
            if admitted:
                step.reason(f"ExtraUnitsUnschedulable: {slots}")
                since = min(s.admitted_at or step.now for s in specs if s.admitted)
                step.wake(retry_at(since, step.now, self.retry_first_ms, self.retry_max_ms))
                return
            start = len(step.reasons)
            for spec in specs:
                self._unschedulable(step, spec, slots, step.now)
            del step.reasons[start + 1 :]  # one reason for the decision, not one per role
            return
        by_group: dict[str, Slots] = {}
        for pod, node in slots:
            by_group.setdefault(pod.pod_group, []).append((pod, node))
        step_start = len(step.reasons)
        for group in role_groups:
            mine = by_group.get(group.spec.name, [])
            if group.spec.admitted:
                step.bind(group.spec.cluster, mine)
                view.assume(mine)
            else:
                self._admit(step, view, group.spec, mine, group.members.bound)
        del step.reasons[step_start:]
        step.reason(f"Admitted: {units} unit(s) of {text}, each within one {unit_level}")

    def _outer_level(
        self, role_groups: Sequence[_Group], levels: tuple[str, ...]
    ) -> tuple[str | None, str | None]:
        """The widest level a role group requires of all its pods (one domain for all units)."""
        keys = {g.spec.topology_key for g in role_groups if g.spec.topology_key is not None}
        unknown = sorted(k for k in keys if k not in levels)
        if unknown:
            return None, f"role group topology {unknown[0]!r} is not a topology level"
        if not keys:
            return None, None
        return min(keys, key=levels.index), None


def _composite(workload: Workload) -> bool:
    """Whether the Workload's groups hang under CompositePodGroups (KEP-6012)."""
    return bool(workload.spec.get("compositePodGroupTemplates"))


def configured(settings: Settings) -> GangReconciler:
    gang = settings.reconcilers.gang
    return GangReconciler(
        scheduler_name=gang.scheduler_name,
        ready_timeout_ms=int(gang.ready_timeout_seconds * 1000) or None,
        backoff_base_ms=int(gang.backoff_base_seconds * 1000),
        backoff_max_ms=int(gang.backoff_max_seconds * 1000),
        max_evictions=gang.max_evictions,
        retry_max_ms=int(gang.retry_max_seconds * 1000),
        ratio_level=gang.ratio_level,
    )
