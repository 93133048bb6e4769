"""The multi-cluster dispatcher's decisions, step by step, over a manager and three workers
whose API servers carry every intent out at once: dispatch, admission where the pods fit,
and the preemption protocol (reserve, mark, delete, commit; abort; races by rank; a
restart in the middle)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from msgspec.structs import replace

from daemon.controllers.base import Decision
from daemon.controllers.multicluster.dispatch import INCREMENTAL, Dispatcher
from daemon.controllers.multicluster.projection import CLAIM, ORIGIN, PLACED
from daemon.controllers.multicluster.reconciler import ALL_AT_ONCE, NAME, MulticlusterReconciler
from daemon.sim.patch import merge_patch
from events.fold import fold
from events.intents import Create, Delete, Patch
from events.objects import (
    Job,
    JobSet,
    KObject,
    OwnerRef,
    Pod,
    PriorityClass,
    decode_object_dict,
)
from events.schema import Change, Decided, Event, Observed, Outcome
from events.state import State
from tests.daemon.controllers.gang_builders import RACK, T0, nodes, running

MANAGER = "m"
WORKERS = ("w1", "w2", "w3")
HOSTS = ("b0-r0-h0", "b0-r0-h1", "b0-r1-h0", "b0-r1-h1")  # two racks of two 8-GPU hosts
FREE = None
LOW, MID, HIGH = 5, 50, 500


class Clusters:
    """The manager and the workers as the fold sees them. `carry_out` does what API servers
    would with a decision's intents (a deleted pod is gone at once) and folds the outcome
    and the watch events."""

    def __init__(self, rec: MulticlusterReconciler) -> None:
        self.rec = rec
        self.state = State(now=T0)
        self.rv = 10
        self.log: list[tuple[str, str]] = []  # (key, reason) of every decision logged

    def fold(self, event: Event) -> None:
        fold(self.state, self.state.seq + 1, event)

    def observe(self, cluster: str, obj: KObject, change: Change = "ADDED") -> None:
        self.fold(Observed(at=self.state.now, cluster=cluster, change=change, obj=obj))  # type: ignore[arg-type]

    def bump(self, obj: Any, **changes: Any) -> Any:
        self.rv += 1
        return replace(obj, rv=str(self.rv), **changes)

    def decide(self, key: str, *, run: Any = None) -> Decision | None:
        if run is not None:
            return run.decide(key, self.state.now)  # type: ignore[no-any-return]
        return self.rec.decide(self.state, key, self.state.now)

    def record(self, key: str, decision: Decision) -> int:
        """Log the decision (as the daemon does before acting on it); its seq."""
        self.fold(
            Decided(
                at=self.state.now,
                reconciler=NAME,
                key=key,
                reason=decision.reason,
                intents=decision.intents,
            )
        )
        self.log.append((key, decision.reason))
        return self.state.seq

    def carry_out(self, key: str, decision: Decision) -> None:
        seq = self.record(key, decision)
        for index, intent in enumerate(decision.intents):
            self.fold(
                Outcome(
                    at=self.state.now,
                    decision=seq,
                    index=index,
                    ok=True,
                    resource_version=str(self.rv + 1),
                )
            )
            self.apply(intent)

    def refuse(self, key: str, decision: Decision, worker: str, code: int, message: str) -> None:
        """Log the decision; `worker` answers each intent to it with a final failure (`code`
        0: no answer at all), the others carry theirs out."""
        seq = self.record(key, decision)
        for index, intent in enumerate(decision.intents):
            failed = intent.cluster == worker
            self.fold(
                Outcome(
                    at=self.state.now,
                    decision=seq,
                    index=index,
                    ok=not failed,
                    code=code if failed else 200,
                    message=message if failed else "",
                )
            )
            if not failed:
                self.apply(intent)

    def step(self, key: str) -> Decision:
        decision = self.decide(key)
        assert decision is not None
        self.carry_out(key, decision)
        return decision

    def apply(self, intent: Any) -> None:
        cluster, ns, name = intent.cluster, intent.namespace, intent.name
        table = self.state.table(intent.kind)
        found = table.get(f"{cluster}/{ns}/{name}")
        if isinstance(intent, Create):
            body = dict(intent.body)
            body["metadata"] = {
                **body["metadata"],
                "uid": f"uid-{cluster}-{name}",
                "resourceVersion": str(self.rv + 1),
                "creationTimestamp": "2026-01-01T00:00:00Z",
            }
            self.rv += 1
            self.observe(cluster, decode_object_dict(intent.kind, body))
        elif isinstance(intent, Delete):
            if found is not None:
                self.observe(cluster, found, "DELETED")
        elif isinstance(intent, Patch):
            assert found is not None, intent
            patch: dict[str, Any] = intent.patch  # type: ignore[assignment]
            if isinstance(found, Pod):
                conditions = {c["type"]: c["status"] for c in patch["status"]["conditions"]}
                self.observe(
                    cluster,
                    self.bump(found, conditions={**found.conditions, **conditions}),
                    "MODIFIED",
                )
                return
            changes: dict[str, Any] = {}
            if "metadata" in patch:
                notes = {**found.annotations, **patch["metadata"]["annotations"]}
                changes["annotations"] = {k: v for k, v in notes.items() if v is not None}
            # A merge patch, as the API server applies it: a null removes the field.
            if "spec" in patch:
                changes["spec"] = merge_patch(dict(found.spec), patch["spec"])
            if "status" in patch:
                changes["status"] = merge_patch(dict(found.status), patch["status"])
            self.observe(cluster, self.bump(found, **changes), "MODIFIED")

    def jobs(self, cluster: str) -> dict[str, Job]:
        prefix = f"{cluster}/"
        return {k.split("/")[-1]: j for k, j in self.state.jobs.items() if k.startswith(prefix)}

    def jobsets(self, cluster: str) -> dict[str, JobSet]:
        prefix = f"{cluster}/"
        return {k.split("/")[-1]: j for k, j in self.state.jobsets.items() if k.startswith(prefix)}

    def pods(self, cluster: str) -> set[str]:
        prefix = f"{cluster}/"
        return {k.split("/")[-1] for k in self.state.pods if k.startswith(prefix)}


def world(
    workers: Mapping[str, Sequence[int | None]],
    dispatcher: Dispatcher = ALL_AT_ONCE,
    deadline_ms: int = 60_000,
) -> Clusters:
    """Each worker's four hosts, each held by one 8-GPU pod of the priority given (FREE:
    none), named ``<worker>-<host>``; the manager holds the PriorityClasses."""
    rec = MulticlusterReconciler(MANAGER, tuple(workers), dispatcher, deadline_ms=deadline_ms)
    clusters = Clusters(rec)
    for value, name in ((100, "normal"), (200, "high"), (300, "urgent")):
        clusters.observe(MANAGER, PriorityClass(name=name, uid=f"uid-{name}", rv="1", value=value))
    for worker, priorities in workers.items():
        for node in nodes():
            clusters.observe(worker, node)
        for host, priority in zip(HOSTS, priorities, strict=True):
            if priority is not None:
                clusters.observe(
                    worker, running(f"{worker}-{host}", host, 8, priority, namespace="ns")
                )
    return clusters


def submit(
    clusters: Clusters, name: str = "big", priority_class: str = "normal", at: int = T0
) -> str:
    """A Job of two 8-GPU pods that must share a rack, submitted to the manager."""
    body = {
        "metadata": {
            "name": name,
            "namespace": "ns",
            "uid": f"uid-{name}",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kbatchd.dev/multicluster": "true"},
        },
        "spec": {
            "managedBy": "kbatchd.dev/job-controller",
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "selector": {"matchLabels": {"batch.kubernetes.io/controller-uid": f"uid-{name}"}},
            "template": {
                "metadata": {
                    "labels": {"batch.kubernetes.io/controller-uid": f"uid-{name}", "app": "x"},
                    "annotations": {"kueue.x-k8s.io/podset-required-topology": RACK},
                },
                "spec": {
                    "priorityClassName": priority_class,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "x",
                            "resources": {"requests": {"nvidia.com/gpu": "8"}},
                        }
                    ],
                },
            },
        },
    }
    job = decode_object_dict("Job", body)
    clusters.observe(MANAGER, replace(job, created=at))
    return f"Job/{MANAGER}/ns/{name}"


# -- dispatch and admission ---------------------------------------------------------------------


def test_copies_go_to_every_worker_and_the_first_that_fits_runs_it() -> None:
    clusters = world({"w1": [LOW] * 4, "w2": [MID, MID, FREE, FREE], "w3": [FREE] * 4})
    key = submit(clusters)
    first = clusters.step(key)
    assert first.reason.startswith("Dispatched: copies to w1, w2, w3; Waiting:")
    copy = clusters.jobs("w1")["big"]
    assert copy.spec["suspend"] is True
    assert copy.annotations[ORIGIN] == key
    assert "selector" not in copy.spec
    assert "batch.kubernetes.io/controller-uid" not in copy.spec["template"]["metadata"]["labels"]
    assert "kbatchd.dev/multicluster" not in copy.labels
    second = clusters.step(key)
    assert second.reason == "Admitted: runs in w2 (2 pod(s) fit as it stands)"
    assert clusters.jobs(MANAGER)["big"].annotations[PLACED] == "w2"
    assert clusters.jobs("w2")["big"].spec["suspend"] is False
    assert "big" not in clusters.jobs("w1")
    assert "big" not in clusters.jobs("w3")
    assert clusters.pods("w1") == {f"w1-{h}" for h in HOSTS}, "nobody preempted"


def _admitted_to(decision: Decision | None) -> str:
    assert decision is not None
    assert decision.reason.startswith("Admitted: runs in "), decision.reason
    return decision.reason.removeprefix("Admitted: runs in ").split()[0]


def test_an_admission_in_a_pass_holds_its_room_for_the_decisions_after_it() -> None:
    # One free rack in w1, one in w2: two Jobs decided in one pass go one to each.
    clusters = world(
        {"w1": [HIGH, HIGH, FREE, FREE], "w2": [FREE, FREE, HIGH, HIGH], "w3": [HIGH] * 4}
    )
    first, second = submit(clusters, "first"), submit(clusters, "second")
    clusters.step(first)
    clusters.step(second)  # the copies
    run = clusters.rec.cycle(clusters.state)
    decision = clusters.decide(first, run=run)
    assert _admitted_to(decision) == "w1"
    assert decision is not None
    clusters.carry_out(first, decision)
    assert _admitted_to(clusters.decide(second, run=run)) == "w2"


@pytest.mark.parametrize("bound", [False, True], ids=["its-pods-not-bound", "its-pods-bound"])
def test_an_admitted_workload_holds_its_room_until_its_pods_are_bound(bound: bool) -> None:
    # w1 has room for two such Jobs, w2 for one, w3 for none.
    clusters = world({"w1": [FREE] * 4, "w2": [FREE, FREE, HIGH, HIGH], "w3": [HIGH] * 4})
    first = submit(clusters, "first")
    clusters.step(first)
    assert _admitted_to(clusters.step(first)) == "w1"
    copy = clusters.jobs("w1")["first"]
    owner = OwnerRef("Job", "first", copy.uid, controller=True)
    # Its pods are made; bound (as the worker's scheduler binds them) or not yet.
    for i, host in enumerate(HOSTS[:2]):
        pod = running(f"first-{i}", host if bound else "", 8, namespace="ns")
        clusters.observe(
            "w1", replace(pod, owners=(owner,), phase="Running" if bound else "Pending")
        )
    # Three more, each in a pass of its own: the first's room in w1 is held until its pods
    # are bound, then counted once, as the pods that take it; so is the second's.
    rest = [submit(clusters, name) for name in ("second", "third", "fourth")]
    for key in rest:
        clusters.step(key)
    placed = []
    for key in rest:
        decision = clusters.decide(key)
        assert decision is not None
        clusters.carry_out(key, decision)
        admitted = decision.reason.startswith("Admitted")
        placed.append(f"Admitted {_admitted_to(decision)}" if admitted else "Waiting")
    # Without the hold, all three would fit w1; counted twice once bound, one only.
    assert placed == ["Admitted w1", "Admitted w2", "Waiting"]


@pytest.mark.parametrize("landed", ["nothing", "the-resume"])
def test_a_restart_after_the_admission_finishes_it_in_the_chosen_worker(landed: str) -> None:
    clusters = world({"w1": [HIGH] * 4, "w2": [FREE] * 4, "w3": [FREE] * 4})
    key = submit(clusters)
    clusters.step(key)  # the copies
    admitted = clusters.decide(key)
    assert admitted is not None
    assert admitted.reason.startswith("Admitted: runs in w2")
    clusters.record(key, admitted)  # logged; the daemon is killed while carrying it out
    if landed == "the-resume":
        clusters.apply(next(i for i in admitted.intents if i.cluster == "w2"))
    for name in [k for k in clusters.state.pods if k.startswith("w1/")]:
        clusters.observe("w1", clusters.state.pods[name], "DELETED")  # w1 would fit first now
    resumed = clusters.step(key)
    assert resumed.reason == "Running: in w2"
    writes = {(type(i).__name__, i.cluster) for i in resumed.intents}
    assert writes >= {("Patch", MANAGER), ("Delete", "w1"), ("Delete", "w3")}
    assert clusters.jobs(MANAGER)["big"].annotations[PLACED] == "w2"
    assert clusters.jobs("w2")["big"].spec["suspend"] is False
    assert set(clusters.jobs("w1")) == set(clusters.jobs("w3")) == set()


def test_incremental_dispatch_adds_a_worker_each_round() -> None:
    clusters = world(
        {"w1": [HIGH] * 4, "w2": [HIGH] * 4, "w3": [FREE] * 4},
        Dispatcher(INCREMENTAL, step=1, round_ms=10_000),
    )
    key = submit(clusters)
    clusters.step(key)
    assert set(clusters.jobs("w1")) == {"big"}
    assert not clusters.jobs("w2")
    waiting = clusters.step(key)
    assert waiting.reason.startswith("Waiting: no worker takes it now (w1:")
    assert waiting.requeue_at == T0 + 2_000
    clusters.state.now = T0 + 10_000
    assert clusters.step(key).reason.startswith("Dispatched: copies to w2; Waiting:")
    clusters.state.now = T0 + 20_000
    clusters.step(key)
    assert clusters.step(key).reason.startswith("Admitted: runs in w3")


def test_the_running_copy_is_mirrored_and_a_deleted_workload_takes_its_copies() -> None:
    clusters = world({"w1": [FREE] * 4, "w2": [FREE] * 4, "w3": [FREE] * 4})
    key = submit(clusters)
    clusters.step(key)
    clusters.step(key)
    copy = clusters.jobs("w1")["big"]
    resumed = {"type": "Suspended", "status": "False", "reason": "JobResumed"}
    status = {"active": 2, "ready": 2, "conditions": [resumed]}
    clusters.observe("w1", clusters.bump(copy, status=status), "MODIFIED")
    assert clusters.step(key).reason == "Running: in w1"
    assert clusters.jobs(MANAGER)["big"].status == {"active": 2, "ready": 2}, "never suspended"
    assert clusters.decide(key) is None, "nothing more to mirror"
    # The API server leaves a zero counter out: the finished copy has no `active`, and the
    # manager's Job must lose its 2 (a finished Job with active > 0 is refused).
    complete = {"type": "Complete", "status": "True", "reason": "CompletionsReached"}
    status = {"succeeded": 2, "conditions": [resumed, complete]}
    clusters.observe("w1", clusters.bump(clusters.jobs("w1")["big"], status=status), "MODIFIED")
    finished = clusters.step(key)
    assert [i.patch for i in finished.intents if isinstance(i, Patch)] == [
        {"status": {"active": None, "ready": None, "succeeded": 2, "conditions": [complete]}}
    ]
    assert clusters.jobs(MANAGER)["big"].status == {"succeeded": 2, "conditions": [complete]}
    clusters.observe(MANAGER, clusters.jobs(MANAGER)["big"], "DELETED")
    assert clusters.step(key).reason == f"Removed: {key} is gone; 1 copy(ies) deleted"
    assert not clusters.jobs("w1")


def test_a_workload_of_another_manager_or_without_the_label_is_left_alone() -> None:
    clusters = world({"w1": [FREE] * 4, "w2": [FREE] * 4, "w3": [FREE] * 4})
    key = submit(clusters)
    job = clusters.jobs(MANAGER)["big"]
    clusters.observe(MANAGER, clusters.bump(job, labels={}), "MODIFIED")
    assert clusters.decide(key) is None
    other = {**job.spec, "managedBy": "kueue.x-k8s.io/multikueue"}
    clusters.observe(MANAGER, clusters.bump(job, spec=other), "MODIFIED")
    assert clusters.decide(key) is None
    assert clusters.decide("Job/w1/ns/big") is None, "copies are decided by the Job controller"


def test_an_unknown_priority_class_is_named() -> None:
    clusters = world({"w1": [FREE] * 4, "w2": [FREE] * 4, "w3": [FREE] * 4})
    key = submit(clusters, priority_class="missing")
    decision = clusters.decide(key)
    assert decision is not None
    assert decision.reason == (
        "InvalidWorkload: spec.template.spec.priorityClassName: no PriorityClass 'missing' "
        "in cluster m"
    )


def submit_jobset(clusters: Clusters, priority_classes: tuple[str, str] = ("", "high")) -> str:
    """A JobSet of a leader and a worker Job, one 8-GPU pod each, all sharing a rack (its
    gang annotation); the replicated Jobs' pods name `priority_classes` ("": none)."""

    def replicated(name: str, priority_class: str) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "x", "resources": {"requests": {"nvidia.com/gpu": "8"}}}
            ],
        }
        if priority_class:
            spec["priorityClassName"] = priority_class
        job = {"parallelism": 1, "completions": 1, "template": {"spec": spec}}
        return {"name": name, "replicas": 1, "template": {"spec": job}}

    body = {
        "metadata": {
            "name": "train",
            "namespace": "ns",
            "uid": "uid-train",
            "resourceVersion": "1",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"kbatchd.dev/multicluster": "true"},
            "annotations": {"kbatchd.dev/gang": "composite", "kbatchd.dev/gang-topology": RACK},
        },
        "spec": {
            "managedBy": "kbatchd.dev/jobset-controller",
            "replicatedJobs": [
                replicated(n, c)
                for n, c in zip(("leader", "workers"), priority_classes, strict=True)
            ],
        },
    }
    clusters.observe(MANAGER, decode_object_dict("JobSet", body))
    return f"JobSet/{MANAGER}/ns/train"


def test_a_jobset_is_copied_whole_and_runs_in_one_worker_its_status_mirrored() -> None:
    clusters = world({"w1": [HIGH, HIGH, FREE, HIGH], "w2": [FREE] * 4, "w3": [FREE] * 4})
    key = submit_jobset(clusters)
    first = clusters.step(key)
    assert first.reason.startswith("Dispatched: copies to w1, w2, w3; Waiting:")
    assert {type(i).__name__ + "/" + i.kind for i in first.intents} == {"Create/JobSet"}
    copy = clusters.jobsets("w1")["train"]
    assert copy.spec["suspend"] is True
    assert copy.annotations[ORIGIN] == key
    assert copy.annotations["kbatchd.dev/gang-topology"] == RACK
    assert "kbatchd.dev/multicluster" not in copy.labels
    # w1 has 8 GPUs free in each rack, not 16 in one: the set is placed as one unit.
    assert clusters.step(key).reason == "Admitted: runs in w2 (2 pod(s) fit as it stands)"
    assert clusters.jobsets(MANAGER)["train"].annotations[PLACED] == "w2"
    assert clusters.jobsets("w2")["train"].spec["suspend"] is False
    assert set(clusters.jobsets("w1")) == set(clusters.jobsets("w3")) == set()
    resumed = {"type": "Suspended", "status": "False", "reason": "ResumeJobs"}
    status = {"replicatedJobsStatus": [{"name": "leader", "ready": 1}], "conditions": [resumed]}
    running = clusters.jobsets("w2")["train"]
    clusters.observe("w2", clusters.bump(running, status=status), "MODIFIED")
    mirrored = clusters.step(key)
    assert mirrored.reason == "Running: in w2"
    assert [(i.kind, i.subresource) for i in mirrored.intents] == [("JobSet", "status")]
    assert clusters.jobsets(MANAGER)["train"].status == {
        "replicatedJobsStatus": [{"name": "leader", "ready": 1}]
    }


def test_a_missing_priority_class_of_a_jobset_is_named_by_its_path() -> None:
    clusters = world({"w1": [FREE] * 4, "w2": [FREE] * 4, "w3": [FREE] * 4})
    key = submit_jobset(clusters, ("", "missing"))
    decision = clusters.decide(key)
    assert decision is not None
    assert decision.reason == (
        "InvalidWorkload: spec.replicatedJobs[1].template.spec.template.spec.priorityClassName: "
        "no PriorityClass 'missing' in cluster m"
    )


# -- preemption ---------------------------------------------------------------------------------

FULL = {"w1": [MID] * 4, "w2": [LOW, LOW, 40, 40], "w3": [10, 10, MID, MID]}
W2_CHEAP = {"w2-b0-r0-h0", "w2-b0-r0-h1"}


def dispatched(clusters: Clusters, key: str) -> None:
    clusters.step(key)  # the copies


def test_a_workload_that_fits_nowhere_evicts_in_exactly_one_worker_then_runs_there() -> None:
    clusters = world(FULL)
    key = submit(clusters)
    dispatched(clusters, key)
    reserved = clusters.step(key)
    assert reserved.reason.startswith(
        "Reserved: preempts in w2: 2 victim(s), 2 pod(s): Pod ns/w2-b0-r0-h1 (priority 5), "
        "Pod ns/w2-b0-r0-h0 (priority 5) (weight 10), 2 node(s) held, deadline "
    )
    claim = clusters.state.claims[key]
    assert claim.victims == {f"w2/ns/{p}" for p in W2_CHEAP}
    assert not claim.evicting
    marks = clusters.step(key)
    assert marks.reason == "Evicting: marks 2 victim pod(s) in w2"
    assert clusters.state.claims[key].evicting
    deletes = clusters.step(key)
    assert deletes.reason == "Evicting: 2 victim pod(s) in w2 still to go, 2 deleted now"
    committed = clusters.step(key)
    assert committed.reason == "Committed: runs in w2 after evicting 2 pod(s)"
    assert not clusters.state.claims
    assert clusters.jobs(MANAGER)["big"].annotations[PLACED] == "w2"
    assert CLAIM not in clusters.jobs(MANAGER)["big"].annotations
    assert clusters.jobs("w2")["big"].spec["suspend"] is False
    assert set(clusters.jobs("w1")) == set(clusters.jobs("w3")) == set()
    for worker, priorities in FULL.items():
        expected = {f"{worker}-{h}" for h, p in zip(HOSTS, priorities, strict=True) if p}
        assert clusters.pods(worker) == expected - W2_CHEAP, worker


def test_a_preemption_is_chosen_once_every_nominated_worker_holds_a_copy() -> None:
    clusters = world(FULL)
    key = submit(clusters)
    copies = clusters.decide(key)
    assert copies is not None
    clusters.apply(next(i for i in copies.intents if i.cluster == "w1"))  # only w1's made
    waiting = clusters.step(key)
    assert waiting.reason == (
        "Dispatched: copies to w2, w3; "
        "Waiting: no worker takes it now (to preempt, the copies in w2, w3 first)"
    )
    assert clusters.step(key).reason.startswith("Reserved: preempts in w2"), "the lightest"


def test_two_racing_preemptors_never_both_evict_and_the_better_rank_wins() -> None:
    clusters = world(FULL)
    low = submit(clusters, "low", "normal")
    high = submit(clusters, "high", "high", at=T0 + 1)
    dispatched(clusters, low)
    dispatched(clusters, high)
    run = clusters.rec.cycle(clusters.state)
    first = clusters.decide(low, run=run)
    second = clusters.decide(high, run=run)
    assert first is not None
    assert second is not None
    assert first.reason.startswith("Reserved: preempts in w2")
    assert second.reason.startswith("Reserved: preempts in w2")
    assert second.reason.endswith(f"takes the place of {low}")
    clusters.carry_out(low, first)
    clusters.carry_out(high, second)
    assert set(clusters.state.claims) == {high}
    # The one that gave way plans again around the winner's claim: the next-lightest room.
    again = clusters.step(low)
    assert again.reason.startswith("Reserved: preempts in w3")
    assert clusters.state.claims[low].victims.isdisjoint(clusters.state.claims[high].victims)


def test_a_claim_that_evicts_already_stands_against_a_better_rank() -> None:
    clusters = world(FULL)
    low = submit(clusters, "low", "normal")
    dispatched(clusters, low)
    clusters.step(low)  # reserved
    clusters.step(low)  # marking: evicting now
    high = submit(clusters, "high", "urgent", at=T0 + 1)
    dispatched(clusters, high)
    decision = clusters.step(high)
    assert decision.reason.startswith("Reserved: preempts in w3")
    assert "takes the place of" not in decision.reason
    assert clusters.state.claims[low].cluster == "w2"


def test_a_claim_aborts_at_its_deadline_and_issues_no_more_evictions() -> None:
    clusters = world(FULL, deadline_ms=30_000)
    key = submit(clusters)
    dispatched(clusters, key)
    clusters.step(key)  # reserved
    marks = clusters.decide(key)
    assert marks is not None
    clusters.record(key, marks)  # logged, and then the victims' API server never answers
    clusters.state.now = T0 + 30_000
    aborted = clusters.step(key)
    assert aborted.reason == (
        "Aborted: the preemption in w2: deadline passed with 2 victim pod(s) still there; "
        "waits for a worker again"
    )
    assert aborted.intents == (
        Patch(MANAGER, "Job", "ns", "big", patch={"metadata": {"annotations": {CLAIM: None}}}),
    )
    assert not clusters.state.claims
    assert clusters.pods("w2") >= W2_CHEAP, "nothing evicted"


def test_a_claim_that_begins_evicting_in_a_pass_stands_against_a_better_rank_in_it() -> None:
    clusters = world(FULL)
    low = submit(clusters, "low", "normal")
    high = submit(clusters, "high", "urgent", at=T0 + 1)
    dispatched(clusters, low)
    dispatched(clusters, high)
    clusters.step(low)  # reserved
    run = clusters.rec.cycle(clusters.state)
    marking = clusters.decide(low, run=run)
    assert marking is not None
    assert marking.reason.startswith("Evicting: marks")
    second = clusters.decide(high, run=run)
    assert second is not None
    assert second.reason.startswith("Reserved: preempts in w3"), second.reason


def test_a_restart_after_the_reservation_resumes_it_and_preempts_nowhere_else() -> None:
    clusters = world(FULL)
    key = submit(clusters)
    dispatched(clusters, key)
    reserved = clusters.decide(key)
    assert reserved is not None
    clusters.record(key, reserved)  # logged; the daemon is killed before the patch is sent
    # The restarted daemon folds the same log: the claim is there, and it goes on.
    assert set(clusters.state.claims) == {key}
    resumed = clusters.step(key)
    assert resumed.reason == "Evicting: marks 2 victim pod(s) in w2"
    assert {i.cluster for i in resumed.intents if isinstance(i, Patch) and i.kind == "Pod"} == {
        "w2"
    }


def test_a_restart_after_some_deletes_deletes_only_what_is_left_once() -> None:
    clusters = world(FULL)
    key = submit(clusters)
    dispatched(clusters, key)
    clusters.step(key)
    clusters.step(key)  # marked
    deletes = clusters.decide(key)
    assert deletes is not None
    clusters.record(key, deletes)
    clusters.apply(deletes.intents[0])  # one delete went out before the kill
    again = clusters.step(key)
    assert again.reason == "Evicting: 1 victim pod(s) in w2 still to go, 1 deleted now"
    assert [i.name for i in again.intents] == ["w2-b0-r0-h1"]
    assert clusters.step(key).reason == "Committed: runs in w2 after evicting 2 pod(s)"


@pytest.mark.parametrize("refused", ["marks", "deletes"])
def test_a_victim_the_worker_refuses_to_evict_aborts_the_claim(refused: str) -> None:
    clusters = world(FULL)
    key = submit(clusters)
    dispatched(clusters, key)
    clusters.step(key)  # reserved
    if refused == "deletes":
        clusters.step(key)  # marked
    evictions = clusters.decide(key)
    assert evictions is not None
    clusters.refuse(key, evictions, "w2", 403, 'pods "w2-b0-r0-h0" is forbidden')
    aborted = clusters.step(key)
    assert aborted.reason == (
        "Aborted: the preemption in w2: victim w2/ns/w2-b0-r0-h0 cannot be evicted: "
        '403 pods "w2-b0-r0-h0" is forbidden; waits for a worker again'
    )
    assert [i.kind for i in aborted.intents] == ["Job"], "no eviction issued after the abort"
    assert not clusters.state.claims


def test_victims_a_worker_refused_are_spared_while_a_claim_could_last() -> None:
    clusters = world(FULL)
    key = submit(clusters)
    dispatched(clusters, key)
    clusters.step(key)  # reserved
    marks = clusters.decide(key)
    assert marks is not None
    clusters.refuse(key, marks, "w2", 422, "denied by a ValidatingAdmissionPolicy")
    clusters.step(key)  # aborted
    again = clusters.decide(key)
    assert again is not None
    assert again.reason.startswith("Reserved: preempts in w3"), again.reason
    clusters.state.now += 60_000  # world's deadline_ms
    later = clusters.decide(key)
    assert later is not None
    assert later.reason.startswith("Reserved: preempts in w2"), later.reason


def test_a_worker_that_cannot_be_reached_aborts_its_claim_and_is_passed_over() -> None:
    clusters = world(FULL)
    key = submit(clusters)
    dispatched(clusters, key)
    clusters.step(key)  # reserved in w2
    marks = clusters.decide(key)
    assert marks is not None
    clusters.refuse(key, marks, "w2", 0, "gave up after 8 attempts: Cannot connect to host")
    assert set(clusters.state.unreachable) == {"w2"}
    aborted = clusters.step(key)
    assert aborted.reason == (
        "Aborted: the preemption in w2: cluster w2 is unreachable; waits for a worker again"
    )
    again = clusters.step(key)
    assert again.reason.startswith("Reserved: preempts in w3"), again.reason
    assert {i.cluster for i in again.intents} == {MANAGER}
    # Heard from again, it is a worker like the others.
    clusters.observe("w2", next(iter(clusters.jobs("w2").values())), "MODIFIED")
    assert not clusters.state.unreachable


def test_no_copy_goes_to_a_worker_that_cannot_be_reached() -> None:
    clusters = world({w: [FREE] * 4 for w in WORKERS})
    clusters.state.unreachable["w1"] = "gave up after 8 attempts"
    key = submit(clusters)
    decision = clusters.step(key)
    assert decision.reason.startswith("Dispatched: copies to w2, w3; ")
    assert clusters.step(key).reason == "Admitted: runs in w2 (2 pod(s) fit as it stands)"


def test_room_taken_while_evicting_aborts_instead_of_committing() -> None:
    clusters = world(FULL)
    key = submit(clusters)
    dispatched(clusters, key)
    for _ in range(3):
        clusters.step(key)  # reserved, marked, deleted
    # A node of the claimed rack goes away before the commit.
    node = next(n for n in nodes() if n.name == "b0-r0-h0")
    clusters.observe("w2", node, "DELETED")
    aborted = clusters.step(key)
    assert aborted.reason.startswith("Aborted: the preemption in w2: its room in w2 is gone")
    assert PLACED not in clusters.jobs(MANAGER)["big"].annotations


@pytest.mark.parametrize("worker", WORKERS)
def test_a_copy_changing_wakes_the_manager_workload(worker: str) -> None:
    clusters = world({"w1": [FREE] * 4, "w2": [FREE] * 4, "w3": [FREE] * 4})
    key = submit(clusters)
    clusters.step(key)
    dirty: set[str] = set()
    copy = clusters.jobs(worker)["big"]
    fold(
        clusters.state,
        clusters.state.seq + 1,
        Observed(at=T0, cluster=worker, change="MODIFIED", obj=copy),
        dirty,
    )
    assert key in dirty


def test_a_claim_annotation_the_log_does_not_hold_is_taken_off() -> None:
    """Two decisions' writes may land in either order: a claim a better-ranked preemptor took
    off can still be on the object after its own write. The log says it is gone; the next
    write says so too."""
    clusters = world({"w1": [FREE] * 4, "w2": [FREE] * 4, "w3": [FREE] * 4})
    key = submit(clusters)
    clusters.step(key)
    job = clusters.jobs(MANAGER)["big"]
    clusters.observe(MANAGER, clusters.bump(job, annotations={CLAIM: "{}"}), "MODIFIED")
    admitted = clusters.step(key)
    assert admitted.intents[0] == Patch(
        MANAGER,
        "Job",
        "ns",
        "big",
        patch={"metadata": {"annotations": {CLAIM: None, PLACED: "w1"}}},
    )
    assert CLAIM not in clusters.jobs(MANAGER)["big"].annotations
