"""`fold(state, seq, event)`: the one place state changes.

Deterministic and free of I/O, clocks and randomness: the same events give the same state,
whether folded from empty or from a snapshot. For speed the state is updated in place and
returned (a million events cannot each copy a hundred thousand pods); a caller that needs
the old value keeps a snapshot, which is what `events.state.encode_state` is for.
"""

from __future__ import annotations

from typing import Final

from events import expectations, gangs, jobs, jobsets
from events.index import reindex
from events.objects import (
    KINDS,
    TERMINAL_PHASES,
    Job,
    Node,
    Pod,
    PodGroup,
    SlimObject,
)
from events.schema import Decided, Event, Observed, Outcome, Resynced, Tick
from events.state import TABLES, InFlight, State
from events.topology import charge_of

Dirty = set[str]

_TABLE_OF: Final = {cls: TABLES[kind] for kind, cls in KINDS.items()}


def fold(state: State, seq: int, event: Event, dirty: Dirty | None = None) -> State:
    """Apply one logged event. Refs of the objects whose reconcile may now decide differently
    are added to `dirty` when given."""
    if event.at > state.now:
        state.now = event.at
    state.seq = seq
    if type(event) is Observed:  # the hot path: an exact type test is cheaper than isinstance
        _observed(state, event, dirty)
    elif isinstance(event, Decided):
        _decided(state, seq, event)
    elif isinstance(event, Outcome):
        _outcome(state, event, dirty)
    elif isinstance(event, Tick):
        if state.expected:
            expectations.expire(state, state.now, dirty)
    elif isinstance(event, Resynced):
        mark = f"{event.cluster}/{event.kind}"
        state.synced[mark] = seq
        if event.resource_version:
            state.watermarks[mark] = event.resource_version
    return state


def fold_all(state: State, records: list[tuple[int, Event]], dirty: Dirty | None = None) -> State:
    for seq, event in records:
        fold(state, seq, event, dirty)
    return state


def _observed(state: State, event: Observed, dirty: Dirty | None) -> None:
    obj = event.obj
    cls = type(obj)
    table: dict[str, SlimObject] = getattr(state, _TABLE_OF[cls])
    cluster = event.cluster
    key = f"{cluster}/{obj.namespace}/{obj.name}"
    current: SlimObject | None
    if event.change == "DELETED":
        old = table.pop(key, None)
        current = None
    else:
        old = table.get(key)
        table[key] = current = obj
    if cls is Pod:
        moved = _pod_records(state, cluster, key, old, current)  # type: ignore[arg-type]
        if (
            dirty is not None and state.gang_queue and moved and charge_of(cluster, current) is None  # type: ignore[arg-type]
        ):
            # The pod stopped taking room: gangs waiting for room there may fit now.
            gangs.wake(state, cluster, dirty)
        _pod_history(state, cluster, old, current)  # type: ignore[arg-type]
    elif cls is Job:
        jobs.job_changed(state, key, old, current)  # type: ignore[arg-type]
    elif cls is Node:
        moved = state.topology.set_node(cluster, key, current)  # type: ignore[arg-type]
        if dirty is not None and moved and state.gang_queue and key in state.topology.paths:
            gangs.wake(state, cluster, dirty)  # a node joined or changed: maybe room for a gang
        if dirty is not None and (current is None or old is None or old.ready != obj.ready):  # type: ignore[union-attr]
            # Pods on a node that turned NotReady (or back) may now count differently.
            _dirty_owners_on(state, cluster, f"{cluster}//{obj.name}", dirty)
    elif cls is PodGroup:
        gangs.podgroup_changed(state, cluster, key, old, current)  # type: ignore[arg-type]
    if not state.expected and dirty is None:
        return
    ref = f"{cls.__name__}/{key}"
    if state.expected:
        expectations.observe(state, ref, current, dirty)
    if dirty is not None:
        dirty.add(ref)
        owner = obj.controller
        if owner is not None:
            dirty.add(f"{owner.kind}/{cluster}/{obj.namespace}/{owner.name}")
        if cls is Pod:
            jobsets.dirty_in_place(state, cluster, obj, dirty)  # type: ignore[arg-type]
        if cls is Pod and obj.pod_group:  # type: ignore[union-attr]
            gangs.dirty_group(state, f"{cluster}/{obj.namespace}/{obj.pod_group}", dirty)  # type: ignore[union-attr]
        elif cls is PodGroup:
            gangs.dirty_workload(cluster, obj, dirty)  # type: ignore[arg-type]


def _pod_records(state: State, cluster: str, key: str, old: Pod | None, new: Pod | None) -> bool:
    """Bring what the state derives from its pods (usage on the topology, the controller and
    pod group indexes) from pod `old` to `new` (either None: not there). Returns whether any
    usage moved."""
    if old is None and new is None:
        return False  # a deletion of a pod the state never had
    moved = state.topology.charge_pod(cluster, key, old, new)
    if old is None or new is None or old.owners != new.owners:
        _index_child(state, cluster, key, old, new)
    if old is None or new is None or old.pod_group != new.pod_group:
        gangs.pod_changed(state, cluster, key, old, new)
    return moved


def _pod_history(state: State, cluster: str, old: Pod | None, new: Pod | None) -> None:
    """Fold a pod's change into what outlives it (its Job's back-off record and ordinal
    watermark), which depends on every change in order. Only a pod new to the state, or a
    change that can finish a pod for its Job's back-off (a terminal phase, a deletion, a
    finalizer gone) touches the Job's records; most pod events (binding, Running,
    readiness, resizes) do none of these."""
    if new is not None and (
        old is None
        or (old.phase != new.phase and new.phase in TERMINAL_PHASES)
        or old.deletion_ts != new.deletion_ts
        or old.finalizers != new.finalizers
    ):
        jobs.pod_changed(state, cluster, old, new)


def _controller_ref(cluster: str, obj: SlimObject) -> str | None:
    owner = obj.controller
    if owner is None:
        return None
    return f"{owner.kind}/{cluster}/{obj.namespace}/{owner.name}"


def _index_child(
    state: State, cluster: str, key: str, old: SlimObject | None, new: SlimObject | None
) -> None:
    before = _controller_ref(cluster, old) if old is not None else None
    after = _controller_ref(cluster, new) if new is not None else None
    reindex(state.children, key, before, after)


def _dirty_owners_on(state: State, cluster: str, node_key: str, dirty: Dirty) -> None:
    pods = state.pods
    for pod_key in state.topology.pods_on(node_key):
        pod = pods.get(pod_key)
        if pod is not None:
            ref = _controller_ref(cluster, pod)
            if ref is not None:
                dirty.add(ref)


def _decided(state: State, seq: int, event: Decided) -> None:
    state.reasons[f"{event.reconciler} {event.key}"] = event.reason
    if event.intents:
        state.inflight[seq] = InFlight(event, list(range(len(event.intents))))
        expectations.expect(state, seq, event)
        gangs.admission_decided(state, seq, event)


def _flight_of(state: State, event: Outcome) -> InFlight | None:
    """The decision in flight an outcome reports on, if it has the intent the outcome names."""
    flight = state.inflight.get(event.decision)
    if flight is None or not 0 <= event.index < len(flight.decision.intents):
        return None
    return flight


def _outcome(state: State, event: Outcome, dirty: Dirty | None) -> None:
    flight = _flight_of(state, event)
    if flight is None:
        return
    expectations.settle(state, event, flight.decision.intents[event.index].ref, dirty)
    if event.index in flight.pending:
        flight.pending.remove(event.index)
    if not flight.pending:
        del state.inflight[event.decision]
    if dirty is not None:
        dirty.add(flight.decision.key)
