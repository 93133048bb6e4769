"""A tiny in-memory cluster for multi-step Job reconciler tests, no event loop and no I/O.

`FakeCluster.settle()` runs decide → apply the intents to the `State` by hand → decide again
until the reconciler has nothing left to do, the way the runtime would once every intent is
observed. Status writes go through the simulated API server's own status validation (spec
A4), so a write the server would refuse fails the test; pod bodies through its create
validation. Tests play the kubelet: they move pods through phases with `set_phase`, and
`kubelet_kill` ends pods that are being deleted.
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from daemon.controllers.base import Decision
from daemon.controllers.job.reconciler import JobReconciler
from daemon.sim import patch as sim_patch
from daemon.sim import validation
from events.intents import Create, Delete, Intent, Patch
from events.objects import Job, OwnerRef, Pod, SlimObject
from events.schema import Change
from events.state import State
from tests.daemon.controllers.builders import CLUSTER, REC, key, observe


class Refused(AssertionError):
    """A write the API server would reject."""


class FakeCluster:
    def __init__(self, state: State, job_name: str = "job", rec: JobReconciler = REC) -> None:
        self.state = state
        self.rec = rec
        self.key = key(job_name)
        self.job_key = self.key.split("/", 1)[1]
        self.now = state.now
        self.decisions: list[Decision] = []
        self.status_writes: list[dict[str, Any]] = []
        self.created: list[str] = []
        self._uid = 0

    # -- views ----------------------------------------------------------------------------------

    @property
    def job(self) -> Job:
        return self.state.jobs[self.job_key]

    @property
    def status(self) -> dict[str, Any]:
        return self.job.status

    def pods(self) -> list[Pod]:
        return sorted(self.state.pods.values(), key=lambda p: p.name)

    def pod(self, name: str) -> Pod:
        return self.state.pods[f"{CLUSTER}/{self.job.namespace}/{name}"]

    def pods_of_index(self, index: int) -> list[Pod]:
        return [
            p
            for p in self.pods()
            if p.annotations.get("batch.kubernetes.io/job-completion-index") == str(index)
        ]

    def running(self) -> list[Pod]:
        return [p for p in self.pods() if not p.terminal and p.deletion_ts is None]

    def conditions(self) -> dict[str, str]:
        return {c["type"]: c["status"] for c in self.status.get("conditions") or ()}

    def condition(self, type_: str) -> dict[str, Any]:
        for c in self.status.get("conditions") or ():
            if c["type"] == type_:
                return dict(c)
        raise KeyError(type_)

    # -- the loop -------------------------------------------------------------------------------

    def step(self) -> Decision | None:
        self.state.now = self.now
        decision = self.rec.decide(self.state, self.key, self.now)
        if decision is not None:
            self.decisions.append(decision)
            for intent in decision.intents:
                self.apply(intent)
        return decision

    def settle(self, limit: int = 30) -> Decision | None:
        """Decide and apply until a decision has no intents; returns that last decision (None
        when the reconciler had nothing to say)."""
        for _ in range(limit):
            decision = self.step()
            if decision is None or not decision.intents:
                return decision
        raise AssertionError(f"no quiescence after {limit} decisions: {self.decisions[-3:]}")

    def advance(self, ms: int) -> None:
        self.now += ms

    def advance_to_requeue(self) -> None:
        last = self.decisions[-1] if self.decisions else None
        assert last is not None, "no decision yet"
        assert last.requeue_at is not None, "no requeue was asked for"
        self.now = max(self.now, last.requeue_at)

    # -- applying intents -----------------------------------------------------------------------

    def apply(self, intent: Intent) -> None:
        if isinstance(intent, Create):
            self._create(intent)
        elif isinstance(intent, Delete):
            self._delete(intent)
        elif isinstance(intent, Patch) and intent.kind == "Job":
            self._write_status(intent)
        elif isinstance(intent, Patch) and intent.kind == "Pod":
            self._patch_pod(intent)
        else:
            raise AssertionError(f"unexpected intent {intent}")

    def _create(self, intent: Create) -> None:
        body = copy.deepcopy(intent.body)
        errors = validation.metadata(body) + validation.pod_create(body)
        if errors:
            raise Refused(f"pod create refused: {errors}")
        ref = f"{CLUSTER}/{intent.namespace}/{intent.name}"
        if ref in self.state.pods:
            return  # AlreadyExists: the deterministic name made the create idempotent
        meta = body["metadata"]
        owners = tuple(
            OwnerRef(o["kind"], o["name"], o["uid"], bool(o.get("controller")))
            for o in meta.get("ownerReferences") or ()
        )
        self._uid += 1
        self._observe(
            Pod(
                name=intent.name,
                namespace=intent.namespace,
                uid=f"uid-{intent.name}-{self._uid}",
                rv="1",
                created=self.now,
                labels=dict(meta.get("labels") or {}),
                annotations=dict(meta.get("annotations") or {}),
                owners=owners,
                finalizers=tuple(meta.get("finalizers") or ()),
                phase="Pending",
            )
        )
        self.created.append(intent.name)

    def _delete(self, intent: Delete) -> None:
        ref = f"{CLUSTER}/{intent.namespace}/{intent.name}"
        pod = self.state.pods.get(ref)
        if pod is None or (intent.precondition_uid and pod.uid != intent.precondition_uid):
            return
        if pod.deletion_ts is None:
            pod = _bump(pod, deletion_ts=self.now)
        self._store_pod(ref, pod)

    def _patch_pod(self, intent: Patch) -> None:
        ref = f"{CLUSTER}/{intent.namespace}/{intent.name}"
        pod = self.state.pods.get(ref)
        if pod is None:
            return
        assert intent.patch_type == "strategic"
        assert isinstance(intent.patch, dict)
        meta = intent.patch["metadata"]
        if meta.get("uid") not in (None, pod.uid):
            return  # 409: the uid precondition failed
        removed = meta.get("$deleteFromPrimitiveList/finalizers") or []
        finalizers = tuple(f for f in pod.finalizers if f not in removed)
        self._store_pod(ref, _bump(pod, finalizers=finalizers))

    def _write_status(self, intent: Patch) -> None:
        job = self.job
        assert intent.subresource == "status"
        assert intent.patch_type == "merge"
        if intent.precondition_rv and intent.precondition_rv != job.rv:
            raise Refused(f"409 Conflict: rv {intent.precondition_rv} != {job.rv}")
        assert isinstance(intent.patch, dict)
        status = sim_patch.merge_patch(job.status, intent.patch["status"])
        errors = validation.job_status_update(
            {"spec": job.spec, "status": job.status}, {"spec": job.spec, "status": status}
        )
        if errors:
            raise Refused(f"status write refused: {errors}\npatch: {intent.patch}")
        self.status_writes.append(intent.patch["status"])
        self._observe(msgspec.structs.replace(job, status=status, rv=str(int(job.rv) + 1)))

    def _store_pod(self, ref: str, pod: Pod) -> None:
        # The API server removes a deleted pod once it has no finalizer and has stopped.
        if (
            pod.deletion_ts is not None
            and not pod.finalizers
            and (pod.terminal or not pod.node_name)
        ):
            self._observe(pod, "DELETED")
        else:
            self._observe(pod)

    def _observe(self, obj: SlimObject, change: Change = "MODIFIED") -> None:
        observe(self.state, obj, change)

    # -- the kubelet and other actors -----------------------------------------------------------

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
        conds = dict(pod.conditions)
        conds.update(conditions or {})
        conds["Ready"] = "True" if ready and phase == "Running" else "False"
        finished = self.now if phase in ("Succeeded", "Failed") else None
        codes = exit_codes if exit_codes is not None else pod.exit_codes
        if phase == "Succeeded" and exit_codes is None:
            codes = {"main": 0}
        self._store_pod(
            f"{CLUSTER}/{pod.namespace}/{name}",
            _bump(
                pod,
                phase=phase,
                conditions=conds,
                exit_codes=dict(codes),
                node_name=pod.node_name or node,
                finished=finished,
            ),
        )

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

    def user_delete(self, *names: str) -> None:
        for name in names:
            pod = self.pod(name)
            self._delete(Delete(CLUSTER, "Pod", pod.namespace, name))

    def hold(self, *names: str, finalizer: str = "example.com/hold") -> None:
        """Another controller's finalizer keeps the pods around once deleted."""
        for name in names or tuple(p.name for p in self.running()):
            pod = self.pod(name)
            self._store_pod(
                f"{CLUSTER}/{pod.namespace}/{name}",
                _bump(pod, finalizers=(*pod.finalizers, finalizer)),
            )

    def remove_finalizer(self, name: str, finalizer: str) -> None:
        pod = self.pod(name)
        finalizers = tuple(f for f in pod.finalizers if f != finalizer)
        self._store_pod(f"{CLUSTER}/{pod.namespace}/{name}", _bump(pod, finalizers=finalizers))

    def set_node_ready(self, name: str, ready: bool) -> None:
        node = self.state.nodes[f"{CLUSTER}//{name}"]
        self._observe(msgspec.structs.replace(node, ready=ready))

    def update_job(self, **spec: Any) -> None:
        job = self.job
        new_spec = copy.deepcopy(job.spec)
        new_spec.update(spec)
        self._observe(msgspec.structs.replace(job, spec=new_spec, rv=str(int(job.rv) + 1)))


def _bump(pod: Pod, **changes: Any) -> Pod:
    return msgspec.structs.replace(pod, rv=str(int(pod.rv or "0") + 1), **changes)
