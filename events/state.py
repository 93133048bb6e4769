"""Folded state: every object kbatchd knows, the topology tree, and decisions in flight.

A msgspec struct so that a snapshot is one msgpack encode and equality is structural (the
property tests compare a fold from empty with a fold from a snapshot).
"""

from __future__ import annotations

from typing import Final

import msgspec

from events.objects import (
    CompositePodGroup,
    Job,
    JobSet,
    KObject,
    Node,
    PersistentVolumeClaim,
    Pod,
    PodGroup,
    PriorityClass,
    Service,
    Workload,
)
from events.schema import Decided
from events.topology import DEFAULT_LEVELS, Topology


class InFlight(msgspec.Struct, array_like=True):
    """A decision some of whose intents have no outcome yet."""

    decision: Decided
    pending: list[int]


class Expectation(msgspec.Struct, array_like=True):
    """An object a decision changed (or is changing) that the watch has not yet shown.

    Like client-go's controller expectations: until the change is observed, the deciding key
    would decide from stale state, so it is not reconciled again."""

    decision: int
    key: str
    op: str
    since: int
    uid: str = ""
    rv: str = ""
    done: bool = False
    # The node a bind or a nomination (``status.nominatedNodeName``) claims for a pending
    # pod, and what it charges there (`State.assumed`) until the watch shows the change.
    node: str = ""
    requests: dict[str, int] = {}


class Admission(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A gang admission decided but not yet seen whole: the decision's seq and the binds it
    decided for the group's members, ``pod key -> (uid, node)``. Kept by `gang.projection` from
    the decision (logged before its first bind) until the group's ``PodGroupScheduled=True``
    is observed, so that a crash in the middle of the binds leaves the plan to finish from."""

    decision: int
    binds: dict[str, tuple[str, str]]


class Claim(msgspec.Struct, frozen=True, gc=False):
    """A cross-cluster preemption under way: the workload `preemptor` (its ref in the manager
    cluster) runs in worker `cluster` once the `victims` (pod keys there) are gone. Until it
    commits or aborts, no other preemption takes one of those victims or the `room` it will
    take (node name -> what it takes there, ``pods`` included), which every view of that
    cluster charges as used. `rank` settles races (the smallest wins); once `evicting`, the
    claim stands against any rank. Kept by `multicluster.projection`."""

    preemptor: str
    rank: tuple[int, int, str]
    cluster: str
    victims: frozenset[str]
    room: dict[str, dict[str, int]]
    deadline: int  # ms
    evicting: bool = False
    reserved: int = 0  # ms; when the claim was made


class Refusal(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A worker's final no to evicting a claimed victim: why, and when (ms)."""

    why: str
    at: int


class BackoffRecord(msgspec.Struct, array_like=True):
    """A Job's pod re-creation back-off (spec A5.4, upstream `backoffRecord`): how many of its
    pods failed since the newest success, and when the newest of those failures finished (ms).
    Kept only while `failures` > 0; maintained by the Job controller's projection."""

    failures: int
    last_failure_ms: int


class State(msgspec.Struct):
    seq: int = 0
    now: int = 0
    pods: dict[str, Pod] = {}
    nodes: dict[str, Node] = {}
    jobs: dict[str, Job] = {}
    jobsets: dict[str, JobSet] = {}
    workloads: dict[str, Workload] = {}
    podgroups: dict[str, PodGroup] = {}
    compositepodgroups: dict[str, CompositePodGroup] = {}
    priorityclasses: dict[str, PriorityClass] = {}
    pvcs: dict[str, PersistentVolumeClaim] = {}
    services: dict[str, Service] = {}
    topology: Topology = msgspec.field(default_factory=Topology)
    # ``Kind/cluster/namespace/name`` of a controller -> keys of the pods it controls.
    children: dict[str, set[str]] = {}
    # ``cluster/Kind`` -> the resourceVersion of the newest completed list. (Not advanced per
    # watch event: that would cost every event a string build, and a restart relists anyway.)
    watermarks: dict[str, str] = {}
    # ``cluster/Kind`` -> seq of the newest completed list.
    synced: dict[str, int] = {}
    # ``cluster/Kind`` -> the ``group/version`` its newest list was served in (none: the kind
    # is not served there, or the log predates this record).
    served: dict[str, str] = {}
    # cluster -> why an act there gave up unanswered (every attempt failed to connect or timed
    # out), until anything is heard from it again: the clusters the log knows it cannot reach.
    unreachable: dict[str, str] = {}
    inflight: dict[int, InFlight] = {}
    # object ref -> the change to it not yet observed; key -> how many such refs it awaits.
    expected: dict[str, Expectation] = {}
    awaiting: dict[str, int] = {}
    # No expectation is older than this (a lower bound on their `since`; 0: unknown): a Tick
    # looks through them for expired ones only when the oldest may have expired.
    expected_since: int = 0
    # node key (``cluster//name``) -> what the binds and nominations decided to it but not yet
    # seen take there, ``pods`` included: kube-scheduler's assumed pods, kept with the
    # expectations.
    assumed: dict[str, dict[str, int]] = {}
    # ``reconciler key`` -> the reason of its newest decision.
    reasons: dict[str, str] = {}
    # ``Job/cluster/namespace/name`` -> its back-off record, which must outlive the pods that
    # failed (their tracking finalizer goes once counted, and then so do they).
    job_backoff: dict[str, BackoffRecord] = {}
    # ``Job/cluster/namespace/name`` -> one more than the highest pod ordinal seen on its pods:
    # where the next pod's ordinal (and so its name) starts.
    pod_ordinals: dict[str, int] = {}
    # ``Job/cluster/namespace/name`` -> when kbatchd last decided a write of its status: where
    # the batch window of its next counters-only write starts (`job.status.batched_until`).
    job_status_written: dict[str, int] = {}
    # ``cluster/namespace/podgroup`` -> keys of the pods naming it in spec.schedulingGroup;
    # cluster -> (-priority, creation time, key) of its PodGroups waiting for room, highest
    # priority then oldest first (both kept by `gang.projection`; older snapshots kept an
    # oldest-first ``gang_queue``, which is ignored: the queue is rebuilt from the groups).
    group_members: dict[str, set[str]] = {}
    # ``cluster/namespace/podgroup`` -> scheduler name -> how many of its member pods name
    # that scheduler (kept by `gang.projection`; rebuilt for older snapshots).
    group_schedulers: dict[str, dict[str, int]] = {}
    waiting_gangs: dict[str, list[tuple[int, int, str]]] = {}
    # node key -> keys of the pending pods nominated to it (``status.nominatedNodeName``),
    # whose room the gang scheduler keeps for them (kept by `gang.projection`).
    nominated: dict[str, set[str]] = {}
    # ``cluster/namespace/workload`` -> keys of the PodGroups made from it (their
    # spec.podGroupTemplateRef), kept by `gang.projection`; rebuilt for older snapshots.
    workload_groups: dict[str, set[str]] = {}
    # ``cluster/namespace/podgroup`` -> its admission while not yet seen whole (`Admission`,
    # kept by `gang.projection`).
    admissions: dict[str, Admission] = {}
    # The manager's workload ref -> its cross-cluster preemption under way (`Claim`, kept by
    # `multicluster.projection`).
    claims: dict[str, Claim] = {}
    # The manager's workload ref -> the worker it runs in, from the decision that chose it
    # (kept by `multicluster.projection`).
    placed: dict[str, str] = {}
    # The manager's workload ref -> victim pod key -> the worker's refusal to evict it, until
    # the workload runs somewhere or is deleted (kept by `multicluster.projection`).
    refusals: dict[str, dict[str, Refusal]] = {}

    def table(self, kind: str) -> dict[str, KObject]:
        """The objects of one kind, keyed by ``cluster/namespace/name``."""
        return getattr(self, TABLES[kind])  # type: ignore[no-any-return]

    def get(self, ref: str) -> KObject | None:
        """An object by its ref, ``Kind/cluster/namespace/name``."""
        kind, _, key = ref.partition("/")
        if kind not in TABLES:
            return None
        return self.table(kind).get(key)

    def pods_of(self, controller_ref: str) -> list[Pod]:
        """The pods whose controller reference names `controller_ref`, sorted by key."""
        keys = self.children.get(controller_ref)
        if not keys:
            return []
        pods = self.pods
        return [pods[key] for key in sorted(keys)]

    def counts(self) -> dict[str, int]:
        return {kind: len(self.table(kind)) for kind in TABLES}


TABLES: Final = {
    "Pod": "pods",
    "Node": "nodes",
    "Job": "jobs",
    "JobSet": "jobsets",
    "Workload": "workloads",
    "PodGroup": "podgroups",
    "CompositePodGroup": "compositepodgroups",
    "PriorityClass": "priorityclasses",
    "PersistentVolumeClaim": "pvcs",
    "Service": "services",
}
# The kinds of TABLES that have no namespace (their key is ``cluster//name``).
CLUSTER_SCOPED: Final = frozenset({"Node", "PriorityClass"})


def empty_state(levels: tuple[str, ...] = DEFAULT_LEVELS) -> State:
    return State(topology=Topology(levels=levels))


# A snapshot encodes every object of the state (a pod in about 2.7 µs, its memory cold), so a
# large state waits for more events between snapshots: at least this many for each object it
# holds. Snapshots then take a bounded share of the daemon's work whatever the size of the
# cluster; the price is a restart's tail of up to that many events, folded one by one.
SNAPSHOT_EVENTS_PER_OBJECT: Final = 2


def snapshot_due(state: State, since: int, every: int) -> bool:
    """Whether a snapshot is due `since` events after the newest one: no sooner than `every`
    events (``[daemon] snapshot_every``), nor than `SNAPSHOT_EVENTS_PER_OBJECT` events for
    each object the state holds."""
    if since < every:
        return False
    return since >= SNAPSHOT_EVENTS_PER_OBJECT * sum(state.counts().values())


_STATE_ENCODER: Final = msgspec.msgpack.Encoder()
_STATE_DECODER: Final = msgspec.msgpack.Decoder(State)


def encode_state(state: State) -> bytes:
    """A snapshot body."""
    return _STATE_ENCODER.encode(state)


def decode_state(body: bytes) -> State:
    """State from a snapshot body, older snapshots brought to the current representation."""
    state = _STATE_DECODER.decode(body)
    state.topology.upgrade()
    return state
