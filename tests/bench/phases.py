"""Pods reaching a phase in a simulated cluster, seen as its store writes them."""

from __future__ import annotations

import time
from typing import Any

import anyio

from daemon.sim.resources import PODS
from daemon.sim.store import Store, WatchEvent


def phase_of(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else (obj.get("status") or {}).get("phase")


class PhaseCount:
    """Counts pods turning `phase`, as whoever sees them says (`see`), and notes the moment the
    `count`th one does."""

    def __init__(self, count: int, phase: str) -> None:
        self.count = count
        self.phase = phase
        self.done = 0
        self.at = 0.0
        self._all = anyio.Event()

    def see(self, phase: str) -> None:
        """A pod turned `phase` (from another one)."""
        if phase == self.phase:
            self.done += 1
            if self.done == self.count:
                self.at = time.perf_counter()
                self._all.set()

    async def wait(self) -> float:
        """Until the `count`th pod is in the phase; returns when it turned
        (`time.perf_counter`)."""
        await self._all.wait()
        return self.at


class Reached(PhaseCount):
    """A `PhaseCount` of the pods a simulated cluster stores (a store listener). Waiting so
    costs nothing while the pods run; a scan of every pod to see would be measured too (70,000
    pods scanned each second blocked the simulated cluster for tens of milliseconds, and knew
    the end to a second at best)."""

    def __init__(self, store: Store, count: int, phase: str) -> None:
        super().__init__(count, phase)
        self._store = store
        store.listeners.append(self._see)

    def _see(self, event: WatchEvent) -> None:
        if event.resource is not PODS or event.type == "DELETED":
            return
        phase = phase_of(event.obj)
        if phase is not None and phase != phase_of(event.prev):
            self.see(phase)

    async def wait(self) -> float:
        """`PhaseCount.wait`; the listener is gone afterwards."""
        try:
            return await super().wait()
        finally:
            self._store.listeners.remove(self._see)
