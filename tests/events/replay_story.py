"""A small hand-written log for the replay tools' unit tests: two Jobs contending for a rack,
with an admission, a refusal with placement numbers, a preemption, a failed delete whose outcome
comes back far after its decision, and a restart still in flight at the end. (The integration
tests run the same tools on logs the daemon wrote.)"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from msgspec.structs import replace

from events.intents import Create, Delete
from events.objects import Job, OwnerRef, Pod
from events.schema import Decided, Event, Observed, Outcome, Started, Tick
from events.store import EventLog
from tests.events.builders import GPU, job_owner, make_job, make_node, make_pod

CLUSTER: Final = "c1"
T0: Final = 1_767_225_600_000
# Ticks between the preemption and its late outcome: more than the explainer reads at once.
GAP: Final = 1_500
NOT_ADMITTED: Final = (
    "Unschedulable: TopologyPlacementFailed: required cloud.provider.com/topology-rack: allows "
    'to fit only 1 out of 2 pod(s). Total nodes: 4; excluded: resource "nvidia.com/gpu": 2'
)
PREEMPTED: Final = "Preempted: evicting ns/low (priority 0 < 100) for ns/high"
RESTARTED: Final = "Restarted: restarting ns/low in place because pod ns/low-0 was preempted"


class Story:
    """Appends events with a clock, remembering the seqs the tests look up."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.at = T0
        self.seqs: dict[str, int] = {}

    def add(self, event: Event, name: str = "") -> int:
        self.events.append(event)
        if name:
            self.seqs[name] = len(self.events)
        return len(self.events)

    def tick(self, ms: int = 10) -> int:
        self.at += ms
        return self.at

    def observe(self, obj: Job | Pod, change: str = "ADDED", name: str = "") -> int:
        return self.add(
            Observed(at=self.tick(), cluster=CLUSTER, change=change, obj=obj),  # type: ignore[arg-type]
            name,
        )

    def decide(self, key: str, reason: str, *intents: Create | Delete, name: str = "") -> int:
        return self.add(
            Decided(
                at=self.tick(), reconciler="gang", key=key, reason=reason, intents=tuple(intents)
            ),
            name,
        )

    def outcome(self, decision: str, index: int, ok: bool = True, code: int = 0) -> int:
        message = "" if ok else "pods not found"
        event = Outcome(
            at=self.tick(),
            decision=self.seqs[decision],
            index=index,
            ok=ok,
            code=code,
            message=message,
        )
        return self.add(event)


def _pod(name: str, job: str, node: str = "", phase: str = "Pending") -> Pod:
    return make_pod(name, node=node, phase=phase, requests={GPU: 4}, owner=job_owner(job))


def _started(at: int) -> Started:
    return Started(at=at, version="0.1.0", rules="0123456789abcdef", settings={})


def story() -> Story:
    s = Story()
    s.add(_started(s.tick()), "start")
    for rack, hosts in (("r1", ("h1", "h2")), ("r2", ("h3", "h4"))):
        for host in hosts:
            s.add(
                Observed(
                    at=s.tick(), cluster=CLUSTER, change="ADDED", obj=make_node(host, rack=rack)
                )
            )
    low = replace(make_job("low"), spec={"parallelism": 2, "suspend": False})
    s.observe(low, name="low")
    # A decoy in the same namespace: never part of low's story.
    s.observe(make_job("other"))
    s.observe(_pod("other-0", "other", node="h4", phase="Running"), name="other-0")
    create = [Create(CLUSTER, "Pod", "ns", f"low-{i}") for i in range(2)]
    s.decide("Job/c1/ns/low", "Admitted: ns/low: 2 pod(s) in rack r1", *create, name="admit")
    s.outcome("admit", 0)
    s.outcome("admit", 1)
    for i, node in enumerate(("h1", "h2")):
        s.observe(_pod(f"low-{i}", "low"))
        s.observe(_pod(f"low-{i}", "low", node=node, phase="Running"), "MODIFIED", f"low-{i}-run")
    s.observe(make_job("high"), name="high")
    s.decide("Job/c1/ns/high", NOT_ADMITTED, name="refuse")
    deletes = [Delete(CLUSTER, "Pod", "ns", f"low-{i}", precondition_uid="x") for i in range(2)]
    s.decide("Job/c1/ns/high", PREEMPTED, *deletes, name="preempt")
    s.outcome("preempt", 0)
    s.add(_started(s.tick()), "restart-daemon")  # the daemon restarted mid-preemption
    running = _pod("low-0", "low", node="h1", phase="Running")
    s.observe(replace(running, deletion_ts=s.at), "MODIFIED", "low-0-deleting")
    s.observe(running, "DELETED", "low-0-gone")
    for _ in range(GAP):
        s.add(Tick(at=s.tick(1)))
    s.outcome("preempt", 1, ok=False, code=404)
    s.decide(
        "Job/c1/ns/low", RESTARTED, Create(CLUSTER, "Pod", "ns", "low-2"), name="restart"
    )  # no outcome: still in flight at the end
    return s


async def write(path: Path, events: list[Event]) -> None:
    async with EventLog.open(path) as log:
        await log.append(events)


def owner(kind: str, name: str) -> OwnerRef:
    return OwnerRef(kind, name, f"uid-{name}", True)
