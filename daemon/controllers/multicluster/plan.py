"""Where a workload submitted to the manager cluster runs, and what preempting for it may
claim: the multi-cluster planner, pure (no state is changed, nothing is written).

- **Fit first.** In each reachable worker the workload's pods are placed as the worker
  stands. If they fit in any, the first such worker in the configured order is the answer and
  nobody is preempted anywhere.
- **Else the lightest preemption.** Each worker's victims come from the in-cluster planner
  (`gang.preempt.plan`); the worker whose victims weigh least (priority-weighted pods) is
  chosen, ties by configured order.
- **Claims.** A chosen preemption is held as a `Claim` (`events.state`): the preemptor, the
  worker, the victim pods and the room it will take on each node. While a claim stands, no
  other preemption takes one of its victims or its room: every view of the worker charges the
  claimed room (`gang.place.ClusterView`) and the claimed victims are no one else's
  candidates (`options`).
- **Races** between preemptors are settled by `rank`: higher priority, then the earlier
  creation, then the smaller UID.
- **Abort** (`abort_reason`) when a victim cannot be evicted, the worker cannot be reached, or
  the claim's deadline has passed.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

import msgspec

from daemon.controllers.gang import preempt
from daemon.controllers.gang.place import (
    Amounts,
    ClusterView,
    Restrict,
    Slots,
    demand,
    fit,
    levels_for,
    pod_set,
)
from daemon.controllers.gang.spec import TopologyRequest, max_requests
from events.objects import Pod
from events.state import Claim

Rank = tuple[int, int, str]


class Demand(msgspec.Struct, frozen=True):
    """What a workload asks of whichever worker runs it."""

    key: str  # the manager's object, e.g. ``Job/manager/ns/name``
    namespace: str
    name: str
    uid: str
    priority: int
    created: int  # ms
    pods: tuple[Pod, ...]  # the pods it would run, pending, in no cluster yet
    request: TopologyRequest = TopologyRequest()
    preempts: bool = True  # False: preemptionPolicy Never


def rank(demand_: Demand) -> Rank:
    """The order in which preemptors are served and races are won: the smallest wins."""
    return (-demand_.priority, demand_.created, demand_.uid)


class Option(msgspec.Struct, frozen=True):
    """One worker's answer: the nodes the pods would take, and the units to evict first
    (none: it fits as it stands). `refused`: why this worker cannot take it."""

    cluster: str
    slots: tuple[tuple[Pod, str], ...] = ()
    victims: tuple[preempt.Unit, ...] = ()
    refused: str = ""

    @property
    def weight(self) -> int:
        return preempt.weight(self.victims)


def place_pods(view: ClusterView, demand_: Demand, within: Restrict = ()) -> Slots | str:
    """The workload's pods placed on `view` (inside `within`), or why they do not fit: the
    gang scheduler's placement, for pods no cluster holds yet."""
    pods = demand_.pods
    if not pods:
        return []
    levels = levels_for(view.state.topology.levels, demand_.request)
    wanted = pod_set(demand_.name, len(pods), max_requests(pods), demand_.request, pods[0])
    return fit(view, levels, wanted, pods, within)


def room_of(slots: Slots) -> dict[str, Amounts]:
    """What `slots` take on each node, ``pods`` included: a claim's room."""
    by_node: dict[str, list[Pod]] = {}
    for pod, node in slots:
        by_node.setdefault(node, []).append(pod)
    return {node: demand(pods) for node, pods in sorted(by_node.items())}


def victim_keys(cluster: str, units: Sequence[preempt.Unit]) -> frozenset[str]:
    return frozenset(f"{cluster}/{p.namespace}/{p.name}" for u in units for p in u.pods)


def binds(claim: Claim, demand_: Demand) -> bool:
    """Whether `claim` holds against `demand_`: it is another preemptor's, and it evicts
    already or outranks it. A worse-ranked claim that evicts nothing yet gives way: the better
    one takes its place (`collides`, `winner`)."""
    return claim.preemptor != demand_.key and (claim.evicting or claim.rank < rank(demand_))


def options(
    views: Sequence[ClusterView],
    demand_: Demand,
    pending: Sequence[Claim] = (),
    unreachable: Collection[str] = (),
    spared: Collection[str] = (),
) -> list[Option]:
    """Each worker's answer for `demand_`, in the order of `views` (the configured order);
    none evicts a `spared` pod (keys of victims a worker refused to evict).
    The claims that hold against it (`binds`) keep their room and their victims from it:
    those in the state (which every view charges) and `pending` ones, decided in this pass
    but not yet folded. The room of any other claim in the state is free to it."""
    answers = []
    for view in views:
        cluster = view.cluster
        if cluster in unreachable:
            answers.append(Option(cluster, refused="unreachable"))
            continue
        logged = [c for c in view.state.claims.values() if c.cluster == cluster]
        fresh = [c for c in pending if c.cluster == cluster and binds(c, demand_)]
        yielding = [c for c in logged if not binds(c, demand_)]
        held = view
        if fresh or yielding:
            held = view.copy()
            for claim in fresh:
                held.hold(claim.room)
            for claim in yielding:  # its own, or one it would take the place of
                held.hold(claim.room, -1)
        theirs = [c for c in (*logged, *fresh) if binds(c, demand_)]
        slots = place_pods(held, demand_)
        if not isinstance(slots, str):
            answers.append(Option(cluster, tuple(slots)))
            continue
        if not demand_.preempts:
            answers.append(Option(cluster, refused=f"preemptionPolicy Never; {slots}"))
            continue
        answers.append(_preemption(held, demand_, theirs, spared))
    return answers


def _preemption(
    view: ClusterView, demand_: Demand, theirs: Sequence[Claim], spared: Collection[str]
) -> Option:
    """The worker's cheapest preemption for `demand_`, victims claimed by others and the
    `spared` ones left out."""
    cluster = view.cluster
    preemptor = preempt.Preemptor(
        demand_.namespace, demand_.name, demand_.priority, demand_.pods, demand_.request.required
    )
    claimed = frozenset(spared).union(*(c.victims for c in theirs))
    going, candidates = preempt.units(view, preemptor)
    free = [u for u in candidates if not victim_keys(cluster, [u]) & claimed]

    def place(on: ClusterView, within: Restrict) -> Slots | str:
        return place_pods(on, demand_, within)

    found = preempt.plan(view, place, preemptor, (going, free))
    if isinstance(found, str):
        return Option(cluster, refused=found)
    if found.waiting:
        # Room that others' evictions free is theirs (their claims hold it); room freed by a
        # preemption no claim holds any more is free room, not victims of this one.
        return Option(cluster, refused="waiting for room others are freeing")
    return Option(cluster, tuple(found.slots), tuple(found.victims))


def choose(answers: Sequence[Option]) -> Option | None:
    """The worker to run in: the first that fits as it stands, else the one whose victims
    weigh least (the earlier in `answers`, the configured order, on a tie); None when no
    worker can take it."""
    fitting = [a for a in answers if not a.refused and not a.victims]
    if fitting:
        return fitting[0]
    preempting = [a for a in answers if not a.refused]
    if not preempting:
        return None
    return min(enumerate(preempting), key=lambda pair: (pair[1].weight, pair[0]))[1]


def claim_of(demand_: Demand, option: Option, now: int, deadline: int) -> Claim:
    return Claim(
        reserved=now,
        preemptor=demand_.key,
        rank=rank(demand_),
        cluster=option.cluster,
        victims=victim_keys(option.cluster, option.victims),
        room=room_of(list(option.slots)),
        deadline=deadline,
    )


def collides(claim: Claim, other: Claim) -> bool:
    """Whether two claims of different preemptors want one victim or room on one node."""
    if claim.preemptor == other.preemptor or claim.cluster != other.cluster:
        return False
    return bool(claim.victims & other.victims) or bool(claim.room.keys() & other.room.keys())


def winner(claims: Sequence[Claim]) -> Claim:
    """Of colliding claims, the one that stands: the best `rank`."""
    return min(claims, key=lambda c: c.rank)


def abort_reason(
    claim: Claim,
    now: int,
    *,
    left: int,
    reachable: bool,
    refused: Mapping[str, str],
) -> str | None:
    """Why a claim must be given up, None while it may go on. `left`: its victim pods still
    there; `refused`: victim pod key -> why its eviction was refused (an eviction that found
    the pod gone is not refused)."""
    if not reachable:
        return f"cluster {claim.cluster} is unreachable"
    stuck = sorted(k for k in refused if k in claim.victims)
    if stuck:
        return f"victim {stuck[0]} cannot be evicted: {refused[stuck[0]]}"
    if now >= claim.deadline:
        return f"deadline passed with {left} victim pod(s) still there"
    return None
