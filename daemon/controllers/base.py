"""The contract every controller follows: one `Controller` per package (its name, its part
of the fold, and its reconciler built from the settings), the `Reconciler` that decides, and
the `Decision` it returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import msgspec

from events.hooks import FoldHooks
from events.intents import Intent
from events.state import State

if TYPE_CHECKING:  # the settings are the service's; a controller reads its own section
    from daemon.service.config import Settings


class Decision(msgspec.Struct, frozen=True):
    """A reconciler's verdict on one key.

    `reason` is logged with the intents and is what `kbatchd replay --explain` shows; it
    should be machine-readable first (``NotAdmitted: ...``), human second. `requeue_at` asks to
    decide again at that event time (deadlines, back-off) even if nothing changes.
    """

    reason: str
    intents: tuple[Intent, ...] = ()
    requeue_at: int | None = None


class Reconciler(Protocol):
    """A pure decision function over folded state.

    `kinds` are the kinds of keys it decides on; keys are refs, ``Kind/cluster/namespace/name``.
    `decide` returns None when it has nothing to do or say about the key.
    """

    @property
    def name(self) -> str: ...

    @property
    def kinds(self) -> frozenset[str]: ...

    def decide(self, state: State, key: str, now: int) -> Decision | None: ...


@runtime_checkable
class Batching(Protocol):
    """A reconciler some of whose keys, when marked only because an object they control
    changed (a pod a kubelet moved), are decided at most once per window: the first such
    change at once, later ones when the window has passed since that decision. Upstream's
    Job controller batches its pods' events the same way (one second), so that a thousand
    pods starting cost a few syncs, not a thousand. A change of the key's own object, a timer
    it asked for, or the sight of its own decision's writes is decided at once.

    `batch_windows`: kind -> window (ms). A held key waits for every reconciler of its kind,
    so the runtime holds only kinds that all of them batch."""

    @property
    def batch_windows(self) -> Mapping[str, int]: ...


@runtime_checkable
class Queueing(Protocol):
    """A reconciler some of whose dirty keys are queues rather than objects: the fold marks a
    queue when something it waits on changed, and the reconciler says which of its keys
    are worth deciding in this pass. Decided per pass, not per event, so that a burst of
    changes costs one look at the queue."""

    @property
    def queues(self) -> frozenset[str]: ...

    def release(self, state: State, queue: str) -> list[str]: ...


class Cycle(Protocol):
    """The decisions of one pass that share a snapshot of the state (`Cycling`)."""

    def release(self, queue: str) -> list[str]: ...

    def decide(self, key: str, now: int) -> Decision | None: ...


@runtime_checkable
class Cycling(Protocol):
    """A reconciler whose decisions in one pass are one scheduling cycle: made from one
    snapshot, in the order its queues release them, each seeing what the ones before it
    took (gang admission). `memo` is what it keeps between cycles, which the runtime holds
    for it, so that the reconciler itself stays a value."""

    def memo(self) -> Any: ...

    def cycle(self, state: State, memo: Any) -> Cycle: ...


def split_ref(ref: str) -> tuple[str, str, str, str]:
    """``Kind/cluster/namespace/name`` → its four parts."""
    kind, cluster, namespace, name = ref.split("/", 3)
    return kind, cluster, namespace, name


@dataclass(frozen=True)
class Controller:
    """One controller as the daemon wires it (`daemon.service.wiring.CONTROLLERS`): what it
    folds beside the objects (`fold`: its projection and indexes, and the keys a change makes
    dirty) and its reconciler, built from the settings (`build`; its section of
    ``[reconcilers]`` is named `name`, with an ``enabled`` switch)."""

    name: str
    fold: FoldHooks
    build: Callable[[Settings], Reconciler]
