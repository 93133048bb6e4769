"""The contract between the fold and the controllers: what a controller folds beside the
objects themselves (its projection and indexes, `State` fields it owns) and which of its keys
a change makes dirty.

A controller names, per object kind, a hook called with each observed change of that kind,
and optionally a hook called with each decision that has intents, one with each intent that
failed, and one with a state decoded from a snapshot (to build an index older snapshots
lack). Hooks are pure: they read and write the state and add refs to `dirty` (None while
replaying, when no one decides).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

import msgspec

from events.objects import KINDS

if TYPE_CHECKING:
    from events.intents import Intent
    from events.schema import Decided, Outcome
    from events.state import State

Dirty = set[str]


class Change(msgspec.Struct, frozen=True, gc=False):
    """One observed change, as the fold applied it: the object as the watch sent it, the
    version the state held before (`old`) and holds now (`new`, None once deleted), and
    whether it moved usage on the topology (a pod's charge, a node's capacity)."""

    cluster: str
    key: str
    obj: Any
    old: Any
    new: Any
    moved: bool


ObservedHook = Callable[["State", Change, "Dirty | None"], None]
DecidedHook = Callable[["State", int, "Decided"], None]
# An intent of a decision that failed (not one a restart could not confirm): the decision,
# the intent, its outcome.
FailedHook = Callable[["State", "Decided", "Intent", "Outcome", "Dirty | None"], None]
RestoredHook = Callable[["State"], None]


class FoldHooks(msgspec.Struct, frozen=True):
    """One controller's part of the fold."""

    # Object kind (``Pod``, ``Job``, ...) -> its hook.
    observed: Mapping[str, ObservedHook] = {}
    decided: DecidedHook | None = None
    failed: FailedHook | None = None
    restored: RestoredHook | None = None


class Wired:
    """The hooks of the wired controllers, by the object class they observe, in wiring order."""

    __slots__ = ("decided", "failed", "observed", "restored")

    def __init__(self, controllers: Iterable[FoldHooks] = ()) -> None:
        self.observed: dict[type, tuple[ObservedHook, ...]] = {}
        decided: list[DecidedHook] = []
        failed: list[FailedHook] = []
        restored: list[RestoredHook] = []
        for hooks in controllers:
            for kind, hook in hooks.observed.items():
                cls = KINDS[kind]
                self.observed[cls] = (*self.observed.get(cls, ()), hook)
            if hooks.decided is not None:
                decided.append(hooks.decided)
            if hooks.failed is not None:
                failed.append(hooks.failed)
            if hooks.restored is not None:
                restored.append(hooks.restored)
        self.decided: tuple[DecidedHook, ...] = tuple(decided)
        self.failed: tuple[FailedHook, ...] = tuple(failed)
        self.restored: tuple[RestoredHook, ...] = tuple(restored)
