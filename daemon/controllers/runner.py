"""Running reconcilers over dirty keys: which keys may be decided now, and the decision
events that result. Pure, so that `kbatchd replay --verify` reruns exactly this."""

from __future__ import annotations

import traceback
from collections.abc import Container, Iterable, Sequence
from typing import Any, Final

import msgspec

from daemon.controllers.base import Cycle, Cycling, Decision, Queueing, Reconciler
from events.schema import Decided
from events.state import State


def may_decide(state: State, key: str) -> bool:
    """A key waiting to observe its own writes would decide from stale state."""
    return key not in state.awaiting


# The head of the reason of a decision whose reconciler raised (`attempt`).
RECONCILER_ERROR: Final = "ReconcilerError"


def attempt(state: State, reconciler: Reconciler, key: str) -> tuple[Decision | None, str | None]:
    """One reconciler's decision on one key, and the traceback when it raised.

    A reconciler that raises (a bug, or an object shaped as it did not foresee) costs that
    key's decision, not the daemon, which would otherwise meet the same object again after
    every restart. Its decision says so, without intents, as ``ReconcilerError: TYPE:
    MESSAGE``: logged like any other reason, reproduced by `kbatchd replay --verify` (the code
    is pure, so it raises again), shown by `--explain`. The key is decided again when
    something it reads changes."""
    return Pass(state).attempt(reconciler, key)


def _error_reason(exc: Exception) -> str:
    return " ".join(f"{RECONCILER_ERROR}: {type(exc).__name__}: {exc}".split())


def decide(
    state: State, reconciler: Reconciler, key: str, run: Pass | None = None
) -> tuple[Decided | None, Decision | None]:
    """Run one reconciler on one key (`attempt`), in the pass `run` when given (the decisions
    of one pass share its scheduling cycles). The decision event is None when there is
    nothing worth logging: no intents and the same reason as last time."""
    decision, _ = (run or Pass(state)).attempt(reconciler, key)
    return _event(state, reconciler, key, decision), decision


def _event(
    state: State, reconciler: Reconciler, key: str, decision: Decision | None
) -> Decided | None:
    if decision is None:
        return None
    previous = state.reasons.get(f"{reconciler.name} {key}")
    if not decision.intents and decision.reason == previous:
        return None
    return Decided(
        at=state.now,
        reconciler=reconciler.name,
        key=key,
        reason=decision.reason,
        intents=decision.intents,
    )


class Verdict(msgspec.Struct, frozen=True):
    key: str
    decision: Decision
    # The event to log, None when the decision has nothing new to say.
    event: Decided | None
    # The traceback when the reconciler raised (`attempt`), for the daemon's own log.
    error: str | None = None
    # The key is a queue whose reconciler raised releasing from it (`released`).
    queue: bool = False


class Released(msgspec.Struct, frozen=True):
    # In the order to decide them: what the queues released, in queue order, then the rest.
    keys: list[str]
    # A queue whose reconciler raised releasing from it: the queue key, its error reason (as
    # `attempt` words it) and the traceback. Its waiting keys are not decided in this pass.
    failed: list[Verdict]


class Pass:
    """One pass of the reconcilers over one state: the scheduling cycle of each that runs
    one (`Cycling`), begun on first use with the memo the caller keeps for it."""

    def __init__(self, state: State, memos: dict[str, Any] | None = None) -> None:
        self.state = state
        self._memos = {} if memos is None else memos
        self._cycles: dict[str, Cycle | None] = {}

    def cycle(self, reconciler: Reconciler) -> Cycle | None:
        # Looked up first: an isinstance test against a runtime-checkable protocol walks the
        # protocol's members each time, and a pass asks once per key.
        name = reconciler.name
        if name in self._cycles:
            return self._cycles[name]
        found: Cycle | None = None
        if isinstance(reconciler, Cycling):
            memo = self._memos.get(name)
            if memo is None:
                memo = self._memos[name] = reconciler.memo()
            found = reconciler.cycle(self.state, memo)
        self._cycles[name] = found
        return found

    def release(self, reconciler: Queueing, queue: str) -> list[str]:
        cycle = self.cycle(reconciler)  # type: ignore[arg-type]
        if cycle is not None:
            return cycle.release(queue)
        return reconciler.release(self.state, queue)

    def attempt(self, reconciler: Reconciler, key: str) -> tuple[Decision | None, str | None]:
        """`attempt` in this pass: in the reconciler's cycle if it runs one."""
        cycle = self.cycle(reconciler)
        try:
            if cycle is None:
                return reconciler.decide(self.state, key, self.state.now), None
            return cycle.decide(key, self.state.now), None
        except Exception as exc:
            return Decision(_error_reason(exc)), traceback.format_exc()


def released(
    state: State, reconcilers: Sequence[Reconciler], keys: Iterable[str], run: Pass | None = None
) -> Released:
    """`keys` with every queue key replaced by the keys its reconciler releases from it: those
    first, in the order released (a queue's own order), then the others sorted."""
    run = Pass(state) if run is None else run
    rest = set(keys)
    first: dict[str, None] = {}
    failed: list[Verdict] = []
    for reconciler in reconcilers:
        if not isinstance(reconciler, Queueing):
            continue
        queues = reconciler.queues
        for queue in sorted(k for k in rest if k.split("/", 1)[0] in queues):
            rest.discard(queue)
            try:
                first.update(dict.fromkeys(run.release(reconciler, queue)))
            except Exception as exc:
                # As in `attempt`: a bug here costs the queue this pass, not the daemon. Not
                # a decision (a queue is no object), so not logged as one; the daemon logs it.
                reason, trace = _error_reason(exc), traceback.format_exc()
                failed.append(Verdict(queue, Decision(reason), None, trace, queue=True))
    return Released([*first, *sorted(rest - first.keys())], failed)


def decide_all(
    state: State,
    reconcilers: Sequence[Reconciler],
    keys: Iterable[str],
    memos: dict[str, Any] | None = None,
    backing_off: Container[str] = frozenset(),
) -> list[Verdict]:
    """Every reconciler that handles a key's kind, over every key that may be decided, in a
    stable order (`released`; reconcilers in the order given). `memos`: what the reconcilers
    that run a scheduling cycle keep between passes, held by the caller. `backing_off`: keys
    whose last write failed and that wait before deciding again (the caller decides them when
    the wait ends); a queue releasing one does not cut its wait short."""
    run = Pass(state, memos)
    release = released(state, reconcilers, keys, run)
    results: list[Verdict] = list(release.failed)
    for key in release.keys:
        if not may_decide(state, key) or key in backing_off:
            continue
        kind = key.split("/", 1)[0]
        for reconciler in reconcilers:
            if kind not in reconciler.kinds:
                continue
            decision, error = run.attempt(reconciler, key)
            if decision is not None:
                event = _event(state, reconciler, key, decision)
                results.append(Verdict(key, decision, event, error))
    return results
