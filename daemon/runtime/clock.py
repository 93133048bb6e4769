"""The fold's clock: the `Tick` events that move the log's time on when nothing else does.

Timers (`Decision.requeue_at`, back-off, batch windows) fall due on the fold's clock, which
only events move. With watch events flowing they carry it; in a quiet spell only a Tick
does. A Tick every `tick_seconds` alone would make a timer wait for the next one, up to a
whole period late (a Job's held decision, its pods' back-off). So the pump tells the clock
when the earliest timer falls due, and the clock ticks then as well.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anyio

from daemon.kube.ingest import now_ms
from events.schema import Event, Tick


class Clock:
    """A Tick at least every `period` seconds, and one as soon as the armed time comes, but
    never two within `spacing` seconds: a quiet spell with many timers a few ms apart then
    costs a Tick (a log record and a pass) per spacing, not per timer."""

    def __init__(
        self,
        period: float,
        spacing: float,
        send: Callable[[list[Event]], Awaitable[None]],
        now: Callable[[], int] = now_ms,
    ) -> None:
        self.period, self.spacing = period, spacing
        self._send, self._now = send, now
        self._armed: int | None = None  # event time (ms) of the earliest timer
        self._rearmed = anyio.Event()

    def arm(self, at: int | None) -> None:
        """Tick by `at` (ms, the fold's clock), in place of any time armed before; None: only
        the period's Ticks."""
        if at != self._armed:
            self._armed = at
            self._rearmed.set()

    def delay(self, last: int) -> float:
        """Seconds from now to the next Tick, given the last one at `last` (ms)."""
        due = last + self.period * 1000
        if self._armed is not None:
            due = min(due, max(self._armed, last + self.spacing * 1000))
        # Bounded by the period: a wall clock set back must not stop the Ticks.
        return min(self.period, max(0.0, (due - self._now()) / 1000))

    async def run(self) -> None:
        last = self._now()
        while True:
            self._rearmed = anyio.Event()
            with anyio.move_on_after(self.delay(last)):
                await self._rearmed.wait()
                continue  # armed anew: work the delay out again
            last = self._now()
            if self._armed is not None and self._armed <= last:
                self._armed = None  # the pump arms the next one after the pass this starts
            await self._send([Tick(at=last)])
