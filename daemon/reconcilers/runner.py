"""Running reconcilers over dirty keys: which keys may be decided now, and the decision
events that result. Pure, so that `kbatchd replay --verify` reruns exactly this."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from daemon.reconcilers.base import Decision, Queueing, Reconciler
from events.schema import Decided
from events.state import State


def may_decide(state: State, key: str) -> bool:
    """A key waiting to observe its own writes would decide from stale state."""
    return key not in state.awaiting


def decide(
    state: State, reconciler: Reconciler, key: str
) -> tuple[Decided | None, Decision | None]:
    """Run one reconciler on one key. The decision event is None when there is nothing worth
    logging: no intents and the same reason as last time."""
    decision = reconciler.decide(state, key, state.now)
    if decision is None:
        return None, None
    previous = state.reasons.get(f"{reconciler.name} {key}")
    if not decision.intents and decision.reason == previous:
        return None, decision
    event = Decided(
        at=state.now,
        reconciler=reconciler.name,
        key=key,
        reason=decision.reason,
        intents=decision.intents,
    )
    return event, decision


class Verdict(msgspec.Struct, frozen=True):
    key: str
    decision: Decision
    # The event to log, None when the decision has nothing new to say.
    event: Decided | None


def released(state: State, reconcilers: Sequence[Reconciler], keys: Iterable[str]) -> set[str]:
    """`keys` with every queue key replaced by the keys its reconciler releases from it."""
    found = set(keys)
    for reconciler in reconcilers:
        if not isinstance(reconciler, Queueing):
            continue
        queues = reconciler.queues
        for queue in [k for k in found if k.split("/", 1)[0] in queues]:
            found.discard(queue)
            found.update(reconciler.release(state, queue))
    return found


def decide_all(
    state: State, reconcilers: Sequence[Reconciler], keys: Iterable[str]
) -> list[Verdict]:
    """Every reconciler that handles a key's kind, over every key that may be decided, in a
    stable order (sorted keys, reconcilers in the order given)."""
    results: list[Verdict] = []
    for key in sorted(released(state, reconcilers, keys)):
        if not may_decide(state, key):
            continue
        kind = key.split("/", 1)[0]
        for reconciler in reconcilers:
            if kind not in reconciler.kinds:
                continue
            event, decision = decide(state, reconciler, key)
            if decision is not None:
                results.append(Verdict(key, decision, event))
    return results
