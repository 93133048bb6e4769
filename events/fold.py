"""`fold(state, seq, event)`: the one place state changes.

Deterministic and free of I/O, clocks and randomness: the same events give the same state,
whether folded from empty or from a snapshot. For speed the state is updated in place and
returned (a million events cannot each copy a hundred thousand pods); a caller that needs
the old value keeps a snapshot, which is what `events.state.encode_state` is for.
"""

from __future__ import annotations

from events import expectations
from events.objects import Node, Pod
from events.schema import Decided, Event, Observed, Outcome, Resynced, Tick
from events.state import TABLES, InFlight, State

Dirty = set[str]


def fold(state: State, seq: int, event: Event, dirty: Dirty | None = None) -> State:
    """Apply one logged event. Refs of the objects whose reconcile may now decide differently
    are added to `dirty` when given."""
    if event.at > state.now:
        state.now = event.at
    state.seq = seq
    if isinstance(event, Observed):
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
    kind = type(obj).__name__
    table: dict[str, object] = getattr(state, TABLES[kind])
    cluster = event.cluster
    key = f"{cluster}/{obj.namespace}/{obj.name}"
    deleted = event.change == "DELETED"
    if deleted:
        table.pop(key, None)
    else:
        table[key] = obj
    if obj.rv:
        state.watermarks[f"{cluster}/{kind}"] = obj.rv
    if isinstance(obj, Pod):
        state.topology.charge_pod(f"{cluster}//", key, None if deleted else obj)
    elif isinstance(obj, Node):
        state.topology.set_node(cluster, key, None if deleted else obj)
    ref = f"{kind}/{key}"
    if state.expected:
        expectations.observe(state, ref, None if deleted else obj, dirty)
    if dirty is not None:
        dirty.add(ref)
        owner = obj.controller
        if owner is not None:
            dirty.add(f"{owner.kind}/{cluster}/{obj.namespace}/{owner.name}")
        if isinstance(obj, Pod) and obj.pod_group:
            dirty.add(f"PodGroup/{cluster}/{obj.namespace}/{obj.pod_group}")


def _decided(state: State, seq: int, event: Decided) -> None:
    state.reasons[f"{event.reconciler} {event.key}"] = event.reason
    if event.intents:
        state.inflight[seq] = InFlight(event, list(range(len(event.intents))))
        expectations.expect(state, seq, event)


def _outcome(state: State, event: Outcome, dirty: Dirty | None) -> None:
    flight = state.inflight.get(event.decision)
    if flight is None or not 0 <= event.index < len(flight.decision.intents):
        return
    expectations.settle(state, event, flight.decision.intents[event.index].ref, dirty)
    if event.index in flight.pending:
        flight.pending.remove(event.index)
    if not flight.pending:
        del state.inflight[event.decision]
    if dirty is not None:
        dirty.add(flight.decision.key)
