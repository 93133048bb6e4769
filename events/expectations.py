"""Expectations: which objects a decision changed that the watch has not shown yet.

A key whose decision created, deleted, bound or patched objects is not reconciled again
until every one of those changes is observed (or failed, or is older than the TTL): deciding
from a state that does not yet show our own writes would repeat them. The TTL is in event
time, so replay expires exactly what the live run expired.
"""

from __future__ import annotations

from typing import Final

from events.intents import Bind, Intent, Patch
from events.objects import KObject, Pod
from events.schema import Decided, Outcome
from events.state import Expectation, State
from events.topology import add_pod

TTL_MS: Final = 5 * 60 * 1000


def expect(state: State, seq: int, decision: Decided) -> None:
    for intent in decision.intents:
        op = intent.__struct_config__.tag
        assert isinstance(op, str)
        expectation = Expectation(seq, decision.key, op, since=decision.at)
        expectation.node = _claimed_node(intent)
        if expectation.node:
            pod = state.pods.get(intent.key)
            if pod is not None and not pod.node_name and not pod.terminal:
                expectation.requests = pod.requests
        _replace(state, intent.ref, expectation)


def _claimed_node(intent: Intent) -> str:
    """The node an intent claims room on for a pending pod: a bind's, or the one a
    preemption nominates it to (``status.nominatedNodeName``). Charged from the decision on,
    so that no decision taken before the watch shows the change gives that room away."""
    if isinstance(intent, Bind):
        return intent.node
    if isinstance(intent, Patch) and intent.subresource == "status":
        status = intent.patch.get("status") if isinstance(intent.patch, dict) else None
        if isinstance(status, dict):
            node = status.get("nominatedNodeName")
            return node if isinstance(node, str) else ""
    return ""


def settle(state: State, outcome: Outcome, ref: str, dirty: set[str] | None) -> None:
    """Record the outcome of the intent on `ref`; clear the expectation when it failed or the
    state already shows the change."""
    expectation = state.expected.get(ref)
    if expectation is None or expectation.decision != outcome.decision:
        return
    if not outcome.ok:
        _clear(state, ref, dirty)
        return
    expectation.done = True
    expectation.uid = outcome.uid
    expectation.rv = outcome.resource_version
    if satisfied(expectation, state.get(ref)):
        _clear(state, ref, dirty)


def observe(state: State, ref: str, obj: KObject | None, dirty: set[str] | None) -> None:
    expectation = state.expected.get(ref)
    if expectation is not None and satisfied(expectation, obj):
        _clear(state, ref, dirty)


def expire(state: State, now: int, dirty: set[str] | None) -> None:
    # Thousands of binds may be waiting to be seen; looking at each of them on every Tick
    # cost more than everything else a Tick does.
    if now - state.expected_since < TTL_MS:
        return
    stale = [ref for ref, e in state.expected.items() if now - e.since >= TTL_MS]
    for ref in stale:
        _clear(state, ref, dirty)
    state.expected_since = min((e.since for e in state.expected.values()), default=now)


def satisfied(expectation: Expectation, obj: KObject | None) -> bool:
    """Whether `obj` (the object as now folded, None when absent) shows the expected change."""
    op = expectation.op
    if op == "create":
        # Names are deterministic: any object of that name means the create happened or
        # would fail as already existing.
        return obj is not None
    if op == "delete":
        return (
            obj is None
            or obj.deletion_ts is not None
            or bool(expectation.uid and obj.uid != expectation.uid)
        )
    if obj is None:
        return True  # nothing left to wait for
    if op == "bind":
        return isinstance(obj, Pod) and bool(obj.node_name)
    return expectation.done and rv_reached(obj.rv, expectation.rv)


def rv_reached(current: str, wanted: str) -> bool:
    """Whether resourceVersion `current` is `wanted` or newer. resourceVersions are opaque;
    when both are integers (etcd revisions, and the simulated cluster's) newer is larger."""
    if current == wanted or not wanted:
        return True
    # isdecimal, not isdigit: "²" is a digit that int() rejects.
    if current.isdecimal() and wanted.isdecimal():
        return int(current) >= int(wanted)
    return False


def _replace(state: State, ref: str, expectation: Expectation) -> None:
    old = state.expected.get(ref)
    if old is not None:
        _release(state, old.key)
        _assume(state, ref, old, -1)
    if not state.expected or expectation.since < state.expected_since:
        state.expected_since = expectation.since
    state.expected[ref] = expectation
    state.awaiting[expectation.key] = state.awaiting.get(expectation.key, 0) + 1
    _assume(state, ref, expectation, 1)


def _clear(state: State, ref: str, dirty: set[str] | None) -> None:
    expectation = state.expected.pop(ref)
    _release(state, expectation.key)
    _assume(state, ref, expectation, -1)
    if dirty is not None:
        dirty.add(expectation.key)


def _assume(state: State, ref: str, expectation: Expectation, sign: int) -> None:
    """Charge (or give back) the requests of a pod bound or nominated to a node in
    ``State.assumed``."""
    if not expectation.node or not expectation.requests:
        return
    add_pod(
        state.assumed, f"{ref.split('/', 2)[1]}//{expectation.node}", expectation.requests, sign
    )


def _release(state: State, key: str) -> None:
    remaining = state.awaiting[key] - 1
    if remaining:
        state.awaiting[key] = remaining
    else:
        del state.awaiting[key]
