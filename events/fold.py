"""`fold(state, seq, event)`: the one place state changes.

The fold keeps the objects, the topology's usage, the controller index, the decisions in
flight and the expectations; what a controller keeps beside them (its projection and indexes)
its own hooks fold (`events.hooks`), called here for the kinds they name, in wiring order.

Deterministic and free of I/O, clocks and randomness: the same events give the same state,
whether folded from empty or from a snapshot. For speed the state is updated in place and
returned (a million events cannot each copy a hundred thousand pods); a caller that needs
the old value keeps a snapshot, which is what `events.state.encode_state` is for.
"""

from __future__ import annotations

from typing import Final

from events import expectations
from events.hooks import Change, Dirty, Wired
from events.index import reindex
from events.objects import KINDS, Node, Pod, SlimObject
from events.schema import Decided, Event, Observed, Outcome, Resynced, Tick
from events.state import TABLES, InFlight, State

_TABLE_OF: Final = {cls: TABLES[kind] for kind, cls in KINDS.items()}
# The controllers' fold hooks (`wire`); `_UNWIRED` until wired.
_UNWIRED: Final = Wired()
_WIRED = _UNWIRED


def wire(wired: Wired) -> None:
    """Fold with `wired`'s hooks from now on: the controllers' part of the fold, which the
    composition root (`daemon.service.wiring.wire`) hands in once, before the first fold."""
    global _WIRED
    _WIRED = wired


def wired() -> Wired:
    """The hooks the fold calls (`wire`). Folding without them would silently leave out every
    controller's projection, so it is an error."""
    if _WIRED is _UNWIRED:
        raise RuntimeError("no controllers are wired into the fold (daemon.service.wiring.wire)")
    return _WIRED


def restored(state: State) -> State:
    """`state`, decoded from a snapshot, with what the controllers build for older snapshots."""
    for hook in wired().restored:
        hook(state)
    return state


def fold(
    state: State, seq: int, event: Event, dirty: Dirty | None = None, owners: Dirty | None = None
) -> State:
    """Apply one logged event. Refs of the objects whose reconcile may now decide differently
    are added to `dirty` when given. A controller marked only because an object it controls
    changed (a Job, when a kubelet moves its pod) goes to `owners` instead when that is given:
    the runtime may batch those (`daemon.controllers.base.Batching`)."""
    if event.at > state.now:
        state.now = event.at
    state.seq = seq
    if _WIRED is _UNWIRED:
        wired()
    if type(event) is Observed:  # the hot path: an exact type test is cheaper than isinstance
        _observed(state, event, dirty, dirty if owners is None else owners)
    elif isinstance(event, Decided):
        _decided(state, seq, event)
    elif isinstance(event, Outcome):
        _outcome(state, event, dirty)
    elif isinstance(event, Tick):
        if state.expected:
            expectations.expire(state, state.now, dirty)
    elif isinstance(event, Resynced):
        state.unreachable.pop(event.cluster, None)
        mark = f"{event.cluster}/{event.kind}"
        state.synced[mark] = seq
        if event.resource_version:
            state.watermarks[mark] = event.resource_version
        if event.api_version:
            state.served[mark] = event.api_version
        else:
            state.served.pop(mark, None)
    return state


def fold_all(state: State, records: list[tuple[int, Event]], dirty: Dirty | None = None) -> State:
    for seq, event in records:
        fold(state, seq, event, dirty)
    return state


def _observed(state: State, event: Observed, dirty: Dirty | None, owners: Dirty | None) -> None:
    obj = event.obj
    cls = type(obj)
    table: dict[str, SlimObject] = getattr(state, _TABLE_OF[cls])
    cluster = event.cluster
    if state.unreachable:
        state.unreachable.pop(cluster, None)
    key = f"{cluster}/{obj.namespace}/{obj.name}"
    current: SlimObject | None
    if event.change == "DELETED":
        old = table.pop(key, None)
        current = None
    else:
        old = table.get(key)
        table[key] = current = obj
    moved = False
    if cls is Pod:
        moved = _pod_records(state, cluster, key, old, current)  # type: ignore[arg-type]
    elif cls is Node:
        moved = state.topology.set_node(cluster, key, current)  # type: ignore[arg-type]
        if dirty is not None and (current is None or old is None or old.ready != obj.ready):  # type: ignore[union-attr]
            # Pods on a node that turned NotReady (or back) may now count differently.
            _dirty_owners_on(state, cluster, f"{cluster}//{obj.name}", dirty)
    hooks = _WIRED.observed.get(cls)
    if hooks:
        change = Change(cluster, key, obj, old, current, moved)
        for hook in hooks:
            hook(state, change, dirty)
    if not state.expected and dirty is None:
        return
    ref = f"{cls.__name__}/{key}"
    if state.expected:
        expectations.observe(state, ref, current, dirty)
    if dirty is not None:
        dirty.add(ref)
        owner = obj.controller
        if owner is not None and owners is not None:
            owners.add(f"{owner.kind}/{cluster}/{obj.namespace}/{owner.name}")


def _pod_records(state: State, cluster: str, key: str, old: Pod | None, new: Pod | None) -> bool:
    """Bring the usage on the topology and the controller index from pod `old` to `new`
    (either None: not there). Returns whether any usage moved."""
    if old is None and new is None:
        return False  # a deletion of a pod the state never had
    moved = state.topology.charge_pod(cluster, key, old, new)
    if old is None or new is None or old.owners != new.owners:
        _index_child(state, cluster, key, old, new)
    return moved


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
        for hook in _WIRED.decided:
            hook(state, seq, event)


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
    intent = flight.decision.intents[event.index]
    expectations.settle(state, event, intent.ref, dirty)
    if not event.ok and not event.unconfirmed:
        if event.code == 0:  # no answer at all (`Outcome.code`)
            state.unreachable[intent.cluster] = event.message
        for hook in _WIRED.failed:
            hook(state, flight.decision, intent, event, dirty)
    if event.index in flight.pending:
        flight.pending.remove(event.index)
    if not flight.pending:
        del state.inflight[event.decision]
    if dirty is not None:
        dirty.add(flight.decision.key)
