"""The one in-memory cluster of the controller tests: no event loop, no I/O, simulated time.

`World` is the cluster's side of what the reconcilers decide. Its `State` changes only through
`events.fold.fold`, as in the daemon, and `apply` is the one place an intent is carried out the
way the API server would: pod creates and Job status writes validated by the simulated server
(a write it would refuse raises `Refused`, a stale precondition `Conflict`), deletes held by
finalizers and cascaded by the garbage collector (background or foreground), binds. The
default scheduler, the kubelet and upstream's in-place restart agent act on a timer heap;
tests play the kubelet and users by hand too (`set_phase`, `user_delete`, …).

Three drivers decide over it the way the tests need:
- `JobWorld`: one Job key decided and carried out until quiet (the tests run the pods);
- `GangWorld`: one gang key within a scheduling cycle: decide, log, carry out;
- `JobSetWorld`: JobSet and Job reconcilers on every dirty key, timers run to quiescence.
"""

from __future__ import annotations

import copy
import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

import msgspec

from daemon.controllers.base import Decision, Reconciler
from daemon.controllers.gang.reconciler import GangReconciler
from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.jobset.reconciler import JobSetReconciler
from daemon.controllers.jobset.spec import IN_PLACE_RESTART, IN_PLACE_RESTART_ATTEMPT, JOBSET_NAME
from daemon.controllers.runner import Pass, decide_all, released
from daemon.sim import defaults, validation
from daemon.sim.patch import merge_patch, strategic_merge_patch
from events.fold import fold
from events.intents import Bind, Create, Delete, Intent, Patch
from events.objects import KINDS, Job, JobSet, KObject, OwnerRef, Pod, PodGroup, decode_object_dict
from events.schema import Change, Decided, Observed, Outcome, Tick
from events.state import State
from tests.daemon.controllers.builders import CLUSTER, NS, REC, SECOND, T0, key
from tests.daemon.controllers.gang_builders import RACK
from tests.daemon.controllers.gang_builders import REC as GANG_REC

FOREGROUND: Final = "foregroundDeletion"
T = TypeVar("T", bound=KObject)


class Refused(AssertionError):
    """A write the API server would reject."""


class Conflict(Refused):
    """409: the write's precondition (resourceVersion, uid) no longer holds."""


@dataclass
class Calls:
    """What kbatchd asked of the API, by operation and kind, and the pod churn it caused."""

    by: Counter[str] = field(default_factory=Counter)
    pods_created: int = 0
    pods_deleted: int = 0

    @property
    def total(self) -> int:
        return sum(self.by.values())


def bump(obj: T, **changes: Any) -> T:
    """`obj` changed as the API server stores it: with the next resourceVersion."""
    return msgspec.structs.replace(obj, rv=str(int(obj.rv or "0") + 1), **changes)


def ref(obj: KObject) -> str:
    return f"{CLUSTER}/{obj.namespace}/{obj.name}"


def conditions(status: dict[str, Any]) -> dict[str, str]:
    return {c["type"]: c["status"] for c in status.get("conditions") or ()}


def pod_status_changes(pod: Pod, status: dict[str, Any]) -> dict[str, Any]:
    """What a pod status patch changes of the slim pod: its conditions (merged by type) and
    its nomination."""
    changes: dict[str, Any] = {}
    if "conditions" in status:
        changes["conditions"] = {**pod.conditions, **conditions(status)}
    if "nominatedNodeName" in status:
        changes["nominated"] = status["nominatedNodeName"] or ""
    return changes


class World:
    """The cluster: API server, garbage collector, scheduler, kubelet and agents."""

    def __init__(
        self,
        *,
        state: State | None = None,
        nodes: int = 0,
        start_ms: int = SECOND,
        terminate_ms: int | None = None,
        agent_ms: int = 100,
        restart_ms: int | None = None,
    ) -> None:
        self.state = state if state is not None else State(now=T0)
        # Pods are placed round-robin on these; without any they stay unscheduled.
        self.nodes = [f"node-{i}" for i in range(nodes)]
        self.start_ms = start_ms
        # A deleted pod stops this long after; None: only when a test says (`kubelet_kill`).
        self.terminate_ms = terminate_ms
        self.agent_ms = agent_ms
        # An in-place restart reuses the sandbox, node and images: no scheduling, no pull.
        self.restart_ms = start_ms if restart_ms is None else restart_ms
        self.calls = Calls()
        self.dirty: set[str] = set()
        self.created: list[str] = []
        self._names: set[str] = set()
        self.status_writes: list[dict[str, Any]] = []
        # pod uid -> the attempt its agent wrote (None: not yet since the last (re)start).
        self.agent_attempts: dict[str, int | None] = {}
        self._uids = itertools.count(1)
        self._order = itertools.count()
        self._timers: list[tuple[int, int, Callable[[], None]]] = []

    # -- time -----------------------------------------------------------------------------

    @property
    def now(self) -> int:
        return self.state.now

    @now.setter
    def now(self, at: int) -> None:
        fold(self.state, self.state.seq + 1, Tick(at=at))

    def advance(self, ms: int) -> None:
        self.now += ms

    def after(self, ms: int, action: Callable[[], None]) -> None:
        heapq.heappush(self._timers, (self.now + ms, next(self._order), action))

    def fire_next(self) -> None:
        """Everything due at the next timer's time happens before anyone decides: the daemon
        folds a batch of watch events, then decides once per dirty key."""
        due = self._timers[0][0]
        self.now = due
        while self._timers and self._timers[0][0] == due:
            heapq.heappop(self._timers)[2]()

    def fire(self, until: int) -> None:
        while self._timers and self._timers[0][0] <= until:
            self.fire_next()

    # -- the watch ------------------------------------------------------------------------

    def observe(self, obj: KObject, change: Change = "MODIFIED") -> set[str]:
        """Fold one watch event; returns the keys it dirtied (also kept in `dirty`)."""
        dirty: set[str] = set()
        event = Observed(at=self.now, cluster=CLUSTER, change=change, obj=obj)  # type: ignore[arg-type]
        fold(self.state, self.state.seq + 1, event, dirty)
        self.dirty |= dirty
        return dirty

    def add(self, *objects: KObject) -> None:
        for obj in objects:
            self.observe(obj, "ADDED")

    def remove(self, obj: KObject) -> set[str]:
        return self.observe(obj, "DELETED")

    # -- the API server -------------------------------------------------------------------

    def carry_out(self, decision: Decision, seq: int | None = None) -> None:
        """Every intent of the decision; with the `seq` it was logged at, each outcome too."""
        for index, intent in enumerate(decision.intents):
            self.apply(intent)
            if seq is not None:
                outcome = Outcome(at=self.now, decision=seq, index=index, ok=True)
                fold(self.state, self.state.seq + 1, outcome)

    def apply(self, intent: Intent) -> None:
        sub = f"/{intent.subresource}" if isinstance(intent, Patch) and intent.subresource else ""
        self.calls.by[f"{type(intent).__name__.lower()} {intent.kind}{sub}"] += 1
        if isinstance(intent, Create):
            self._create(intent)
            return
        obj = self.state.table(intent.kind).get(f"{CLUSTER}/{intent.namespace}/{intent.name}")
        if obj is None:
            return  # 404: gone already
        if isinstance(intent, Delete):
            if intent.precondition_uid not in ("", obj.uid):
                raise Conflict(f"409: {intent.name} is not the object the delete names")
            self.delete(obj, foreground=intent.propagation == "Foreground")
        elif isinstance(intent, Patch):
            self._patch(obj, intent)
        else:
            self._bind(obj, intent)

    def _uid(self, name: str) -> str:
        return f"uid-{name}-{next(self._uids)}"

    def _create(self, intent: Create) -> None:
        body = copy.deepcopy(intent.body)
        meta = body.setdefault("metadata", {})
        meta.update(name=intent.name, namespace=intent.namespace, resourceVersion="1")
        if intent.kind == "Pod" and (
            errors := validation.metadata(body) + validation.pod_create(body)
        ):
            raise Refused(f"pod create refused: {errors}")
        if f"{CLUSTER}/{intent.namespace}/{intent.name}" in self.state.table(intent.kind):
            return  # AlreadyExists: the deterministic name made the create idempotent
        meta["uid"] = self._uid(intent.name)
        obj = msgspec.structs.replace(self._stored(intent.kind, body), created=self.now)
        if isinstance(obj, Pod):
            obj = self._admit_pod(obj)
        self.observe(obj, "ADDED")

    def _stored(self, kind: str, body: dict[str, Any]) -> KObject:
        """The object as the server stores it: a Job defaulted, every annotation kept."""
        if kind == "Job":
            defaults.job(body)
            defaults.job_selector(body)
            return decode_object_dict(kind, body)
        if kind == "Pod":
            # Decoded as the daemon decodes it (its group, requests, ...), every annotation
            # kept.
            pod = decode_object_dict(kind, body)
            meta = body["metadata"]
            return msgspec.structs.replace(
                pod,
                labels=dict(meta.get("labels") or {}),
                annotations=dict(meta.get("annotations") or {}),
            )
        meta = body["metadata"]
        owners = tuple(
            OwnerRef(o["kind"], o["name"], o["uid"], bool(o.get("controller")))
            for o in meta.get("ownerReferences") or ()
        )
        spec: dict[str, Any] = {} if kind == "Pod" else {"spec": dict(body.get("spec") or {})}
        return KINDS[kind](
            name=meta["name"],
            namespace=meta["namespace"],
            uid=meta["uid"],
            rv="1",
            labels=dict(meta.get("labels") or {}),
            annotations=dict(meta.get("annotations") or {}),
            owners=owners,
            finalizers=tuple(meta.get("finalizers") or ()),
            **spec,
        )

    def _admit_pod(self, pod: Pod) -> Pod:
        """The new pod, placed by the scheduler when there are nodes and started later."""
        assert pod.name not in self._names, f"pod name reused: {pod.name}"
        self._names.add(pod.name)
        self.created.append(pod.name)
        self.calls.pods_created += 1
        if not self.nodes:
            return pod
        node = self.nodes[(len(self.created) - 1) % len(self.nodes)]
        pod = msgspec.structs.replace(pod, node_name=node)
        self._later(self.start_ms, pod, self._start)
        return pod

    def _patch(self, obj: KObject, intent: Patch) -> None:
        assert isinstance(intent.patch, dict)
        meta = intent.patch.get("metadata") or {}
        if intent.precondition_rv not in ("", obj.rv) or meta.get("uid") not in (None, obj.uid):
            raise Conflict(f"409 on {intent.kind} {intent.name}: {intent}")
        if isinstance(obj, Pod) and intent.subresource == "status":
            self._store(bump(obj, **pod_status_changes(obj, intent.patch.get("status") or {})))
            return
        merge = strategic_merge_patch if intent.patch_type == "strategic" else merge_patch
        changes: dict[str, Any] = {}
        for part, patch in intent.patch.items():
            if part == "metadata":
                merged = merge(
                    {"annotations": obj.annotations, "finalizers": [*obj.finalizers]}, patch
                )
                changes.update(
                    annotations=merged["annotations"], finalizers=(*merged["finalizers"],)
                )
            else:
                changes[part] = merge(getattr(obj, part), patch)
        updated = bump(obj, **changes)
        if isinstance(obj, Job) and intent.subresource == "status":
            self._validate_status(obj, changes["status"])
            self.status_writes.append(intent.patch["status"])
        self._store(updated)
        if isinstance(updated, JobSet) and intent.subresource == "status":
            self.after(self.agent_ms, lambda: self.jobset_changed(updated.name, updated.namespace))

    def _validate_status(self, job: Job, status: dict[str, Any]) -> None:
        errors = validation.job_status_update(
            {"spec": job.spec, "status": job.status}, {"spec": job.spec, "status": status}
        )
        if errors:
            raise Refused(f"status write refused: {errors}\nstatus: {status}")

    def _bind(self, pod: KObject, intent: Bind) -> None:
        assert isinstance(pod, Pod)
        if intent.uid not in ("", pod.uid) or pod.node_name:
            raise Conflict(f"409: {intent.name} is not the unbound pod the bind names")
        self._store(bump(pod, node_name=intent.node))

    def delete(self, obj: KObject, *, foreground: bool = False) -> None:
        """The API's delete with the garbage collector's cascade."""
        if obj.deletion_ts is not None:
            return
        if isinstance(obj, Pod):
            self.calls.pods_deleted += 1
            self._store(bump(obj, deletion_ts=self.now))
            if self.terminate_ms is not None and not obj.terminal:
                self._later(self.terminate_ms, obj, self._terminate)
            return
        dependents = self._dependents(obj)
        if foreground and dependents:
            self.observe(bump(obj, deletion_ts=self.now, finalizers=(*obj.finalizers, FOREGROUND)))
        else:
            self.observe(obj, "DELETED")
        for child in dependents:
            self.delete(child, foreground=foreground)

    def _dependents(self, obj: KObject) -> list[KObject]:
        """What the object owns: pods through the fold's controller index, Jobs and claims by a
        scan (a JobSet has few)."""
        kind = type(obj).__name__
        found: list[KObject] = [*self.state.pods_of(f"{kind}/{ref(obj)}")]
        if kind == "JobSet":
            for table in ("Job", "PersistentVolumeClaim", "Service"):
                found += self.state.table(table).values()
        return [child for child in found if any(o.uid == obj.uid for o in child.owners)]

    def _collect_owner(self, obj: KObject) -> None:
        """An owner waiting in foreground deletion goes once its last dependent is gone."""
        owner = obj.controller
        if owner is None:
            return
        found = self.state.table(owner.kind).get(f"{CLUSTER}/{obj.namespace}/{owner.name}")
        if found is None or found.uid != owner.uid or FOREGROUND not in found.finalizers:
            return
        if not self._dependents(found):
            self.observe(found, "DELETED")
            self._collect_owner(found)

    def _store(self, obj: KObject) -> None:
        """Store a write; a deleted pod goes once no finalizer holds it and it has stopped (or
        never ran), and its Ready condition's transition time moves with it."""
        if not isinstance(obj, Pod):
            self.observe(obj)
            return
        before = self.state.pods.get(ref(obj))
        ready = obj.conditions.get("Ready")
        if ready is not None and (before is None or before.conditions.get("Ready") != ready):
            obj = msgspec.structs.replace(obj, ready_changed=self.now)
        if (
            obj.deletion_ts is not None
            and not obj.finalizers
            and (obj.terminal or not obj.node_name)
        ):
            self.observe(obj, "DELETED")
            self.agent_attempts.pop(obj.uid, None)
            self._collect_owner(obj)
        else:
            self.observe(obj)

    # -- users ----------------------------------------------------------------------------

    def create_jobset(self, body: dict[str, Any]) -> JobSet:
        """A user creates a JobSet (already defaulted by the webhook)."""
        obj = copy.deepcopy(body)
        obj["metadata"].setdefault("uid", self._uid(obj["metadata"]["name"]))
        obj["metadata"]["resourceVersion"] = "1"
        js = decode_object_dict("JobSet", obj)
        assert isinstance(js, JobSet)
        self.observe(js, "ADDED")
        return js

    def update(self, obj: Job | JobSet, **spec: Any) -> None:
        """A user edits the spec."""
        self.observe(bump(obj, spec={**obj.spec, **spec}))

    def user_delete(self, *names: str) -> None:
        for name in names:
            self.delete(self.pod(name))

    def hold(self, *names: str, finalizer: str = "example.com/hold") -> None:
        """Another controller's finalizer keeps the pods around once deleted."""
        for pod in [self.pod(n) for n in names] or self.live_pods():
            self._store(bump(pod, finalizers=(*pod.finalizers, finalizer)))

    def remove_finalizer(self, name: str, finalizer: str) -> None:
        pod = self.pod(name)
        self._store(bump(pod, finalizers=tuple(f for f in pod.finalizers if f != finalizer)))

    def set_node_ready(self, name: str, ready: bool) -> None:
        self.observe(bump(self.state.nodes[f"{CLUSTER}//{name}"], ready=ready))

    # -- the kubelet ----------------------------------------------------------------------

    def _later(self, ms: int, pod: Pod, action: Callable[[Pod], None]) -> None:
        """`action` on the pod after `ms`, if it is still there (the same pod, not a successor
        of the same name)."""
        key, uid = ref(pod), pod.uid

        def fire() -> None:
            live = self.state.pods.get(key)
            if live is not None and live.uid == uid:
                action(live)

        self.after(ms, fire)

    def set_pod(self, name: str, **changes: Any) -> None:
        self._store(bump(self.pod(name), **changes))

    def set_phase(
        self,
        name: str,
        phase: str,
        *,
        ready: bool = False,
        exit_codes: dict[str, int] | None = None,
        conditions: dict[str, str] | None = None,
        node: str = "n1",
    ) -> None:
        pod = self.pod(name)
        conds = {**pod.conditions, **(conditions or {})}
        conds["Ready"] = "True" if ready and phase == "Running" else "False"
        codes = exit_codes if exit_codes is not None else pod.exit_codes
        if phase == "Succeeded" and exit_codes is None:
            codes = {"main": 0}
        self._store(
            bump(
                pod,
                phase=phase,
                conditions=conds,
                exit_codes=dict(codes),
                node_name=pod.node_name or node,
                finished=self.now if phase in ("Succeeded", "Failed") else None,
            )
        )

    def finish_pod(self, name: str, *, exit_code: int = 0) -> None:
        """The pod's containers exit and the pod ends (restartPolicy Never)."""
        phase = "Succeeded" if exit_code == 0 else "Failed"
        self.set_phase(name, phase, exit_codes={"main": exit_code})

    def run_all(self, ready: bool = True) -> None:
        """The scheduler and kubelet start every pending pod."""
        for pod in self.pods():
            if pod.phase == "Pending" and pod.deletion_ts is None:
                self.set_phase(pod.name, "Running", ready=ready)

    def kubelet_kill(self, *names: str, phase: str = "Failed") -> None:
        """Terminating pods stop (all of them when no names are given)."""
        for pod in self.pods():
            if (
                pod.deletion_ts is not None
                and not pod.terminal
                and (not names or pod.name in names)
            ):
                self.set_phase(pod.name, phase, exit_codes={"main": 137})

    def _start(self, pod: Pod) -> None:
        if pod.deletion_ts is None and pod.phase == "Pending":
            self.set_phase(pod.name, "Running", ready=True)
            self._agent_started(pod)

    def _terminate(self, pod: Pod) -> None:
        if not pod.terminal:
            self.set_phase(pod.name, "Failed", exit_codes={"main": 137})

    def restart_in_place(self, name: str) -> None:
        """A container exits and the pod's `RestartAllContainers` rule restarts it in place:
        same uid and node, every container's restartCount up, not ready until it runs again."""
        pod = self.pod(name)
        if pod.phase != "Running" or pod.deletion_ts is not None:
            return
        self.agent_attempts[pod.uid] = None
        self._store(
            bump(
                pod,
                conditions={"Ready": "False", "AllContainersRestarting": "True"},
                restart_count=pod.restart_count + 1,
                max_container_restarts=pod.max_container_restarts + 1,
            )
        )
        self._later(self.restart_ms, pod, self._restarted)

    def _restarted(self, pod: Pod) -> None:
        if pod.deletion_ts is None:
            self._store(bump(pod, conditions={"Ready": "True", "AllContainersRestarting": "False"}))
            self._agent_started(pod)

    # -- upstream's in-place restart agent, one per pod of an InPlaceRestart JobSet ---------

    def _jobset_of(self, pod: Pod) -> JobSet | None:
        js = self.state.jobsets.get(f"{CLUSTER}/{pod.namespace}/{pod.labels.get(JOBSET_NAME)}")
        strategy = (js.spec.get("failurePolicy") or {}).get("restartStrategy") if js else None
        return js if strategy == IN_PLACE_RESTART else None

    def _agent_started(self, pod: Pod) -> None:
        if self._jobset_of(pod) is not None:
            self.agent_attempts[pod.uid] = None
            self._later(self.agent_ms, pod, self._agent_write)

    def _agent_write(self, pod: Pod) -> None:
        """On start: attempt = current + 1, or 0 on a fresh JobSet."""
        js = self._jobset_of(pod)
        if js is None or pod.phase != "Running":
            return
        current = js.status.get("currentInPlaceRestartAttempt")
        attempt = 0 if current is None else int(current) + 1
        self.agent_attempts[pod.uid] = attempt
        self._store(
            bump(pod, annotations={**pod.annotations, IN_PLACE_RESTART_ATTEMPT: str(attempt)})
        )
        # Its own pod only: the other agents acted when the JobSet's status last changed.
        self._agent_check(js, pod)

    def jobset_changed(self, name: str = "js", namespace: str = NS) -> None:
        """Every agent of the JobSet sees its status (agents watch their JobSet)."""
        js = self.state.jobsets.get(f"{CLUSTER}/{namespace}/{name}")
        if js is None or js.status.get("previousInPlaceRestartAttempt") is None:
            return
        for pod in list(self.state.pods.values()):
            if pod.labels.get(JOBSET_NAME) == js.name and pod.namespace == js.namespace:
                self._agent_check(js, pod)

    def _agent_check(self, js: JobSet, pod: Pod) -> None:
        """One pod's agent: a pod whose attempt the JobSet has moved past restarts in place."""
        previous = js.status.get("previousInPlaceRestartAttempt")
        attempt = self.agent_attempts.get(pod.uid)
        if previous is not None and attempt is not None and attempt <= previous:
            self.restart_in_place(pod.name)

    # -- views ----------------------------------------------------------------------------

    def pods(self) -> list[Pod]:
        return sorted(self.state.pods.values(), key=lambda p: p.name)

    def live_pods(self) -> list[Pod]:
        return [p for p in self.pods() if not p.terminal and p.deletion_ts is None]

    def pod(self, name: str) -> Pod:
        """A pod by name: kbatchd's in `ns`, a default-scheduler `blocker` in `other`."""
        pods = self.state.pods
        return pods.get(f"{CLUSTER}/{NS}/{name}") or pods[f"{CLUSTER}/other/{name}"]


class JobWorld(World):
    """One Job key decided and carried out step by step until quiet; the tests run its pods."""

    def __init__(self, state: State, job_name: str = "job", rec: JobReconciler = REC) -> None:
        super().__init__(state=state)
        self.rec = rec
        self.key = key(job_name)
        self.decisions: list[Decision] = []

    @property
    def job(self) -> Job:
        return self.state.jobs[self.key.split("/", 1)[1]]

    @property
    def status(self) -> dict[str, Any]:
        return self.job.status

    def conditions(self) -> dict[str, str]:
        return conditions(self.status)

    def condition(self, type_: str) -> dict[str, Any]:
        for c in self.status.get("conditions") or ():
            if c["type"] == type_:
                return dict(c)
        raise KeyError(type_)

    def update_job(self, **spec: Any) -> None:
        self.update(self.job, **spec)

    def step(self) -> Decision | None:
        decision = self.rec.decide(self.state, self.key, self.now)
        if decision is not None:
            self.decisions.append(decision)
            self.carry_out(decision)
        return decision

    def settle(self, limit: int = 30) -> Decision | None:
        """Decide and carry out until a decision has no intents; returns that last decision
        (None when the reconciler had nothing to say)."""
        for _ in range(limit):
            decision = self.step()
            if decision is None or not decision.intents:
                return decision
        raise AssertionError(f"no quiescence after {limit} decisions: {self.decisions[-3:]}")

    def advance_to_requeue(self) -> None:
        last = self.decisions[-1] if self.decisions else None
        assert last is not None, "no decision yet"
        assert last.requeue_at is not None, "no requeue was asked for"
        self.now = max(self.now, last.requeue_at)


class GangWorld(World):
    """The gang reconciler on one key at a time, within the runner's scheduling cycle; the
    kubelet stops a deleted member at once."""

    def __init__(self, objects: Iterable[KObject] = (), rec: GangReconciler = GANG_REC) -> None:
        self.rec = rec
        # What the runtime keeps between scheduling cycles, and the cycle of the state as it
        # stands: decisions from one state share it, as the runner's pass does.
        self.memos: dict[str, Any] = {}
        self._cycle: tuple[tuple[int, int], Pass] | None = None
        super().__init__(terminate_ms=0)
        self.add(*objects)

    def observe(self, obj: KObject, change: Change = "MODIFIED") -> set[str]:
        """What the runner would decide: a cluster's gang queue stands for the waiting groups
        it releases."""
        dirty = super().observe(obj, change)
        return set(released(self.state, [self.rec], dirty, self.cycle()).keys)

    def cycle(self) -> Pass:
        """The runner's pass over the state as it stands (a new one once it changed)."""
        at = (self.state.seq, self.state.now)
        if self._cycle is None or self._cycle[0] != at:
            self._cycle = (at, Pass(self.state, self.memos))
        return self._cycle[1]

    def decide(self, key: str) -> Decision | None:
        decision, error = self.cycle().attempt(self.rec, key)
        assert error is None, error
        return decision

    def log(self, key: str, decision: Decision) -> int:
        """Fold the decision as the daemon logs it (in flight until outcomes and the watch
        show its effects); returns its seq."""
        seq = self.state.seq + 1
        event = Decided(
            at=self.now,
            reconciler=self.rec.name,
            key=key,
            reason=decision.reason,
            intents=decision.intents,
        )
        fold(self.state, seq, event)
        return seq

    def run(self, key: str) -> Decision | None:
        """Decide and carry the intents out; the result is what was decided."""
        decision = self.decide(key)
        if decision is not None:
            self.carry_out(decision)
        return decision

    def carry_out(self, decision: Decision, seq: int | None = None) -> None:
        super().carry_out(decision, seq)
        self.fire(self.now)

    def group(self, name: str) -> PodGroup:
        return self.state.podgroups[f"{CLUSTER}/{NS}/{name}"]

    def condition(self, group: str, type_: str = "PodGroupScheduled") -> dict[str, Any]:
        for item in self.group(group).status.get("conditions") or ():
            if item["type"] == type_:
                return dict(item)
        return {}

    def placed(self, group: str) -> dict[str, str]:
        """Member pod name -> node, for the bound members of `group`."""
        pods = self.state.pods.values()
        return {p.name: p.node_name for p in pods if p.pod_group == group and p.node_name}

    def rack_of(self, node: str) -> str:
        return self.state.nodes[f"{CLUSTER}//{node}"].labels[RACK]


class JobSetWorld(World):
    """JobSet and Job reconcilers over every dirty key, as the runtime's `decide_all`, with
    the scheduler, kubelet and agents on simulated time. Each intent counts as one API call;
    what the kubelet and agents write is not kbatchd's and is not counted."""

    def __init__(
        self,
        *,
        nodes: int = 16,
        start_ms: int = SECOND,
        terminate_ms: int = 0,
        agent_ms: int = 100,
        restart_ms: int | None = None,
        reconcilers: list[Reconciler] | None = None,
    ) -> None:
        super().__init__(
            nodes=nodes,
            start_ms=start_ms,
            terminate_ms=terminate_ms,
            agent_ms=agent_ms,
            restart_ms=restart_ms,
        )
        self.reconcilers = reconcilers or [
            JobSetReconciler(),
            JobReconciler(backoff_base_ms=SECOND),
        ]
        self.decisions: list[tuple[str, Decision]] = []

    def apply(self, intent: Intent) -> None:
        try:
            super().apply(intent)
        except Conflict:
            self.calls.by["conflict"] += 1  # decided from a stale read; its key is decided again

    def jobset(self, name: str = "js") -> JobSet:
        return self.state.jobsets[f"{CLUSTER}/{NS}/{name}"]

    def jobs(self) -> dict[str, Job]:
        return {j.name: j for j in self.state.jobs.values()}

    def in_place_synced(self, name: str = "js") -> bool:
        """Every pod's agent wrote the JobSet's current attempt: the barrier is down."""
        current = self.jobset(name).status.get("currentInPlaceRestartAttempt")
        pods = [p for p in self.live_pods() if p.labels.get(JOBSET_NAME) == name]
        return current is not None and all(
            self.agent_attempts.get(p.uid) == current and p.ready for p in pods
        )

    def conditions(self, name: str = "js") -> dict[str, str]:
        return conditions(self.jobset(name).status)

    def decide(self) -> int:
        """Decide every dirty key once and carry the intents out; returns how many decisions."""
        keys, self.dirty = self.dirty, set()
        verdicts = decide_all(self.state, self.reconcilers, keys)
        for verdict in verdicts:
            decision = verdict.decision
            self.decisions.append((verdict.key, decision))
            self.carry_out(decision)
            if decision.requeue_at is not None:
                self.after(
                    max(decision.requeue_at - self.now, 0),
                    lambda key=verdict.key: self.dirty.add(key),  # type: ignore[misc]
                )
        return len(verdicts)

    def settle(self) -> None:
        """Decide until nothing is dirty (timers are not run)."""
        for _ in range(10_000):
            if not self.dirty:
                return
            self.decide()
        raise AssertionError("no quiescence")

    def run(self, until: Callable[[], bool] | None = None, *, limit_ms: int = 3_600_000) -> int:
        """Settle, then run timers in time order (settling after each) until `until` holds or
        nothing is left to do; returns the simulated time it took (ms)."""
        start, horizon = self.now, self.now + limit_ms
        while True:
            self.settle()
            if until is not None and until():
                return self.now - start
            if not self._timers or self._timers[0][0] > horizon:
                if until is not None:
                    raise AssertionError(f"not reached within {limit_ms} ms of simulated time")
                return self.now - start
            self.fire_next()
