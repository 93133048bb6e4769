"""`fold(state, seq, event)`: the one place state changes.

Deterministic and free of I/O, clocks and randomness: the same events give the same state,
whether folded from empty or from a snapshot. For speed the state is updated in place and
returned (a million events cannot each copy a hundred thousand pods); a caller that needs
the old value keeps a snapshot, which is what `events.state.encode_state` is for.

`BulkFold` folds a long run of stored events (a replay) to the same state by the same rules,
deferring the part of them that depends only on which pods there are, not on their order, and
decoding a pod change only as far as the rest of them read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

import msgspec

from events import expectations, gangs, jobs, jobsets
from events.index import reindex
from events.intents import Bind
from events.jobs import Finishing
from events.objects import (
    KINDS,
    TERMINAL_PHASES,
    Job,
    Node,
    Pod,
    PodGroup,
    SlimObject,
)
from events.schema import (
    DECODE_ERRORS,
    Decided,
    Event,
    Observed,
    Outcome,
    PodChange,
    Resynced,
    Tick,
    UndecodableEvent,
    decode_event,
    pod_changes,
)
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
    pod group indexes) from pod `old` to `new` (either None: not there). These depend only on
    which pods the state holds, not on the order they changed in, which is what lets
    `BulkFold` apply them once per pod rather than once per event. Returns whether any usage
    moved."""
    if old is None and new is None:
        return False  # a deletion of a pod the state never had
    moved = state.topology.charge_pod(cluster, key, old, new)
    if old is None or new is None or old.owners != new.owners:
        _index_child(state, cluster, key, old, new)
    if old is None or new is None or old.pod_group != new.pod_group:
        gangs.pod_changed(state, cluster, key, old, new)
    return moved


def _pod_history(
    state: State, cluster: str, old: Finishing | None, new: jobs.Changed | None
) -> None:
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


# ---------------------------------------------------------------------------------------------
# Folding a long run of stored events: a replay, a restart's tail


class _Stored(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A pod version `BulkFold` put in the state's table undecoded: the stored event it came
    in (and its seq, to name it if it turns out not to decode), and the fields
    `_pod_history` compares with the next version."""

    seq: int
    body: bytes
    phase: str
    deletion_ts: int | None
    finalizers: tuple[str, ...]

    def decoded(self) -> Pod:
        try:
            return decode_event(self.body).obj  # type: ignore[union-attr, return-value]
        except DECODE_ERRORS as exc:
            raise UndecodableEvent(self.seq, str(exc)) from exc


class BulkFold:
    """Folds stored events in order into `state` with the result `fold` gives, at a fraction
    of the cost, for callers that read the state only at the end (`settle`).

    Keeping every pod version decoded is what made folding a million events cost seven times
    decoding them: a pod is some two dozen Python objects, and replacing a version made long
    before frees them cold. So a pod change is decoded only as far as its Job's records read
    it (`events.schema.pod_changes` makes a `PodChange` of it; for a long replay a second
    process does, `events.readahead`) and goes into the table as the bytes of its stored
    event (`_Stored`), decoded whole only at `settle`; what the state derives from its pods
    (`_pod_records`: usage, the controller and pod group indexes) is brought up to date then,
    once per pod, from the version it last accounted for to the newest. What depends on the
    order of changes (`_pod_history`, expectations) is folded event by event as `fold` does.
    The few events whose fold reads pods settle what they read first: a bind decision or an
    outcome its pod, a Job new to the state the pods it may count. After `settle` the state
    equals, table order included, the state `fold` makes of the same events
    (tests/events/test_fold_properties.py); until then only this object may touch it.

    A pod version that a newer one replaces before a settle is checked only as MessagePack
    beyond its head; `kbatchd replay --verify` decodes every event whole."""

    __slots__ = ("_accounted", "_finishing", "state")

    def __init__(self, state: State) -> None:
        self.state = state
        # Pod key -> the version the state's records still account for under it (None:
        # nothing). A key is here from its first change since the last settle.
        self._accounted: dict[str, Pod | None] = {}
        # Keys of those pods whose newest version a Job's back-off may count
        # (`jobs.may_count`): a Job new to the state must see them.
        self._finishing: set[str] = set()

    def fold(self, seq: int, body: bytes) -> None:
        """Fold one stored event, `body` as `events.schema.encode_event` made it. Raises
        `UndecodableEvent` for it, or for an earlier one this settles, if it does not decode."""
        self.fold_changes(seq, pod_changes(seq, ((body,),)))

    def fold_rows(self, first: int, rows: Iterable[tuple[bytes]]) -> None:
        """`fold` each stored event of `rows` (one body to a row, as the store reads them),
        the first at seq `first` and the rest at the seqs after it."""
        self.fold_changes(first, pod_changes(first, rows))

    def fold_changes(self, first: int, changes: Iterable[PodChange | bytes]) -> None:
        """`fold` stored events `first`, `first + 1`, ... decoded as `pod_changes` decodes
        them: a pod change as its `PodChange`, any other event as it is stored. A replay runs
        this loop a million times, so a pod change is folded in it rather than by a method
        call per event (two such calls cost a seventh of the 1M-event bulk fold in memory)."""
        state = self.state
        table: dict[str, Pod | _Stored] = state.pods  # type: ignore[assignment]
        accounted = self._accounted
        finishing = self._finishing
        seq = first - 1
        for pod in changes:
            seq += 1
            if type(pod) is not PodChange:
                try:
                    event = decode_event(pod)  # type: ignore[arg-type]
                except DECODE_ERRORS as exc:
                    raise UndecodableEvent(seq, str(exc)) from exc
                if accounted:
                    self._settle_read_by(event)
                fold(state, seq, event)
                continue
            if pod.at > state.now:
                state.now = pod.at
            state.seq = seq
            key = pod.key
            old = table.get(key)
            if key not in accounted:
                # `old` is no `_Stored`: a key leaves `_accounted` only when it is settled,
                # and settling decodes its `_Stored`.
                accounted[key] = old  # type: ignore[assignment]
            if pod.change == "DELETED":
                if old is not None:
                    del table[key]
                if accounted[key] is None:
                    del accounted[key]  # created and gone since the last settle: nothing to do
                if finishing:
                    finishing.discard(key)
            else:
                table[key] = _Stored(seq, pod.body, pod.phase, pod.deletion_ts, pod.finalizers)
                if jobs.may_count(pod):
                    finishing.add(key)
                elif finishing:
                    finishing.discard(key)
                _pod_history(state, pod.cluster, old, pod)
            if state.expected:
                self._observe(key, deleted=pod.change == "DELETED")

    def _observe(self, key: str, *, deleted: bool) -> None:
        """`expectations.observe` for a change of pod `key`; what it reads of the pod may be
        any field, so an expected pod is decoded whole."""
        ref = "Pod/" + key
        if ref in self.state.expected:
            table: dict[str, _Stored] = self.state.pods  # type: ignore[assignment]
            whole = None if deleted else table[key].decoded()
            expectations.observe(self.state, ref, whole, None)

    def settle(self) -> State:
        """Decode every pod changed since the last settle and bring the state's records up to
        date; returns the state."""
        accounted = self._accounted
        for key, was in accounted.items():
            self._settle(key, was)
        accounted.clear()
        self._finishing.clear()
        return self.state

    def _settle_read_by(self, event: Event) -> None:
        """Settle the pods that folding `event` reads."""
        if type(event) is Decided:
            for intent in event.intents:  # `expectations.expect` reads a bind's pod
                if type(intent) is Bind:
                    self._settle_key(intent.key)
        elif type(event) is Outcome:  # `expectations.settle` reads the intent's object
            flight = _flight_of(self.state, event)
            if flight is not None and flight.decision.intents[event.index].kind == "Pod":
                self._settle_key(flight.decision.intents[event.index].key)
        elif type(event) is Observed and type(event.obj) is Job and event.change != "DELETED":
            job = event.obj
            key = f"{event.cluster}/{job.namespace}/{job.name}"
            known = self.state.jobs.get(key)
            if known is None or known.uid != job.uid:
                # `jobs.job_changed` counts the finished pods the controller index gives it:
                # those the index has are settled to their newest version, and the finished
                # ones it may not have yet are settled into it.
                for pod_key in [*self.state.children.get("Job/" + key, ()), *self._finishing]:
                    self._settle_key(pod_key)

    def _settle_key(self, key: str) -> None:
        if key in self._accounted:
            self._settle(key, self._accounted.pop(key))
            self._finishing.discard(key)

    def _settle(self, key: str, old: Pod | None) -> None:
        table: dict[str, Pod | _Stored] = self.state.pods  # type: ignore[assignment]
        new: Pod | None = None
        stored = table.get(key)
        if type(stored) is _Stored:
            new = table[key] = stored.decoded()
        _pod_records(self.state, key.split("/", 1)[0], key, old, new)
