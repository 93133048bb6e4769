"""Properties of `fold` over random but realistic event streams.

A small universe (1–2 clusters, a few nodes, pods, Jobs and other objects) is driven through
the changes a cluster really makes: nodes join, flip Ready, get cordoned, relabelled, resized,
drained and deleted and re-added; pods are created (bound or not), bound once, move through
their phases (a terminal phase is final), get a deletion timestamp, are deleted and recreated
under the same name; Job pods may carry kbatchd's tracking finalizer (and lose it) and a pod
ordinal, and Jobs may be the pods' controllers, so the per-Job records are exercised. Ticks,
lists, decisions with intents and their (sometimes duplicate or stray) outcomes are
interleaved, with producer clocks that may run slightly behind.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from events.fold import fold, fold_all
from events.intents import Bind, Create, Delete, Intent, Patch
from events.objects import (
    JOB_TRACKING_FINALIZER,
    POD_ORDINAL_ANNOTATION,
    TERMINAL_PHASES,
    Job,
    JobSet,
    KObject,
    Node,
    OwnerRef,
    PersistentVolumeClaim,
    Pod,
    PodGroup,
    Workload,
)
from events.schema import (
    Decided,
    Event,
    Observed,
    Outcome,
    Resynced,
    Started,
    Tick,
    decode_event,
    encode_event,
)
from events.state import State, decode_state, empty_state, encode_state
from events.topology import DEFAULT_LEVELS
from tests.events.builders import BLOCK, GPU, HOST, RACK

Amounts = dict[str, int]
Stream = tuple[tuple[str, ...], list[Event]]  # topology levels, events (seq = index + 1)

CLUSTERS = ("c1", "c2")
NODE_NAMES = ("n0", "n1", "n2")
POD_NAMES = ("p0", "p1", "p2", "p3", "p4", "p5")
OWNER_NAMES = ("j0", "j1")
GROUP_NAMES = ("g0", "g1")
Generic = Job | JobSet | Workload | PodGroup | PersistentVolumeClaim
GENERIC_KINDS: tuple[type[Generic], ...] = (Job, JobSet, Workload, PodGroup, PersistentVolumeClaim)
LEVEL_CHOICES = (DEFAULT_LEVELS, (RACK, HOST), (BLOCK, RACK))

# A missing label (None) is drawn now and then; it keeps the node out of the tree.
BLOCKS = ("b0", "b0", "b1", "b1", "b0", "b1", "b0", "b1", None)
RACKS = ("r0", "r0", "r1", "r1", "r0", "r1", "r0", "r1", None)
ALLOCATABLES: tuple[Amounts, ...] = (
    {"cpu": 4000, "memory": 16 << 30, "pods": 4},
    {"cpu": 8000, "memory": 64 << 30, GPU: 8, "pods": 10},
    {"cpu": 2000, GPU: 0, "pods": 2},
    {},
)
REQUESTS: tuple[Amounts, ...] = (
    {},
    {"cpu": 500},
    {"cpu": 1000, "memory": 1 << 30},
    {"cpu": 2000, GPU: 4},
    {GPU: 8},
    {"cpu": 500, GPU: 0},  # a zero request, as a hand-built Pod may carry
)
PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")
ACTIONS = (
    ("node", 5),
    ("node_delete", 1),
    ("pod", 8),
    ("pod_delete", 2),
    ("generic", 2),
    ("tick", 2),
    ("resync", 1),
    ("decide", 2),
    ("outcome", 3),
    ("start", 1),
)
ACTION_TABLE = tuple(name for name, weight in ACTIONS for _ in range(weight))


@dataclass
class World:
    """What the simulated clusters hold, so that the next change is a realistic one."""

    clock: int = 1_767_225_600_000
    rv: int = 0
    incarnation: int = 0
    nodes: dict[tuple[str, str], Node] = field(default_factory=dict)
    pods: dict[tuple[str, str], Pod] = field(default_factory=dict)
    generic: dict[tuple[str, str, str], Generic] = field(default_factory=dict)
    decisions: list[tuple[int, int]] = field(default_factory=list)  # (seq, number of intents)
    events: list[Event] = field(default_factory=list)

    def next_rv(self) -> str:
        self.rv += 1
        return str(self.rv)

    def next_uid(self, what: str) -> str:
        self.incarnation += 1
        return f"{what}-{self.incarnation}"


def _node(draw: st.DrawFn, world: World, cluster: str, name: str) -> Observed:
    old = world.nodes.get((cluster, name))
    labels = {"kubernetes.io/os": "linux"}
    for key, values in ((BLOCK, BLOCKS), (RACK, RACKS)):
        value = draw(st.sampled_from(values))
        if value is not None:
            labels[key] = value
    if draw(st.integers(0, 9)):  # the hostname label is nearly always there
        labels[HOST] = name
    deleting = old.deletion_ts if old is not None else None
    if deleting is None and draw(st.integers(0, 14)) == 0:
        deleting = world.clock
    node = Node(
        name=name,
        uid=old.uid if old is not None else world.next_uid("node"),
        rv=world.next_rv(),
        deletion_ts=deleting,
        labels=labels,
        allocatable=dict(draw(st.sampled_from(ALLOCATABLES))),
        ready=draw(st.integers(0, 5)) > 0,
        unschedulable=draw(st.integers(0, 7)) == 0,
    )
    world.nodes[cluster, name] = node
    return Observed(0, cluster, "ADDED" if old is None else "MODIFIED", node)


def _pod(draw: st.DrawFn, world: World, cluster: str, name: str) -> Observed:
    old = world.pods.get((cluster, name))
    bind = st.sampled_from(("", *NODE_NAMES))
    if old is None:
        owner = draw(st.sampled_from((None, *OWNER_NAMES)))
        pod = Pod(
            name=name,
            namespace="ns",
            uid=world.next_uid("pod"),
            rv=world.next_rv(),
            owners=()
            if owner is None
            else (OwnerRef("Job", owner, f"uid-{owner}", draw(st.integers(0, 3)) > 0),),
            node_name=draw(bind),
            pod_group=draw(st.sampled_from(("", *GROUP_NAMES))),
            requests=dict(draw(st.sampled_from(REQUESTS))),
            finalizers=(JOB_TRACKING_FINALIZER,) if draw(st.integers(0, 3)) else (),
            annotations=draw(
                st.sampled_from(({}, {POD_ORDINAL_ANNOTATION: "3"}, {POD_ORDINAL_ANNOTATION: "0"}))
            ),
        )
        world.pods[cluster, name] = pod
        return Observed(0, cluster, "ADDED", pod)
    # A pod is bound at most once, and a terminal phase is final.
    node_name = old.node_name or draw(bind)
    phase = old.phase
    if phase not in TERMINAL_PHASES:
        phase = draw(st.sampled_from(PHASES if node_name else ("Pending", "Failed")))
    requests = old.requests
    if draw(st.integers(0, 7)) == 0:  # in-place resize
        requests = dict(draw(st.sampled_from(REQUESTS)))
    deleting = old.deletion_ts
    if deleting is None and draw(st.integers(0, 9)) == 0:
        deleting = world.clock
    finalizers = old.finalizers
    if finalizers and draw(st.integers(0, 4)) == 0:  # counted, or released
        finalizers = ()
    pod = replace(
        old,
        rv=world.next_rv(),
        node_name=node_name,
        phase=phase,
        requests=requests,
        deletion_ts=deleting,
        finalizers=finalizers,
        conditions={"Ready": "True" if phase == "Running" else "False"},
        finished=world.clock if phase in TERMINAL_PHASES and old.finished is None else old.finished,
    )
    world.pods[cluster, name] = pod
    return Observed(0, cluster, "MODIFIED", pod)


def _job(draw: st.DrawFn, world: World, cluster: str, name: str) -> Observed:
    spec: dict[str, object] = {"parallelism": 2}
    if draw(st.booleans()):
        spec["podReplacementPolicy"] = draw(st.sampled_from(("Failed", "TerminatingOrFailed")))
    job = Job(name=name, namespace="ns", uid=f"uid-{name}", rv=world.next_rv(), spec=spec)
    world.generic[cluster, "Job", name] = job
    return Observed(0, cluster, "ADDED", job)


def _generic(draw: st.DrawFn, world: World, cluster: str) -> Observed:
    # Jobs twice as often as each other kind, mostly named as the pods' owners.
    cls = draw(st.sampled_from((Job, *GENERIC_KINDS)))
    names = OWNER_NAMES if cls is Job and draw(st.integers(0, 3)) else OWNER_NAMES + GROUP_NAMES
    name = draw(st.sampled_from(names))
    key = (cluster, cls.__name__, name)
    old = world.generic.get(key)
    if old is not None and draw(st.integers(0, 3)) == 0:
        del world.generic[key]
        return Observed(0, cluster, "DELETED", replace(old, rv=world.next_rv()))
    uid = old.uid if old is not None else world.next_uid(cls.__name__)
    if old is None and cls is Job and draw(st.integers(0, 3)):
        uid = f"uid-{name}"  # the controller the pods name
    spec: dict[str, object] = {
        "suspend": draw(st.booleans()),
        "parallelism": draw(st.integers(0, 4)),
    }
    if draw(st.booleans()):
        spec["podReplacementPolicy"] = draw(st.sampled_from(("Failed", "TerminatingOrFailed")))
    obj = cls(
        name=name,
        namespace="ns",
        uid=uid,
        rv=world.next_rv(),
        spec=spec,
        status={"active": draw(st.integers(0, 4))},
    )
    world.generic[key] = obj
    return Observed(0, cluster, "ADDED" if old is None else "MODIFIED", obj)


@st.composite
def intents(draw: st.DrawFn, cluster: str) -> Intent:
    op = draw(st.sampled_from(("create", "patch", "delete", "bind")))
    name = draw(st.sampled_from(POD_NAMES))
    if op == "create":
        return Create(cluster, "Pod", "ns", name, body={"metadata": {"name": name}, "n": [1, 2]})
    if op == "patch":
        return Patch(
            cluster,
            "Job",
            "ns",
            draw(st.sampled_from(OWNER_NAMES)),
            patch={"spec": {"suspend": draw(st.booleans())}},
            precondition_rv=str(draw(st.integers(0, 50))),
        )
    if op == "delete":
        return Delete(cluster, "Pod", "ns", name, precondition_uid=f"pod-{draw(st.integers(0, 9))}")
    return Bind(cluster, "Pod", "ns", name, node=draw(st.sampled_from(NODE_NAMES)), uid="u")


@st.composite
def streams(draw: st.DrawFn) -> Stream:
    """Topology levels and a realistic event stream (seq i+1 for event i)."""
    levels = draw(st.sampled_from(LEVEL_CHOICES))
    clusters = CLUSTERS[: draw(st.integers(1, 2))]
    world = World()
    if draw(st.booleans()):
        # The Jobs the pods name as controller exist from the start (else they may come later
        # or never), so that their back-off records are folded from the pods' changes.
        for name in OWNER_NAMES:
            world.events.append(_job(draw, world, clusters[0], name))
    for _ in range(draw(st.integers(0, 40))):
        world.clock += draw(st.integers(0, 2_000))
        # Producers stamp `at` with their own clocks, which may lag a little.
        at = world.clock - draw(st.sampled_from((0, 0, 0, 50, 3_000)))
        cluster = draw(st.sampled_from(clusters))
        action = draw(st.sampled_from(ACTION_TABLE))
        event: Event | None = None
        if action == "node":
            event = _node(draw, world, cluster, draw(st.sampled_from(NODE_NAMES)))
        elif action == "node_delete":
            name = draw(st.sampled_from(NODE_NAMES))
            gone = world.nodes.pop((cluster, name), None)
            if gone is not None:
                event = Observed(0, cluster, "DELETED", replace(gone, rv=world.next_rv()))
        elif action == "pod":
            event = _pod(draw, world, cluster, draw(st.sampled_from(POD_NAMES)))
        elif action == "pod_delete":
            name = draw(st.sampled_from(POD_NAMES))
            gone_pod = world.pods.pop((cluster, name), None)
            if gone_pod is not None:
                event = Observed(0, cluster, "DELETED", replace(gone_pod, rv=world.next_rv()))
        elif action == "generic":
            event = _generic(draw, world, cluster)
        elif action == "tick":
            event = Tick(at)
        elif action == "start":  # a daemon (re)started: the fold only moves the clock
            event = Started(at, "0.1.0", "0123456789abcdef", {"topology": {"levels": []}})
        elif action == "resync":
            kind = draw(st.sampled_from(("Pod", "Node", "Job")))
            rv = draw(st.sampled_from((str(world.rv), "")))
            event = Resynced(at, cluster, kind, rv, draw(st.sampled_from(("listed", "relisted"))))
        elif action == "decide":
            chosen = draw(st.lists(intents(cluster), max_size=3))
            key = f"Job/{cluster}/ns/{draw(st.sampled_from(OWNER_NAMES))}"
            event = Decided(at, "gang", key, "because", tuple(chosen))
            if chosen:
                world.decisions.append((len(world.events) + 1, len(chosen)))
        elif world.decisions and draw(st.integers(0, 7)) != 0:
            seq, count = draw(st.sampled_from(world.decisions))
            index = draw(st.integers(0, count))  # `count` itself is out of range: ignored
            event = Outcome(
                at, seq, index, draw(st.booleans()), code=draw(st.sampled_from((0, 409)))
            )
        else:
            event = Outcome(at, 10**6, 0, True)  # a decision the log never had
        if event is not None:
            if isinstance(event, Observed):
                event = replace(event, at=at)
            world.events.append(event)
    return levels, world.events


def fold_from_empty(levels: tuple[str, ...], events: list[Event]) -> tuple[State, set[str]]:
    dirty: set[str] = set()
    state = fold_all(empty_state(levels), list(enumerate(events, start=1)), dirty)
    return state, dirty


def expected_inflight(events: list[Event]) -> dict[int, list[int]]:
    """Decisions with intents, minus the (decision, index) pairs some outcome reported."""
    done = {(e.decision, e.index) for e in events if isinstance(e, Outcome)}
    expected: dict[int, list[int]] = {}
    for seq, event in enumerate(events, start=1):
        if isinstance(event, Decided):
            pending = [i for i in range(len(event.intents)) if (seq, i) not in done]
            if pending:
                expected[seq] = pending
    return expected


def last_observed(events: list[Event]) -> dict[str, KObject | None]:
    """The newest version of every object by ref (None once deleted)."""
    last: dict[str, KObject | None] = {}
    for event in events:
        if isinstance(event, Observed):
            last[event.ref] = None if event.change == "DELETED" else event.obj
    return last


# Hypothesis's default of 100 streams per property (200 before: twice the time of the module's
# slowest tests, for streams drawn from the same strategies).
PROPERTY = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# ---------------------------------------------------------------------------------------------
# 1. A snapshot anywhere in the stream changes nothing


@PROPERTY
@given(streams())
def test_fold_from_snapshot_equals_fold_from_empty(stream: Stream) -> None:
    levels, events = stream
    stored = [decode_event(encode_event(event)) for event in events]
    assert stored == events
    full, _ = fold_from_empty(levels, events)
    prefix = empty_state(levels)
    for k in range(len(events) + 1):
        if k:
            fold(prefix, k, stored[k - 1])
        resumed = decode_state(encode_state(prefix))
        assert resumed == prefix
        fold_all(resumed, list(enumerate(stored[k:], start=k + 1)))
        assert resumed == full, f"snapshot after {k} of {len(events)} events"


# ---------------------------------------------------------------------------------------------
# 2. Determinism


@PROPERTY
@given(streams())
def test_fold_is_deterministic(stream: Stream) -> None:
    levels, events = stream
    first, first_dirty = fold_from_empty(levels, events)
    second, second_dirty = fold_from_empty(levels, events)
    assert first == second
    assert encode_state(first) == encode_state(second)
    assert first_dirty == second_dirty
    assert first.seq == len(events)
    assert first.now == max((event.at for event in events), default=0)
    # The tables hold the last observed version of every object; nothing else.
    last = last_observed(events)
    for ref, obj in last.items():
        assert first.get(ref) is obj
    assert sum(first.counts().values()) == sum(obj is not None for obj in last.values())
    # In flight: every decision with intents, until each intent has an outcome.
    assert {seq: f.pending for seq, f in first.inflight.items()} == expected_inflight(events)
    for seq, flight in first.inflight.items():
        assert flight.decision == events[seq - 1]


# ---------------------------------------------------------------------------------------------
# 3. Incremental topology equals a from-scratch recomputation, at every step


def _add(table: dict[str, Amounts], key: str, amounts: Amounts) -> None:
    into = table.setdefault(key, {})
    for name, value in amounts.items():
        into[name] = into.get(name, 0) + value


def _canonical(table: dict[str, Amounts]) -> dict[str, Amounts]:
    cleaned = {key: {n: v for n, v in amounts.items() if v} for key, amounts in table.items()}
    return {key: amounts for key, amounts in cleaned.items() if amounts}


@dataclass
class Reference:
    paths: dict[str, tuple[str, ...]]
    capacity: dict[str, Amounts]
    used: dict[str, Amounts]
    members: dict[str, int]
    node_used: dict[str, Amounts]
    charged: set[str]


def reference_topology(state: State) -> Reference:
    """Per-domain capacity and usage from the node and pod tables alone (TAS spec 2.1–2.2):
    a node takes part when Ready, schedulable, not being deleted and labelled at every level;
    a pod bound to a node and not Succeeded/Failed uses its requests plus one `pods`."""
    levels = state.topology.levels
    paths: dict[str, tuple[str, ...]] = {}
    for key, node in state.nodes.items():
        cluster = key.split("/", 1)[0]
        values = [node.labels.get(level) for level in levels]
        if not node.ready or node.unschedulable or node.deletion_ts is not None:
            continue
        if any(value is None for value in values):
            continue
        paths[key] = tuple(
            f"{cluster}/{','.join(str(v) for v in values[: depth + 1])}"
            for depth in range(len(levels))
        )
    capacity: dict[str, Amounts] = {}
    members: dict[str, int] = {}
    for key, path in paths.items():
        for domain in path:
            _add(capacity, domain, state.nodes[key].allocatable)
            members[domain] = members.get(domain, 0) + 1
    node_used: dict[str, Amounts] = {}
    charged: set[str] = set()
    for key, pod in state.pods.items():
        if not pod.node_name or pod.phase in ("Succeeded", "Failed"):
            continue
        charged.add(key)
        node_key = f"{key.split('/', 1)[0]}//{pod.node_name}"
        _add(node_used, node_key, {**pod.requests})
        _add(node_used, node_key, {"pods": 1})
    used: dict[str, Amounts] = {}
    for node_key, amounts in node_used.items():
        for domain in paths.get(node_key, ()):
            _add(used, domain, amounts)
    return Reference(
        paths, _canonical(capacity), _canonical(used), members, _canonical(node_used), charged
    )


def assert_matches_reference(state: State) -> None:
    topology = state.topology
    expected = reference_topology(state)
    assert topology.paths == expected.paths
    assert topology.node_capacity == {key: state.nodes[key].allocatable for key in expected.paths}
    assert topology.capacity == expected.capacity
    assert topology.domain_usage() == expected.used
    leaves: dict[str, set[str]] = {}
    for node_key, path in expected.paths.items():
        leaves.setdefault(path[-1], set()).add(node_key)
    assert topology.leaf_nodes == leaves
    assert not set(topology.used) & set(leaves)  # a leaf's usage is only its nodes' node_used
    assert topology.members == expected.members
    assert topology.node_used == expected.node_used
    assert {key for keys in topology.node_pods.values() for key in keys} == expected.charged
    for key in expected.charged:
        pod = state.pods[key]
        assert key in topology.node_pods[f"{key.split('/', 1)[0]}//{pod.node_name}"]
    # Nothing is left behind as a zero: equal usage has exactly one representation.
    for table in (topology.capacity, topology.used, topology.node_used):
        for amounts in table.values():
            assert amounts
            assert 0 not in amounts.values()
    assert 0 not in topology.members.values()


@PROPERTY
@given(streams())
def test_topology_equals_recomputation(stream: Stream) -> None:
    levels, events = stream
    state = empty_state(levels)
    for seq, event in enumerate(events, start=1):
        fold(state, seq, event)
        assert_matches_reference(state)
    # Then every node (usage still charged to it) and every pod goes: nothing is left over.
    seq = len(events)
    remaining: list[tuple[str, Node | Pod]] = [*state.nodes.items(), *state.pods.items()]
    for key, obj in remaining:
        seq += 1
        fold(state, seq, Observed(0, key.split("/", 1)[0], "DELETED", obj))
        assert_matches_reference(state)
    topology = state.topology
    assert (topology.paths, topology.node_capacity, topology.node_used) == ({}, {}, {})
    assert (topology.capacity, topology.used, topology.members) == ({}, {}, {})
    assert (topology.node_pods, topology.leaf_nodes) == ({}, {})
