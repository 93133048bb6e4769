"""What the fold keeps for the multi-cluster dispatcher (`daemon.controllers.multicluster`).

- **Claims.** A cross-cluster preemption is written on the manager's workload as the
  annotation ``kbatchd.dev/claim`` (the `Claim`, JSON), by the decision that reserves it, and
  taken off by the one that commits or aborts it (or by a better-ranked preemptor's decision
  that takes its place). ``State.claims`` follows the decisions only: a claim binds every
  other decision from the moment it is logged, and the log alone says whether it still
  stands. (Two decisions' writes to one object may land in either order; the annotation is
  for people to read.) A workload that is deleted takes its claim with it.
- **Placements.** The worker a workload runs in is ``State.placed`` from the decision that
  chose it (``Admitted``, ``Committed``: it writes ``kbatchd.dev/cluster``), as a claim is:
  a restart after the decision finishes it in that worker, whichever of its writes landed.
- **Refusals.** A worker's final no to a victim's mark or delete (any 4xx but 404, gone
  already, and 409, a conflict to decide again from) is kept in ``State.refusals`` until the
  workload is placed (a decision writes ``kbatchd.dev/cluster`` on it) or deleted: the claim
  is aborted, and the workload's next plans spare that victim for a while. A worker that gave
  no answer is in ``State.unreachable`` (the fold's), and every claim on it is woken.
- **Who to wake.** A claimed victim going, and any change of a worker's copy (which names the
  manager's workload in ``kbatchd.dev/origin``), make the manager's workload dirty.
"""

from __future__ import annotations

from typing import Any, Final

import msgspec

from events.hooks import Change, Dirty, FoldHooks
from events.intents import Delete, Intent, Patch
from events.objects import KObject, Pod
from events.schema import Decided, Outcome
from events.state import Claim, Refusal, State

# On the manager's workload: its cross-cluster preemption under way (a `Claim`, JSON).
CLAIM: Final = "kbatchd.dev/claim"
# On a worker's copy: the manager's workload it copies (its ref).
ORIGIN: Final = "kbatchd.dev/origin"
# On the manager's workload: the worker it runs in, once one took it.
PLACED: Final = "kbatchd.dev/cluster"
# The kinds a workload submitted to the manager can be.
WORKLOAD_KINDS: Final = frozenset({"Job", "JobSet"})

_decode = msgspec.json.Decoder(Claim).decode


def encode_claim(claim: Claim) -> str:
    # Sets sorted: a set's order changes with each process's string hashing, and a decision
    # must come out of a replay byte for byte.
    return msgspec.json.encode(claim, order="deterministic").decode()


def decode_claim(text: str) -> Claim | None:
    """The claim an annotation holds; None for a malformed one (the workload's decision
    reports it), so that one bad annotation never stops the fold."""
    try:
        return _decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None


# Final answers that refuse nothing: the pod is gone already, or the write met another.
_NOT_REFUSALS: Final = frozenset({0, 404, 409})


def _set(state: State, ref: str, text: object) -> None:
    claim = decode_claim(text) if isinstance(text, str) else None
    if claim is None:
        state.claims.pop(ref, None)
    else:
        state.claims[ref] = claim


def claims_decided(state: State, seq: int, decision: Decided) -> None:
    """A decision that writes or removes a workload's claim annotation sets ``State.claims``."""
    for intent in decision.intents:
        if type(intent) is not Patch or intent.kind not in WORKLOAD_KINDS:
            continue
        body: Any = intent.patch
        meta = body.get("metadata") if isinstance(body, dict) else None
        notes = meta.get("annotations") if isinstance(meta, dict) else None
        if not isinstance(notes, dict):
            continue
        if CLAIM in notes:
            _set(state, intent.ref, notes[CLAIM])
        worker = notes.get(PLACED)
        if isinstance(worker, str) and worker:
            state.placed[intent.ref] = worker
            state.refusals.pop(intent.ref, None)


def claims_failed(
    state: State, decision: Decided, intent: Intent, outcome: Outcome, dirty: Dirty | None
) -> None:
    """A claim's victim the worker refused to mark or delete goes in ``State.refusals``; a
    worker that gave no answer wakes every claim on it."""
    if not state.claims:
        return
    if outcome.code == 0:
        if dirty is not None:
            dirty.update(c.preemptor for c in state.claims.values() if c.cluster == intent.cluster)
        return
    if type(intent) not in (Patch, Delete) or intent.kind != "Pod":
        return
    claim = state.claims.get(decision.key)
    if claim is None or intent.cluster != claim.cluster or intent.key not in claim.victims:
        return
    if outcome.code not in _NOT_REFUSALS:
        why = f"{outcome.code} {outcome.message}".strip()
        state.refusals.setdefault(claim.preemptor, {})[intent.key] = Refusal(why, outcome.at)


def _workload_observed(state: State, change: Change, dirty: Dirty | None) -> None:
    obj: KObject | None = change.new
    if obj is None and (state.claims or state.placed or state.refusals):
        ref = f"{type(change.obj).__name__}/{change.key}"
        state.claims.pop(ref, None)
        state.refusals.pop(ref, None)
        state.placed.pop(ref, None)
    if dirty is not None:
        copied = (obj or change.old or change.obj).annotations.get(ORIGIN)
        if copied:
            dirty.add(copied)


def _pod_observed(state: State, change: Change, dirty: Dirty | None) -> None:
    if dirty is None or not state.claims:
        return
    new: Pod | None = change.new
    if new is not None and not new.terminal and new.deletion_ts is None:
        return
    for claim in state.claims.values():
        if change.key in claim.victims:
            dirty.add(claim.preemptor)


FOLD: Final = FoldHooks(
    observed={"Job": _workload_observed, "JobSet": _workload_observed, "Pod": _pod_observed},
    decided=claims_decided,
    failed=claims_failed,
)
