"""`kbatchd replay LOG --verify`: re-run the reconcilers wherever the log records a decision
and check that they decide exactly what was recorded. This is what proves the reconcilers
pure: same state in, same decision out.

The daemon decides in passes: after folding a batch it runs the reconcilers over the dirty
keys against that one state and appends all their decisions together. So a run of
consecutive `Decided` events is one pass, and its decisions are recomputed in order against
the state just before the run, in one `Pass`: a scheduling cycle that admitted a gang earlier
in the pass counts that gang's room as taken when it decides the next, as it did live.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

import msgspec

from daemon.controllers.base import Reconciler
from daemon.controllers.runner import Pass, decide
from daemon.service import provenance
from daemon.service.config import Settings
from events.fold import fold
from events.replay import SkippedSnapshot, describe, iso_time, paused_gc, plain, snapshot_state
from events.schema import STARTED_REF, Decided, Event, Observed, Started
from events.state import State, empty_state
from events.store import EventLog
from events.topology import DEFAULT_LEVELS

Progress = Callable[[int, int], None]
Build = Callable[[Settings], Sequence[Reconciler]]


class Run(msgspec.Struct):
    """A daemon's start in the log (its `Started` event), as the check met it."""

    seq: int
    version: str
    rules: str
    # The rules digest is this kbatchd's: every decision of the run must reproduce.
    same_rules: bool
    # "recorded": decided again with the settings the run recorded; "given": with the ones
    # passed (a config), which `settings_match` says the recorded ones equal or not;
    # "unreadable": the recorded ones could not be read, the previous ones were kept.
    decided_with: Literal["recorded", "given", "unreadable"]
    settings_match: bool | None = None


class Divergence(msgspec.Struct):
    seq: int
    reconciler: str
    key: str
    recorded: dict[str, Any]
    recomputed: dict[str, Any] | None
    # The events since the snapshot the check started from that concern the key.
    fed_by: list[dict[str, Any]]
    # Where they first differ: a path into the decision and the two values there.
    path: str = ""
    recorded_value: Any = None
    recomputed_value: Any = None


class Verified(msgspec.Struct):
    checked: int
    first_seq: int
    last_seq: int
    divergence: Divergence | None = None
    # Snapshots that did not decode, folded past (`events.replay.snapshot_state`).
    skipped: list[SkippedSnapshot] = []
    # The daemon starts met on the way, oldest first.
    runs: list[Run] = []

    def run_at(self, seq: int) -> Run | None:
        """The run whose daemon made the decision at `seq`, if the log says."""
        found = None
        for run in self.runs:
            if run.seq < seq:
                found = run
        return found


async def verify(
    log: EventLog,
    reconcilers: Sequence[Reconciler],
    *,
    from_seq: int = 1,
    until: int | None = None,
    levels: tuple[str, ...] = DEFAULT_LEVELS,
    progress: Progress | None = None,
    settings: Settings | None = None,
    build: Build | None = None,
) -> Verified:
    """Re-decide every recorded decision from `from_seq` to `until` with `reconcilers`. With
    `build`, each daemon start in the log (`Started`) switches to reconcilers built from the
    settings it recorded; `settings`, the ones `reconcilers` come from, are compared with
    those recorded."""
    by_name = {r.name: r for r in reconcilers}
    runs: list[Run] = []

    def started(seq: int, event: Started) -> None:
        nonlocal by_name
        try:
            recorded: Settings | None = provenance.recorded_settings(event)
        except provenance.RecordedSettingsError:
            recorded = None
        match = None
        if settings is not None and recorded is not None:
            match = provenance.decision_settings(settings) == event.settings
        decided_with: Literal["recorded", "given", "unreadable"] = "given"
        if build is not None:
            decided_with = "recorded" if recorded is not None else "unreadable"
            if recorded is not None:
                by_name = {r.name: r for r in build(recorded)}
        same = event.rules == provenance.rules_digest()
        runs.append(Run(seq, event.version, event.rules, same, decided_with, match))

    last = log.last_seq if until is None else min(until, log.last_seq)
    state = empty_state(levels)
    found, skipped = await snapshot_state(log, max(from_seq - 1, 0))
    if found is not None:
        state = found[1]
    start = state.seq
    await log.check_chain(after=start, until=last)
    if start:
        # The daemon start in force where the check begins (those after it are met below).
        before = await log.events_for(STARTED_REF, until=start)
        for seq, event in before[-1:]:
            if isinstance(event, Started):
                started(seq, event)
    checked = 0
    # The decisions of one pass, held back until the pass ends: each is checked against the
    # state before any of them is folded, as the daemon decided them.
    pending: list[tuple[int, Decided]] = []

    async def flush() -> Divergence | None:
        nonlocal checked
        run = Pass(state)
        for seq, recorded in pending:
            if seq >= from_seq:
                checked += 1
                problem = _check(state, by_name, seq, recorded, run)
                if problem is not None:
                    problem.fed_by = await _fed_by(log, start, seq, recorded.key)
                    return problem
        for seq, recorded in pending:
            fold(state, seq, recorded)
        pending.clear()
        return None

    with paused_gc():
        async for batch in log.read_batches(from_seq=state.seq + 1, until=last):
            for seq, event in batch:
                if isinstance(event, Decided):
                    pending.append((seq, event))
                    continue
                if pending and (problem := await flush()) is not None:
                    return Verified(checked, from_seq, problem.seq, problem, skipped, runs)
                if isinstance(event, Started):
                    started(seq, event)
                fold(state, seq, event)
            if progress is not None:
                progress(state.seq, last)
        if pending and (problem := await flush()) is not None:
            return Verified(checked, from_seq, problem.seq, problem, skipped, runs)
    return Verified(checked, from_seq, last, skipped=skipped, runs=runs)


def _check(
    state: State, reconcilers: dict[str, Reconciler], seq: int, recorded: Decided, run: Pass
) -> Divergence | None:
    reconciler = reconcilers.get(recorded.reconciler)
    if reconciler is None:
        return Divergence(seq, recorded.reconciler, recorded.key, _summary(recorded), None, [])
    event, _ = decide(state, reconciler, recorded.key, run)
    if event == recorded:
        return None
    want = _summary(recorded)
    got = _summary(event) if event is not None else None
    path, left, right = first_difference(want, got)
    return Divergence(seq, recorded.reconciler, recorded.key, want, got, [], path, left, right)


def first_difference(a: Any, b: Any, path: str = "") -> tuple[str, Any, Any]:
    """The first place where two plain values differ (depth first, keys in order)."""
    if type(a) is not type(b):
        return path or "(whole)", a, b
    if isinstance(a, dict):
        for key in [*a, *(k for k in b if k not in a)]:
            if a.get(key, _MISSING) != b.get(key, _MISSING):
                return first_difference(
                    a.get(key, _MISSING), b.get(key, _MISSING), f"{path}.{key}".lstrip(".")
                )
    if isinstance(a, list):
        for index, (x, y) in enumerate(zip(a, b, strict=False)):
            if x != y:
                return first_difference(x, y, f"{path}[{index}]")
        if len(a) != len(b):
            return f"{path} (length)", len(a), len(b)
    return path or "(whole)", a, b


_MISSING: Any = "<absent>"


def _summary(event: Decided) -> dict[str, Any]:
    return {
        "at": iso_time(event.at),
        "reason": event.reason,
        "intents": [plain(intent) for intent in event.intents],
    }


async def _fed_by(log: EventLog, after: int, until: int, key: str) -> list[dict[str, Any]]:
    """The events since `after` about `key` or about objects it controls."""
    kind, cluster, namespace, name = key.split("/", 3)
    found = []
    async for batch in log.read_batches(from_seq=after + 1, until=until - 1):
        for seq, event in batch:
            if _concerns(event, key, kind, cluster, namespace, name):
                found.append({"seq": seq, "at": iso_time(event.at), "summary": describe(event)})
    return found[-50:]


def _concerns(event: Event, key: str, kind: str, cluster: str, namespace: str, name: str) -> bool:
    if isinstance(event, Decided):
        return event.key == key
    if isinstance(event, Observed):
        if event.ref == key:
            return True
        owner = event.obj.controller
        return (
            owner is not None
            and event.cluster == cluster
            and event.obj.namespace == namespace
            and owner.kind == kind
            and owner.name == name
        )
    return False
