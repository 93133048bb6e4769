"""A small in-memory cluster for JobSet tests and benchmarks: both reconcilers (JobSet and Job)
over one `State`, the API's effects of their intents, the garbage collector (foreground and
background), a kubelet, and upstream's in-place restart agent in every pod of an InPlaceRestart
JobSet. No event loop, no I/O: time is simulated and only moves to the next timer.

Every object change goes through the fold, which reports the dirty keys the next round decides,
exactly as in the daemon (the runtime's `decide_all`). Intents are applied when decided, each
counted as one API call; what the agents and the kubelet write is not kbatchd's and is not
counted.
"""

from __future__ import annotations

import copy
import heapq
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final

import msgspec

from daemon.controllers.base import Decision, Reconciler
from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.jobset.reconciler import JobSetReconciler
from daemon.controllers.jobset.spec import (
    IN_PLACE_RESTART,
    IN_PLACE_RESTART_ATTEMPT,
    JOBSET_NAME,
)
from daemon.controllers.runner import decide_all
from daemon.sim import defaults, validation
from daemon.sim import patch as sim_patch
from events.fold import fold
from events.intents import Bind, Create, Delete, Intent, Patch
from events.objects import (
    Job,
    JobSet,
    KObject,
    OwnerRef,
    PersistentVolumeClaim,
    Pod,
    Service,
    decode_object_dict,
)
from events.schema import Change, Observed
from events.state import State

CLUSTER: Final = "c1"
SECOND: Final = 1000
FOREGROUND: Final = "foregroundDeletion"
T0: Final = 1_767_225_600_000


class Refused(AssertionError):
    """A write the API server would reject."""


@dataclass
class Calls:
    """What kbatchd asked of the API, by operation and kind, and the pod churn it caused."""

    by: Counter[str] = field(default_factory=Counter)
    pods_created: int = 0
    pods_deleted: int = 0

    @property
    def total(self) -> int:
        return sum(self.by.values())


def _owners(meta: dict[str, Any]) -> tuple[OwnerRef, ...]:
    return tuple(
        OwnerRef(o["kind"], o["name"], o["uid"], bool(o.get("controller")))
        for o in meta.get("ownerReferences") or ()
    )


class World:
    def __init__(
        self,
        *,
        nodes: int = 16,
        start_ms: int = 1 * SECOND,
        terminate_ms: int = 0,
        agent_ms: int = 100,
        restart_ms: int | None = None,
        reconcilers: list[Reconciler] | None = None,
    ) -> None:
        self.state = State()
        self.state.now = T0
        self.now = T0
        self.reconcilers: list[Reconciler] = reconcilers or [
            JobSetReconciler(),
            JobReconciler(backoff_base_ms=SECOND),
        ]
        self.nodes = [f"node-{i}" for i in range(nodes)]
        self.start_ms = start_ms
        self.terminate_ms = terminate_ms
        self.agent_ms = agent_ms
        # An in-place restart reuses the sandbox, node and images: no scheduling, no pull.
        self.restart_ms = start_ms if restart_ms is None else restart_ms
        self.calls = Calls()
        self.decisions: list[tuple[str, Decision]] = []
        self.dirty: set[str] = set()
        self._seq = 0
        self._uid = 0
        self._placed = 0
        self._timers: list[tuple[int, int, Callable[[], None]]] = []
        self._order = 0
        # pod uid -> the attempt its agent wrote (None: not yet since the last (re)start).
        self.agent_attempts: dict[str, int | None] = {}
        self.pod_names_seen: set[str] = set()

    # -- views ----------------------------------------------------------------------------

    def jobset(self, name: str = "js", namespace: str = "ns") -> JobSet:
        return self.state.jobsets[f"{CLUSTER}/{namespace}/{name}"]

    def jobs(self) -> dict[str, Job]:
        return {j.name: j for j in self.state.jobs.values()}

    def pods(self) -> list[Pod]:
        return sorted(self.state.pods.values(), key=lambda p: p.name)

    def live_pods(self) -> list[Pod]:
        return [p for p in self.pods() if p.deletion_ts is None and not p.terminal]

    def pod(self, name: str, namespace: str = "ns") -> Pod:
        return self.state.pods[f"{CLUSTER}/{namespace}/{name}"]

    def conditions(self, name: str = "js") -> dict[str, str]:
        return {c["type"]: c["status"] for c in self.jobset(name).status.get("conditions") or ()}

    # -- the loop ---------------------------------------------------------------------------

    def _uid_next(self, prefix: str) -> str:
        self._uid += 1
        return f"{prefix}-{self._uid:06d}"

    def at(self, due: int, action: Callable[[], None]) -> None:
        self._order += 1
        heapq.heappush(self._timers, (due, self._order, action))

    def after(self, ms: int, action: Callable[[], None]) -> None:
        self.at(self.now + ms, action)

    def decide(self) -> int:
        """Decide every dirty key once and apply the intents; returns how many decisions."""
        keys, self.dirty = self.dirty, set()
        self.state.now = self.now
        verdicts = decide_all(self.state, self.reconcilers, keys)
        for verdict in verdicts:
            decision = verdict.decision
            self.decisions.append((verdict.key, decision))
            for intent in decision.intents:
                self.apply(intent)
            if decision.requeue_at is not None:
                key = verdict.key
                self.at(max(decision.requeue_at, self.now), lambda key=key: self.dirty.add(key))  # type: ignore[misc]
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
            # Everything due at the same time happens before anyone decides: the daemon
            # folds a batch of watch events, then decides once per dirty key.
            due = self._timers[0][0]
            self.now = max(self.now, due)
            self.state.now = self.now
            while self._timers and self._timers[0][0] == due:
                heapq.heappop(self._timers)[2]()

    # -- the API ------------------------------------------------------------------------------

    def observe(self, obj: KObject, change: Change = "MODIFIED") -> None:
        self._seq += 1
        event = Observed(at=self.now, cluster=CLUSTER, change=change, obj=obj)  # type: ignore[arg-type]
        fold(self.state, self._seq, event, self.dirty)

    def _bump(self, obj: Any, **changes: Any) -> Any:
        return msgspec.structs.replace(obj, rv=str(int(obj.rv or "0") + 1), **changes)

    def create_jobset(self, body: dict[str, Any]) -> JobSet:
        """A user creates a JobSet (already defaulted by the webhook)."""
        obj = copy.deepcopy(body)
        obj["metadata"].setdefault("uid", self._uid_next("js"))
        obj["metadata"]["resourceVersion"] = "1"
        js = decode_object_dict("JobSet", obj)
        assert isinstance(js, JobSet)
        self.observe(js, "ADDED")
        return js

    def update_jobset(self, name: str = "js", **spec: Any) -> None:
        js = self.jobset(name)
        self.observe(self._bump(js, spec={**js.spec, **spec}))

    def apply(self, intent: Intent) -> None:
        op = type(intent).__name__.lower()
        sub = intent.subresource if isinstance(intent, Patch) else ""
        self.calls.by[f"{op} {intent.kind}{'/' + sub if sub else ''}"] += 1
        if isinstance(intent, Create):
            self._create(intent)
        elif isinstance(intent, Delete):
            self._delete(intent)
        elif isinstance(intent, Patch):
            self._patch(intent)
        elif isinstance(intent, Bind):  # pragma: no cover - no scheduler reconciler here
            raise AssertionError("unexpected bind")

    def _create(self, intent: Create) -> None:
        key = f"{CLUSTER}/{intent.namespace}/{intent.name}"
        body = copy.deepcopy(intent.body)
        meta = body.setdefault("metadata", {})
        meta.update(name=intent.name, namespace=intent.namespace, resourceVersion="1")
        if intent.kind == "Job":
            if key in self.state.jobs:
                return  # AlreadyExists
            meta["uid"] = self._uid_next("job")
            defaults.job(body)
            defaults.job_selector(body)
            job = decode_object_dict("Job", body)
            self.observe(msgspec.structs.replace(job, created=self.now), "ADDED")
        elif intent.kind == "Pod":
            if key in self.state.pods:
                return
            errors = validation.metadata(body) + validation.pod_create(body)
            if errors:
                raise Refused(f"pod create refused: {errors}")
            assert intent.name not in self.pod_names_seen, f"pod name reused: {intent.name}"
            self.pod_names_seen.add(intent.name)
            self.calls.pods_created += 1
            node = self.nodes[self._placed % len(self.nodes)]
            self._placed += 1
            pod = Pod(
                name=intent.name,
                namespace=intent.namespace,
                uid=self._uid_next("pod"),
                rv="1",
                created=self.now,
                labels=dict(meta.get("labels") or {}),
                annotations=dict(meta.get("annotations") or {}),
                owners=_owners(meta),
                finalizers=tuple(meta.get("finalizers") or ()),
                node_name=node,
                phase="Pending",
            )
            self.observe(pod, "ADDED")
            self.after(self.start_ms, lambda: self._start(key, pod.uid))
        elif intent.kind == "PersistentVolumeClaim":
            if key in self.state.pvcs:
                return
            claim = PersistentVolumeClaim(
                name=intent.name,
                namespace=intent.namespace,
                uid=self._uid_next("pvc"),
                rv="1",
                labels=dict(meta.get("labels") or {}),
                annotations=dict(meta.get("annotations") or {}),
                owners=_owners(meta),
                spec=dict(body.get("spec") or {}),
            )
            self.observe(claim, "ADDED")
        elif intent.kind == "Service":
            if key in self.state.services:
                return
            service = Service(
                name=intent.name,
                namespace=intent.namespace,
                uid=self._uid_next("svc"),
                rv="1",
                owners=_owners(meta),
                spec=dict(body.get("spec") or {}),
            )
            self.observe(service, "ADDED")
        else:
            raise AssertionError(f"unexpected create {intent}")

    def _delete(self, intent: Delete) -> None:
        key = f"{CLUSTER}/{intent.namespace}/{intent.name}"
        obj = self.state.table(intent.kind).get(key)
        if obj is None or (intent.precondition_uid and obj.uid != intent.precondition_uid):
            return
        self.delete(intent.kind, obj, foreground=intent.propagation == "Foreground")

    def delete(self, kind: str, obj: KObject, *, foreground: bool = False) -> None:
        """The API's delete with the garbage collector's cascade."""
        if obj.deletion_ts is not None:
            return
        if kind == "Pod":
            assert isinstance(obj, Pod)
            self.calls.pods_deleted += 1
            pod = self._bump(obj, deletion_ts=self.now)
            self._store_pod(pod)
            if not pod.terminal:
                key = f"{CLUSTER}/{pod.namespace}/{pod.name}"
                self.after(self.terminate_ms, lambda: self._terminate(key, pod.uid))
            return
        dependents = self._dependents(obj)
        if foreground and dependents:
            self.observe(
                self._bump(obj, deletion_ts=self.now, finalizers=(*obj.finalizers, FOREGROUND))
            )
        else:
            self.observe(obj, "DELETED")
        for kind_of, child in dependents:
            self.delete(kind_of, child, foreground=foreground)

    def _dependents(self, obj: KObject) -> list[tuple[str, KObject]]:
        """What the object owns: pods through the fold's controller index, Jobs and claims by a
        scan (a JobSet has few)."""
        kind = type(obj).__name__
        found: list[tuple[str, KObject]] = [
            ("Pod", pod)
            for pod in self.state.pods_of(f"{kind}/{CLUSTER}/{obj.namespace}/{obj.name}")
            if any(o.uid == obj.uid for o in pod.owners)
        ]
        if kind == "JobSet":
            for table in ("Job", "PersistentVolumeClaim", "Service"):
                found += [
                    (table, child)
                    for child in self.state.table(table).values()
                    if any(o.uid == obj.uid for o in child.owners)
                ]
        return found

    def _collect_owner(self, owner: OwnerRef | None, namespace: str) -> None:
        """An owner waiting in foreground deletion goes once its last dependent is gone."""
        if owner is None:
            return
        obj = self.state.table(owner.kind).get(f"{CLUSTER}/{namespace}/{owner.name}")
        if obj is None or obj.uid != owner.uid or FOREGROUND not in obj.finalizers:
            return
        if not self._dependents(obj):
            self.observe(obj, "DELETED")
            self._collect_owner(obj.controller, namespace)

    def _patch(self, intent: Patch) -> None:
        key = f"{CLUSTER}/{intent.namespace}/{intent.name}"
        obj = self.state.table(intent.kind).get(key)
        if obj is None:
            return
        assert isinstance(intent.patch, dict)
        if intent.precondition_rv and intent.precondition_rv != obj.rv:
            self.calls.by["conflict"] += 1
            return  # 409: decided from a stale read; its key is decided again
        if intent.kind == "Pod":
            assert isinstance(obj, Pod)
            meta = intent.patch["metadata"]
            if meta.get("uid") not in (None, obj.uid):
                return
            removed = meta.get("$deleteFromPrimitiveList/finalizers") or []
            self._store_pod(
                self._bump(obj, finalizers=tuple(f for f in obj.finalizers if f not in removed))
            )
            return
        assert isinstance(obj, Job | JobSet)
        if intent.subresource == "status":
            status = sim_patch.merge_patch(obj.status, intent.patch["status"])
            if intent.kind == "Job":
                errors = validation.job_status_update(
                    {"spec": obj.spec, "status": obj.status}, {"spec": obj.spec, "status": status}
                )
                if errors:
                    raise Refused(f"status write refused: {errors}\npatch: {intent.patch}")
            self.observe(self._bump(obj, status=status))
            if intent.kind == "JobSet":
                name, namespace = intent.name, intent.namespace
                self.after(self.agent_ms, lambda: self.jobset_changed(name, namespace))
        else:
            spec = sim_patch.merge_patch(obj.spec, intent.patch["spec"])
            self.observe(self._bump(obj, spec=spec))

    # -- the kubelet --------------------------------------------------------------------------

    def _store_pod(self, pod: Pod) -> None:
        before = self.state.pods.get(f"{CLUSTER}/{pod.namespace}/{pod.name}")
        was = before.conditions.get("Ready") if before is not None else None
        if "Ready" in pod.conditions and pod.conditions["Ready"] != was:
            pod = msgspec.structs.replace(pod, ready_changed=self.now)  # lastTransitionTime
        if pod.deletion_ts is not None and not pod.finalizers and pod.terminal:
            self.observe(pod, "DELETED")
            self.agent_attempts.pop(pod.uid, None)
            self._collect_owner(pod.controller, pod.namespace)
        else:
            self.observe(pod)

    def _live(self, key: str, uid: str) -> Pod | None:
        pod = self.state.pods.get(key)
        return pod if pod is not None and pod.uid == uid else None

    def _start(self, key: str, uid: str) -> None:
        pod = self._live(key, uid)
        if pod is None or pod.deletion_ts is not None or pod.phase != "Pending":
            return
        self._store_pod(self._bump(pod, phase="Running", conditions={"Ready": "True"}))
        self._agent_started(key, uid)

    def _terminate(self, key: str, uid: str) -> None:
        pod = self._live(key, uid)
        if pod is None:
            return
        if not pod.terminal:
            pod = self._bump(
                pod,
                phase="Failed",
                conditions={"Ready": "False"},
                exit_codes={"main": 137},
                finished=self.now,
            )
        self._store_pod(pod)

    def finish_pod(self, name: str, *, exit_code: int = 0, namespace: str = "ns") -> None:
        """The pod's containers exit and the pod ends (restartPolicy Never)."""
        pod = self.pod(name, namespace)
        self._store_pod(
            self._bump(
                pod,
                phase="Succeeded" if exit_code == 0 else "Failed",
                conditions={"Ready": "False"},
                exit_codes={"main": exit_code},
                finished=self.now,
            )
        )

    def restart_in_place(self, name: str, namespace: str = "ns") -> None:
        """A container exits and the pod's `RestartAllContainers` rule restarts it in place:
        same uid and node, every container's restartCount up, not ready until it runs again."""
        pod = self.pod(name, namespace)
        if pod.phase != "Running" or pod.deletion_ts is not None:
            return
        self.agent_attempts[pod.uid] = None
        self._store_pod(
            self._bump(
                pod,
                conditions={"Ready": "False", "AllContainersRestarting": "True"},
                restart_count=pod.restart_count + 1,
                max_container_restarts=pod.max_container_restarts + 1,
            )
        )
        key = f"{CLUSTER}/{namespace}/{name}"
        uid = pod.uid
        self.after(self.restart_ms, lambda: self._restarted(key, uid))

    def _restarted(self, key: str, uid: str) -> None:
        pod = self._live(key, uid)
        if pod is None or pod.deletion_ts is not None:
            return
        self._store_pod(
            self._bump(pod, conditions={"Ready": "True", "AllContainersRestarting": "False"})
        )
        self._agent_started(key, uid)

    # -- upstream's in-place restart agent, one per pod of an InPlaceRestart JobSet ---------------

    def _jobset_of(self, pod: Pod) -> JobSet | None:
        name = pod.labels.get(JOBSET_NAME)
        if name is None:
            return None
        js = self.state.jobsets.get(f"{CLUSTER}/{pod.namespace}/{name}")
        if js is None:
            return None
        strategy = (js.spec.get("failurePolicy") or {}).get("restartStrategy")
        return js if strategy == IN_PLACE_RESTART else None

    def _agent_started(self, key: str, uid: str) -> None:
        pod = self._live(key, uid)
        if pod is None or self._jobset_of(pod) is None:
            return
        self.agent_attempts[uid] = None
        self.after(self.agent_ms, lambda: self._agent_write(key, uid))

    def _agent_write(self, key: str, uid: str) -> None:
        """On start: attempt = current + 1, or 0 on a fresh JobSet."""
        pod = self._live(key, uid)
        js = self._jobset_of(pod) if pod is not None else None
        if pod is None or js is None or pod.phase != "Running":
            return
        current = js.status.get("currentInPlaceRestartAttempt")
        attempt = 0 if current is None else int(current) + 1
        self.agent_attempts[uid] = attempt
        notes = {**pod.annotations, IN_PLACE_RESTART_ATTEMPT: str(attempt)}
        self._store_pod(self._bump(pod, annotations=notes))
        # Its own pod only: the other agents acted when the JobSet's status last changed.
        self._agent_check(js, pod.name, pod.namespace, pod.uid)

    def jobset_changed(self, name: str = "js", namespace: str = "ns") -> None:
        """Every agent of the JobSet sees its status (agents watch their JobSet)."""
        js = self.state.jobsets.get(f"{CLUSTER}/{namespace}/{name}")
        if js is not None:
            self._agents_check(js)

    def _agents_check(self, js: JobSet) -> None:
        previous = js.status.get("previousInPlaceRestartAttempt")
        if previous is None:
            return
        for pod in list(self.state.pods.values()):
            if pod.labels.get(JOBSET_NAME) == js.name and pod.namespace == js.namespace:
                self._agent_check(js, pod.name, pod.namespace, pod.uid)

    def _agent_check(self, js: JobSet, name: str, namespace: str, uid: str) -> None:
        """One pod's agent: a pod whose attempt the JobSet has moved past restarts in place."""
        previous = js.status.get("previousInPlaceRestartAttempt")
        attempt = self.agent_attempts.get(uid)
        if previous is not None and attempt is not None and attempt <= previous:
            self.restart_in_place(name, namespace)

    def in_place_synced(self, name: str = "js") -> bool:
        """Every pod's agent wrote the JobSet's current attempt: the barrier is down."""
        js = self.jobset(name)
        current = js.status.get("currentInPlaceRestartAttempt")
        pods = [p for p in self.live_pods() if p.labels.get(JOBSET_NAME) == name]
        return current is not None and all(
            self.agent_attempts.get(p.uid) == current and p.ready for p in pods
        )
