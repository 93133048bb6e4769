"""`fold`: where each event lands in the state, and which refs it makes dirty."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from events import fold as fold_module
from events.fold import fold, fold_all
from events.intents import Bind, Create, Delete, Patch
from events.objects import (
    Job,
    JobSet,
    KObject,
    OwnerRef,
    PersistentVolumeClaim,
    Service,
    Workload,
)
from events.schema import Decided, Event, Outcome, Resynced, Tick
from events.state import TABLES, InFlight, State, empty_state, encode_state
from tests.events.builders import (
    job_owner,
    make_job,
    make_node,
    make_pod,
    make_podgroup,
    observed,
)

OBJECTS: list[tuple[KObject, str, str]] = [
    (make_pod("p1", namespace="team-a"), "pods", "c1/team-a/p1"),
    (make_node("n1"), "nodes", "c1//n1"),
    (make_job("j1"), "jobs", "c1/ns/j1"),
    (JobSet(name="js", namespace="ns", rv="3", spec={"suspend": True}), "jobsets", "c1/ns/js"),
    (Workload(name="wl", namespace="ns", rv="4"), "workloads", "c1/ns/wl"),
    (make_podgroup("pg"), "podgroups", "c1/ns/pg"),
    (PersistentVolumeClaim(name="data", namespace="ns", rv="5"), "pvcs", "c1/ns/data"),
    (Service(name="js", namespace="ns", rv="6"), "services", "c1/ns/js"),
]
OBJECT_IDS = [type(obj).__name__ for obj, _, _ in OBJECTS]


def run(events: list[Event], state: State | None = None, first_seq: int = 1) -> State:
    return fold_all(
        empty_state() if state is None else state,
        list(enumerate(events, start=first_seq)),
    )


def dirty_of(events: list[Event], state: State | None = None) -> set[str]:
    """The refs made dirty by the last event, after folding the others."""
    state = run(events[:-1], state)
    dirty: set[str] = set()
    fold(state, len(events), events[-1], dirty)
    return dirty


# ---------------------------------------------------------------------------------------------
# Observed


@pytest.mark.parametrize(("obj", "table", "key"), OBJECTS, ids=OBJECT_IDS)
def test_added_lands_in_its_table(obj: KObject, table: str, key: str) -> None:
    state = run([observed(obj)])
    assert getattr(state, table) == {key: obj}
    kind = type(obj).__name__
    assert TABLES[kind] == table
    assert state.get(f"{kind}/{key}") is obj
    assert state.counts() == {k: int(k == kind) for k in TABLES}
    others = [name for name in TABLES.values() if name != table]
    assert all(getattr(state, name) == {} for name in others)


@pytest.mark.parametrize(("obj", "table", "key"), OBJECTS, ids=OBJECT_IDS)
def test_modified_replaces(obj: KObject, table: str, key: str) -> None:
    newer = replace(obj, rv="100", labels={"changed": "yes"})
    state = run([observed(obj), observed(newer, change="MODIFIED")])
    assert getattr(state, table) == {key: newer}


@pytest.mark.parametrize(("obj", "table", "key"), OBJECTS, ids=OBJECT_IDS)
def test_deleted_removes(obj: KObject, table: str, key: str) -> None:
    other = replace(obj, name="other")
    state = run([observed(obj), observed(other), observed(obj, change="DELETED")])
    assert list(getattr(state, table)) == [key.rsplit("/", 1)[0] + "/other"]


@pytest.mark.parametrize(("obj", "table", "key"), OBJECTS, ids=OBJECT_IDS)
def test_modified_without_added_inserts(obj: KObject, table: str, key: str) -> None:
    assert getattr(run([observed(obj, change="MODIFIED")]), table) == {key: obj}


def test_deleted_unknown_object_is_a_no_op_apart_from_bookkeeping() -> None:
    state = run([observed(make_pod("ghost", node="n1", rv="9"), change="DELETED")])
    assert (state.pods, state.topology.node_pods, state.topology.node_used) == ({}, {}, {})
    assert state.watermarks == {}


@pytest.mark.parametrize(
    ("events", "table", "keys"),
    [
        pytest.param(
            [observed(make_pod("p"), cluster="c1"), observed(make_pod("p"), cluster="c2")],
            "pods",
            ["c1/ns/p", "c2/ns/p"],
            id="same-pod-two-clusters",
        ),
        pytest.param(
            [observed(make_pod("p", namespace="a")), observed(make_pod("p", namespace="b"))],
            "pods",
            ["c1/a/p", "c1/b/p"],
            id="same-name-two-namespaces",
        ),
        pytest.param(
            [observed(make_node("n"), cluster="x"), observed(make_node("n"), cluster="y")],
            "nodes",
            ["x//n", "y//n"],
            id="same-node-two-clusters",
        ),
        pytest.param(
            [
                observed(make_pod("p"), cluster="c1"),
                observed(make_pod("p"), cluster="c2"),
                observed(make_pod("p"), cluster="c1", change="DELETED"),
            ],
            "pods",
            ["c2/ns/p"],
            id="delete-in-one-cluster-only",
        ),
    ],
)
def test_keys_are_cluster_namespace_name(events: list[Event], table: str, keys: list[str]) -> None:
    assert sorted(getattr(run(events), table)) == keys


@pytest.mark.parametrize(
    ("events", "watermarks"),
    [
        pytest.param([], {}, id="none"),
        pytest.param(
            [
                observed(make_pod("p1", rv="5")),
                observed(make_node("n1", rv="7")),
                observed(make_pod("p2", rv="9"), cluster="c2"),
                observed(make_pod("p1", rv="11"), change="DELETED"),
            ],
            {},
            id="watch-events-leave-marks-alone",
        ),
        pytest.param(
            [
                Resynced(at=0, cluster="c1", kind="Job", resource_version="5"),
                Resynced(at=0, cluster="c2", kind="Job", resource_version="8"),
                Resynced(at=0, cluster="c1", kind="Job", resource_version=""),
            ],
            {"c1/Job": "5", "c2/Job": "8"},
            id="per-cluster-and-kind-empty-rv-keeps-mark",
        ),
        pytest.param(
            [
                observed(make_pod("p1", rv="5")),
                Resynced(at=0, cluster="c1", kind="Pod", resource_version="20"),
                Resynced(at=0, cluster="c1", kind="Node", resource_version=""),
            ],
            {"c1/Pod": "20"},
            id="resynced-sets-mark",
        ),
    ],
)
def test_watermarks(events: list[Event], watermarks: dict[str, str]) -> None:
    assert run(events).watermarks == watermarks


@pytest.mark.parametrize(
    ("events", "synced"),
    [
        pytest.param(
            [Resynced(at=0, cluster="c1", kind="Pod", resource_version="1")],
            {"c1/Pod": 1},
            id="one",
        ),
        pytest.param(
            [
                Resynced(at=0, cluster="c1", kind="Pod", resource_version="1"),
                Tick(at=0),
                Resynced(at=0, cluster="c2", kind="Pod", resource_version="3"),
                Resynced(at=0, cluster="c1", kind="Pod", resource_version="8", reason="relisted"),
            ],
            {"c1/Pod": 4, "c2/Pod": 3},
            id="newest-list-wins",
        ),
    ],
)
def test_resynced_records_seq(events: list[Event], synced: dict[str, int]) -> None:
    assert run(events).synced == synced


def _listed(kind: str, api_version: str, cluster: str = "c1") -> Resynced:
    return Resynced(at=0, cluster=cluster, kind=kind, resource_version="1", api_version=api_version)


@pytest.mark.parametrize(
    ("events", "served"),
    [
        pytest.param(
            [Resynced(at=0, cluster="c1", kind="Pod", resource_version="1")],
            {},
            id="a-list-from-an-older-log-says-nothing",
        ),
        pytest.param(
            [
                _listed("PodGroup", "scheduling.k8s.io/v1alpha2"),
                _listed("PodGroup", "scheduling.k8s.io/v1beta1", cluster="c2"),
            ],
            {
                "c1/PodGroup": "scheduling.k8s.io/v1alpha2",
                "c2/PodGroup": "scheduling.k8s.io/v1beta1",
            },
            id="per-cluster",
        ),
        pytest.param(
            [
                _listed("PodGroup", "scheduling.k8s.io/v1alpha2"),
                _listed("PodGroup", "scheduling.k8s.io/v1beta1"),
            ],
            {"c1/PodGroup": "scheduling.k8s.io/v1beta1"},
            id="an-upgraded-cluster-serves-the-newer-version",
        ),
        pytest.param(
            [
                _listed("CompositePodGroup", "scheduling.k8s.io/v1alpha3"),
                _listed("CompositePodGroup", ""),
            ],
            {},
            id="no-longer-served",
        ),
    ],
)
def test_resynced_records_the_served_version(events: list[Event], served: dict[str, str]) -> None:
    assert run(events).served == served


# ---------------------------------------------------------------------------------------------
# Time and seq


@pytest.mark.parametrize(
    ("ats", "nows"),
    [
        pytest.param([100, 200, 300], [100, 200, 300], id="forward"),
        pytest.param([100, 50, 300], [100, 100, 300], id="never-backwards"),
        pytest.param([0, 0], [0, 0], id="zero"),
        pytest.param([500, 500, 499], [500, 500, 500], id="equal-then-earlier"),
    ],
)
def test_now(ats: list[int], nows: list[int]) -> None:
    state = empty_state()
    seen = []
    for seq, at in enumerate(ats, start=1):
        event: Event = Tick(at=at) if seq % 2 else observed(make_job("j"), at=at)
        seen.append(fold(state, seq, event).now)
    assert seen == nows


@pytest.mark.parametrize(
    "event",
    [
        pytest.param(Tick(at=1), id="tick"),
        pytest.param(observed(make_pod("p")), id="observed"),
        pytest.param(Decided(at=1, reconciler="r", key="Job/c1/ns/j", reason="x"), id="decided"),
        pytest.param(Outcome(at=1, decision=999, index=0, ok=True), id="outcome"),
        pytest.param(Resynced(at=1, cluster="c1", kind="Pod", resource_version="1"), id="resync"),
    ],
)
def test_seq_follows_the_seq_given(event: Event) -> None:
    state = empty_state()
    assert fold(state, 41, event).seq == 41
    assert fold(state, 42, Tick(at=0)).seq == 42


def test_fold_updates_in_place_and_fold_all_matches_fold() -> None:
    events: list[Event] = [observed(make_node("n1")), observed(make_pod("p", node="n1")), Tick(9)]
    state = empty_state()
    assert fold(state, 1, events[0]) is state
    one_by_one = empty_state()
    for seq, event in enumerate(events, start=1):
        fold(one_by_one, seq, event)
    assert run(events) == one_by_one


def test_fold_drives_the_topology() -> None:
    state = run(
        [
            observed(make_node("n1", allocatable={"cpu": 4000, "pods": 10})),
            observed(make_pod("p", node="n1", requests={"cpu": 1500})),
        ]
    )
    assert state.topology.node_used == {"c1//n1": {"cpu": 1500, "pods": 1}}
    assert state.topology.free("c1/b1,r1,n1") == {"cpu": 2500, "pods": 9}
    run([observed(make_node("n1"), change="DELETED")], state, first_seq=3)
    assert state.topology.capacity == {}
    run([observed(make_pod("p", node="n1"), change="DELETED")], state, first_seq=4)
    assert (state.topology.used, state.topology.node_used, state.topology.node_pods) == ({}, {}, {})


# ---------------------------------------------------------------------------------------------
# Decisions and outcomes


INTENTS = (
    Create("c1", "Pod", "ns", "p-0", body={"metadata": {"name": "p-0"}}),
    Patch("c1", "Job", "ns", "j", patch={"spec": {"suspend": False}}, precondition_rv="7"),
    Delete("c1", "Pod", "ns", "p-1", precondition_uid="u-1", grace_seconds=0),
    Bind("c1", "Pod", "ns", "p-2", node="n1", uid="u-2"),
)
DECIDED = Decided(at=10, reconciler="gang", key="Job/c1/ns/j", reason="admit", intents=INTENTS)


def outcome(decision: int, index: int, ok: bool = True) -> Outcome:
    return Outcome(at=20, decision=decision, index=index, ok=ok)


def test_decided_with_intents_is_in_flight() -> None:
    state = run([Tick(at=1), DECIDED])
    assert state.inflight == {2: InFlight(DECIDED, [0, 1, 2, 3])}


def test_decided_without_intents_is_not_in_flight() -> None:
    state = run([Decided(at=1, reconciler="gang", key="Job/c1/ns/j", reason="wait")])
    assert state.inflight == {}
    assert state.now == 1


@pytest.mark.parametrize(
    ("outcomes", "pending"),
    [
        pytest.param([], [0, 1, 2, 3], id="none"),
        pytest.param([outcome(1, 2)], [0, 1, 3], id="one"),
        pytest.param([outcome(1, 0, ok=False), outcome(1, 3)], [1, 2], id="failure-counts-too"),
        pytest.param([outcome(1, 1), outcome(1, 1)], [0, 2, 3], id="duplicate-ignored"),
        pytest.param([outcome(1, 9)], [0, 1, 2, 3], id="index-out-of-range-ignored"),
        pytest.param([outcome(77, 0)], [0, 1, 2, 3], id="unknown-decision-ignored"),
        pytest.param([outcome(1, i) for i in (3, 1, 0, 2)], None, id="all-done-any-order"),
    ],
)
def test_outcomes(outcomes: list[Event], pending: list[int] | None) -> None:
    state = run([DECIDED, *outcomes])
    if pending is None:
        assert state.inflight == {}
    else:
        assert state.inflight == {1: InFlight(DECIDED, pending)}


ELSEWHERE = replace(DECIDED, intents=(Delete("c2", "Pod", "ns", "v", precondition_uid="u"),))


def unanswered(decision: int, index: int, unconfirmed: bool = False) -> Outcome:
    message = "gave up after 8 attempts: Cannot connect"
    return Outcome(
        at=20, decision=decision, index=index, ok=False, message=message, unconfirmed=unconfirmed
    )


@pytest.mark.parametrize(
    ("events", "unreachable"),
    [
        pytest.param([DECIDED, unanswered(1, 0)], {"c1"}, id="an-act-unanswered"),
        pytest.param(
            [DECIDED, Outcome(at=20, decision=1, index=0, ok=False, code=403)],
            set(),
            id="an-answer-is-no-silence",
        ),
        pytest.param([DECIDED, unanswered(1, 0, unconfirmed=True)], set(), id="unconfirmed"),
        pytest.param(
            [DECIDED, unanswered(1, 0), observed(make_pod("p"))], set(), id="heard-from-again"
        ),
        pytest.param(
            [
                DECIDED,
                unanswered(1, 0),
                Resynced(at=30, cluster="c1", kind="Pod", resource_version="5"),
            ],
            set(),
            id="listed-again",
        ),
        pytest.param(
            [ELSEWHERE, unanswered(1, 0), observed(make_pod("p"))], {"c2"}, id="per-cluster"
        ),
    ],
)
def test_a_cluster_is_unreachable_from_an_unanswered_act_until_heard_from(
    events: list[Event], unreachable: set[str]
) -> None:
    assert set(run(events).unreachable) == unreachable


def test_outcome_for_unknown_decision_changes_nothing_but_time() -> None:
    state = run([observed(make_pod("p")), DECIDED])
    before = encode_state(replace(state, seq=0, now=0))
    fold(state, 3, Outcome(at=99, decision=123, index=0, ok=True))
    assert encode_state(replace(state, seq=0, now=0)) == before
    assert (state.seq, state.now) == (3, 99)


def test_outcome_after_completion_is_ignored() -> None:
    single = Decided(at=1, reconciler="r", key="Pod/c1/ns/p", reason="x", intents=INTENTS[:1])
    state = run([single, outcome(1, 0), outcome(1, 0)])
    assert state.inflight == {}


def test_several_decisions_in_flight() -> None:
    two = replace(DECIDED, key="Job/c1/ns/k", intents=INTENTS[:2])
    state = run([DECIDED, two, outcome(2, 0), outcome(1, 3), outcome(2, 1)])
    assert state.inflight == {1: InFlight(DECIDED, [0, 1, 2])}


# ---------------------------------------------------------------------------------------------
# Dirty refs


OWNED_POD = make_pod("p", owner=job_owner("train"), pod_group="pg-1")


@pytest.mark.parametrize(
    ("events", "dirty"),
    [
        pytest.param([observed(make_pod("p"))], {"Pod/c1/ns/p"}, id="pod"),
        pytest.param(
            [observed(make_pod("p", owner=job_owner("train")), cluster="c2")],
            {"Pod/c2/ns/p", "Job/c2/ns/train"},
            id="pod-controller-owner",
        ),
        pytest.param(
            [observed(make_pod("p", owner=job_owner("train", controller=False)))],
            {"Pod/c1/ns/p"},
            id="non-controller-owner-not-dirty",
        ),
        pytest.param(
            [observed(OWNED_POD)],
            {"Pod/c1/ns/p", "Job/c1/ns/train", "PodGroup/c1/ns/pg-1"},
            id="pod-owner-and-group",
        ),
        pytest.param(
            [observed(OWNED_POD), observed(OWNED_POD, change="DELETED")],
            {"Pod/c1/ns/p", "Job/c1/ns/train", "PodGroup/c1/ns/pg-1"},
            id="deleted-pod-dirties-owner-and-group",
        ),
        pytest.param([observed(make_node("n1"))], {"Node/c1//n1"}, id="node"),
        pytest.param(
            [
                observed(
                    Job(
                        name="child",
                        namespace="ns",
                        owners=(OwnerRef("JobSet", "js", "u", True),),
                    )
                )
            ],
            {"Job/c1/ns/child", "JobSet/c1/ns/js"},
            id="job-owned-by-jobset",
        ),
        pytest.param([observed(make_podgroup("pg"))], {"PodGroup/c1/ns/pg"}, id="podgroup"),
        pytest.param([Tick(at=5)], set(), id="tick"),
        pytest.param(
            [Resynced(at=5, cluster="c1", kind="Pod", resource_version="1")], set(), id="resync"
        ),
        pytest.param([DECIDED], set(), id="decided"),
        pytest.param([DECIDED, outcome(1, 0)], {"Job/c1/ns/j"}, id="outcome-dirties-key"),
        pytest.param([outcome(1, 0)], set(), id="outcome-unknown-decision"),
    ],
)
def test_dirty_refs(events: list[Event], dirty: set[str]) -> None:
    assert dirty_of(events) == dirty


def dirty_and_owners_of(events: list[Event]) -> tuple[set[str], set[str]]:
    state = run(events[:-1])
    dirty: set[str] = set()
    owners: set[str] = set()
    fold(state, len(events), events[-1], dirty, owners)
    return dirty, owners


# The pod DECIDED creates, as its Job's decision expects to see it.
CREATED_POD = make_pod("p-0", owner=job_owner("j"))


@pytest.mark.parametrize(
    ("events", "dirty", "owners"),
    [
        # An owner marked only because what it controls changed goes apart, to be batched...
        pytest.param(
            [observed(make_pod("p", owner=job_owner("train")))],
            {"Pod/c1/ns/p"},
            {"Job/c1/ns/train"},
            id="pod-controller-owner",
        ),
        pytest.param(
            [observed(OWNED_POD)],
            {"Pod/c1/ns/p", "PodGroup/c1/ns/pg-1"},
            {"Job/c1/ns/train"},
            id="the-group-is-not-an-owner",
        ),
        # ...but the sight of its own decision's write is decided at once.
        pytest.param(
            [DECIDED, observed(CREATED_POD)],
            {"Pod/c1/ns/p-0", "Job/c1/ns/j"},
            {"Job/c1/ns/j"},
            id="own-write-seen",
        ),
        pytest.param([DECIDED, outcome(1, 0)], {"Job/c1/ns/j"}, set(), id="outcome"),
        pytest.param([observed(make_pod("p"))], {"Pod/c1/ns/p"}, set(), id="no-owner"),
    ],
)
def test_owners_marked_apart_when_asked(
    events: list[Event], dirty: set[str], owners: set[str]
) -> None:
    assert dirty_and_owners_of(events) == (dirty, owners)


def test_dirty_accumulates_across_fold_all() -> None:
    dirty: set[str] = set()
    events: list[Event] = [observed(make_pod("a")), Tick(1), observed(make_node("n"), cluster="c9")]
    fold_all(empty_state(), list(enumerate(events, start=1)), dirty)
    assert dirty == {"Pod/c1/ns/a", "Node/c9//n"}


# ---------------------------------------------------------------------------------------------
# State helpers


@pytest.mark.parametrize(
    ("ref", "found"),
    [
        ("Pod/c1/ns/p", True),
        ("Node/c1//n1", True),
        ("Pod/c2/ns/p", False),
        ("Deployment/c1/ns/p", False),
        ("", False),
    ],
)
def test_state_get(ref: str, found: bool) -> None:
    state = run([observed(make_pod("p")), observed(make_node("n1"))])
    got = state.get(ref)
    assert (got is not None) is found
    if got is not None:
        assert f"{type(got).__name__}/c1/{got.namespace}/{got.name}" == ref


def test_empty_state_levels() -> None:
    levels = ("rack", "kubernetes.io/hostname")
    assert empty_state(levels).topology.levels == levels
    assert empty_state() == State()


def test_a_fold_before_the_controllers_are_wired_is_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Folding without the controllers' hooks would leave out every projection silently."""
    monkeypatch.setattr(fold_module, "_WIRED", fold_module._UNWIRED)
    with pytest.raises(RuntimeError, match="no controllers are wired into the fold"):
        fold(empty_state(), 1, Tick(at=1))
