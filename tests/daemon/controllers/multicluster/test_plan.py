"""The multi-cluster planner: fit first, else the lightest preemption; claims hold their
victims and room; races go by rank; claims abort on an unreachable worker, a refused
eviction or a passed deadline."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest
from msgspec.structs import replace

from daemon.controllers.gang.place import ClusterView
from daemon.controllers.gang.spec import TopologyRequest
from daemon.controllers.multicluster.plan import (
    Demand,
    abort_reason,
    choose,
    claim_of,
    collides,
    options,
    rank,
    victim_keys,
    winner,
)
from events.fold import fold
from events.state import Claim, State
from tests.daemon.controllers.gang_builders import RACK, T0, members, nodes, running
from tests.events.builders import observed

WORKERS = ("w1", "w2", "w3")
HOSTS = ("b0-r0-h0", "b0-r0-h1", "b0-r1-h0", "b0-r1-h1")  # two racks of two 8-GPU hosts
FREE = None  # a host nothing runs on


def cluster_state(workers: Mapping[str, Sequence[int | None]]) -> State:
    """Each worker's four hosts, each held by one 8-GPU pod of the priority given (FREE:
    none), named ``<worker>-<host>``."""
    state = State(now=T0)
    seq = 0
    for worker, priorities in workers.items():
        objects: list[object] = list(nodes())
        for host, priority in zip(HOSTS, priorities, strict=True):
            if priority is not None:
                objects.append(running(f"{worker}-{host}", host, 8, priority))
        for obj in objects:
            seq += 1
            fold(state, seq, observed(obj, cluster=worker))
    return state


def demand(priority: int = 100, *, preempts: bool = True, name: str = "big") -> Demand:
    """Two 8-GPU pods that must share a rack."""
    return Demand(
        key=f"Job/manager/ns/{name}",
        namespace="ns",
        name=name,
        uid=f"uid-{name}",
        priority=priority,
        created=T0,
        pods=tuple(members(name, 2, gpus=8)),
        request=TopologyRequest(required=RACK),
        preempts=preempts,
    )


def answer(
    workers: Mapping[str, Sequence[int | None]],
    wanted: Demand,
    claims: Sequence[Claim] = (),
    unreachable: Sequence[str] = (),
    *,
    logged: bool = False,
) -> tuple[str | None, set[str]]:
    """The chosen worker and the pods it would evict; `claims` decided in this pass, or with
    `logged` folded into the state."""
    state = cluster_state(workers)
    if logged:
        state.claims = {c.preemptor: c for c in claims}
    views = [ClusterView(state, w) for w in workers]
    pending = () if logged else claims
    chosen = choose(options(views, wanted, pending, unreachable))
    if chosen is None:
        return None, set()
    return chosen.cluster, {p.name for u in chosen.victims for p in u.pods}


LOW, MID, HIGH = 5, 50, 500


@pytest.mark.parametrize(
    ("workers", "wanted", "unreachable", "chosen", "victims"),
    [
        # A worker with a free rack wins over any preemption, however cheap.
        (
            {"w1": [LOW] * 4, "w2": [MID, MID, FREE, FREE], "w3": [LOW] * 4},
            demand(),
            (),
            "w2",
            set(),
        ),
        # Free room split across racks does not fit a gang that needs one rack.
        (
            {"w1": [FREE, MID, FREE, MID], "w2": [MID] * 4, "w3": [LOW, LOW, MID, MID]},
            demand(),
            (),
            "w3",
            {"w3-b0-r0-h0", "w3-b0-r0-h1"},
        ),
        # The lightest victims win; on a tie, the configured order.
        (
            {"w1": [MID] * 4, "w2": [LOW] * 4, "w3": [LOW] * 4},
            demand(),
            (),
            "w2",
            {"w2-b0-r0-h0", "w2-b0-r0-h1"},
        ),
        # Only strictly lower priorities are victims.
        (
            {"w1": [HIGH] * 4, "w2": [100] * 4, "w3": [HIGH, HIGH, MID, HIGH]},
            demand(),
            (),
            None,
            set(),
        ),
        # An unreachable worker is never chosen, however light.
        (
            {"w1": [MID] * 4, "w2": [LOW] * 4, "w3": [MID, MID, MID, LOW]},
            demand(),
            ("w2",),
            "w3",
            {"w3-b0-r1-h0", "w3-b0-r1-h1"},
        ),
        # preemptionPolicy Never: a free rack or nothing.
        (
            {"w1": [LOW] * 4, "w2": [LOW] * 4, "w3": [LOW] * 4},
            demand(preempts=False),
            (),
            None,
            set(),
        ),
        (
            {"w1": [LOW] * 4, "w2": [LOW] * 4, "w3": [FREE] * 4},
            demand(preempts=False),
            (),
            "w3",
            set(),
        ),
    ],
    ids=[
        "fit-first",
        "split-room-does-not-fit",
        "lightest-then-order",
        "none-lower",
        "unreachable",
        "never-full",
        "never-free",
    ],
)
def test_where_a_workload_goes(
    workers: dict[str, list[int | None]],
    wanted: Demand,
    unreachable: tuple[str, ...],
    chosen: str | None,
    victims: set[str],
) -> None:
    assert answer(workers, wanted, unreachable=unreachable) == (chosen, victims)


def _claim(
    cluster: str,
    victims: Sequence[str] = (),
    room: Sequence[str] = (),
    *,
    preemptor: str = "Job/manager/ns/other",
    priority: int = 200,
    created: int = T0,
    uid: str = "uid-other",
    deadline: int = T0 + 60_000,
    evicting: bool = False,
) -> Claim:
    """Another preemptor's claim; by default it outranks `demand()` (priority 200)."""
    return Claim(
        preemptor=preemptor,
        rank=(-priority, created, uid),
        cluster=cluster,
        victims=frozenset(f"{cluster}/ns/{v}" for v in victims),
        room={node: {"nvidia.com/gpu": 8, "pods": 1} for node in room},
        deadline=deadline,
        evicting=evicting,
    )


@pytest.mark.parametrize(
    ("claims", "chosen", "victims"),
    [
        # The lightest worker's cheap rack is claimed (victims and room): its other rack is
        # dearer than the next worker's.
        (
            [_claim("w2", ["w2-b0-r0-h0", "w2-b0-r0-h1"], ["b0-r0-h0", "b0-r0-h1"])],
            "w3",
            {"w3-b0-r0-h0", "w3-b0-r0-h1"},
        ),
        # Claimed room alone keeps others off it, even where its victims are not claimed.
        ([_claim("w2", [], ["b0-r0-h0", "b0-r0-h1"])], "w3", {"w3-b0-r0-h0", "w3-b0-r0-h1"}),
        # Claimed victims alone are no one else's candidates.
        ([_claim("w2", ["w2-b0-r0-h1"], [])], "w3", {"w3-b0-r0-h0", "w3-b0-r0-h1"}),
        # A claim of the same preemptor is its own: nothing is held from it.
        (
            [
                _claim(
                    "w2",
                    ["w2-b0-r0-h0", "w2-b0-r0-h1"],
                    ["b0-r0-h0", "b0-r0-h1"],
                    preemptor="Job/manager/ns/big",
                )
            ],
            "w2",
            {"w2-b0-r0-h0", "w2-b0-r0-h1"},
        ),
    ],
    ids=["victims-and-room", "room-only", "victims-only", "own-claim"],
)
@pytest.mark.parametrize("logged", [False, True], ids=["pending", "logged"])
def test_claims_hold_their_victims_and_room(
    claims: list[Claim], chosen: str, victims: set[str], logged: bool
) -> None:
    workers: dict[str, list[int | None]] = {
        "w1": [MID] * 4,
        "w2": [LOW, LOW, 40, 40],
        "w3": [10, 10, MID, MID],
    }
    assert answer(workers, demand(), claims, logged=logged) == (chosen, victims)


CHEAP_RACK = (["w2-b0-r0-h0", "w2-b0-r0-h1"], ["b0-r0-h0", "b0-r0-h1"])


@pytest.mark.parametrize(
    ("claim", "chosen", "victims"),
    [
        # A worse-ranked claim that evicts nothing yet gives way: its victims and room are
        # this preemptor's to take (its decision takes the claim off).
        (_claim("w2", *CHEAP_RACK, priority=50), "w2", {"w2-b0-r0-h0", "w2-b0-r0-h1"}),
        (
            _claim("w2", *CHEAP_RACK, priority=100, created=T0 + 1),
            "w2",
            {"w2-b0-r0-h0", "w2-b0-r0-h1"},
        ),
        # Once it evicts, it holds against any rank.
        (
            _claim("w2", *CHEAP_RACK, priority=50, evicting=True),
            "w3",
            {"w3-b0-r0-h0", "w3-b0-r0-h1"},
        ),
        # A better rank holds.
        (
            _claim("w2", *CHEAP_RACK, priority=100, uid="uid-a"),
            "w3",
            {"w3-b0-r0-h0", "w3-b0-r0-h1"},
        ),
    ],
    ids=["lower-priority-gives-way", "younger-gives-way", "evicting-holds", "better-uid-holds"],
)
@pytest.mark.parametrize("logged", [False, True], ids=["pending", "logged"])
def test_a_worse_ranked_claim_gives_way_until_it_evicts(
    claim: Claim, chosen: str, victims: set[str], logged: bool
) -> None:
    workers: dict[str, list[int | None]] = {
        "w1": [MID] * 4,
        "w2": [LOW, LOW, 40, 40],
        "w3": [10, 10, MID, MID],
    }
    assert answer(workers, demand(), [claim], logged=logged) == (chosen, victims)


def test_a_claim_names_the_preemptor_cluster_victims_and_room() -> None:
    state = cluster_state({"w1": [LOW, LOW, MID, MID]})
    wanted = demand()
    chosen = choose(options([ClusterView(state, "w1")], wanted, []))
    assert chosen is not None
    claim = claim_of(wanted, chosen, T0, deadline=T0 + 1)
    assert claim == Claim(
        preemptor="Job/manager/ns/big",
        rank=(-100, T0, "uid-big"),
        cluster="w1",
        victims=frozenset({"w1/ns/w1-b0-r0-h0", "w1/ns/w1-b0-r0-h1"}),
        room={
            "b0-r0-h0": {"cpu": 1000, "nvidia.com/gpu": 8, "pods": 1},
            "b0-r0-h1": {"cpu": 1000, "nvidia.com/gpu": 8, "pods": 1},
        },
        deadline=T0 + 1,
        reserved=T0,
    )


def test_spared_victims_are_never_chosen() -> None:
    state = cluster_state({"w1": [LOW, LOW, MID, MID]})
    spared = ["w1/ns/w1-b0-r0-h0"]
    (answer,) = options([ClusterView(state, "w1")], demand(), [], spared=spared)
    assert victim_keys("w1", answer.victims) == {"w1/ns/w1-b0-r1-h0", "w1/ns/w1-b0-r1-h1"}


@pytest.mark.parametrize(
    ("one", "other", "collide"),
    [
        (_claim("w1", ["a"], ["n1"]), _claim("w1", ["a"], ["n2"], preemptor="P2"), True),
        (_claim("w1", ["a"], ["n1"]), _claim("w1", ["b"], ["n1"], preemptor="P2"), True),
        (_claim("w1", ["a"], ["n1"]), _claim("w1", ["b"], ["n2"], preemptor="P2"), False),
        (_claim("w1", ["a"], ["n1"]), _claim("w2", ["a"], ["n1"], preemptor="P2"), False),
        (_claim("w1", ["a"], ["n1"]), _claim("w1", ["a"], ["n1"]), False),
    ],
    ids=["same-victim", "same-node", "disjoint", "other-cluster", "same-preemptor"],
)
def test_which_claims_collide(one: Claim, other: Claim, collide: bool) -> None:
    assert collides(one, other) is collide
    assert collides(other, one) is collide


@pytest.mark.parametrize(
    ("claims", "wins"),
    [
        ([_claim("w1", priority=10, uid="a"), _claim("w1", priority=20, uid="b")], "b"),
        ([_claim("w1", created=T0 + 5, uid="a"), _claim("w1", created=T0, uid="b")], "b"),
        ([_claim("w1", uid="b"), _claim("w1", uid="a")], "a"),
    ],
    ids=["priority", "then-creation", "then-uid"],
)
def test_a_race_goes_to_the_best_rank(claims: list[Claim], wins: str) -> None:
    assert winner(claims).rank[2] == wins
    assert winner(list(reversed(claims))).rank[2] == wins


def test_rank_orders_priority_then_creation_then_uid() -> None:
    older = replace(demand(), created=T0 - 1)
    assert sorted([demand(), demand(200), older], key=rank) == [demand(200), older, demand()]


CLAIM = _claim("w1", ["v1", "v2"], ["n1"], deadline=T0 + 1000)


@pytest.mark.parametrize(
    ("now", "reachable", "refused", "why"),
    [
        (T0, True, {}, None),
        (T0, False, {}, "cluster w1 is unreachable"),
        (
            T0,
            True,
            {"w1/ns/v2": "403 Forbidden"},
            "victim w1/ns/v2 cannot be evicted: 403 Forbidden",
        ),
        (T0, True, {"w1/ns/elsewhere": "403 Forbidden"}, None),
        (T0 + 1000, True, {}, "deadline passed with 2 victim pod(s) still there"),
    ],
    ids=["goes-on", "unreachable", "eviction-refused", "not-its-victim", "deadline"],
)
def test_when_a_claim_is_given_up(
    now: int, reachable: bool, refused: dict[str, str], why: str | None
) -> None:
    assert abort_reason(CLAIM, now, left=2, reachable=reachable, refused=refused) == why
