"""The clock's Ticks: every period, and as soon as the earliest timer falls due."""

from __future__ import annotations

from dataclasses import dataclass

import anyio
import pytest

from daemon.kube.ingest import now_ms
from daemon.runtime.clock import Clock
from events.schema import Event, Tick


async def _nowhere(events: list[Event]) -> None:
    raise AssertionError("not run")


@dataclass(frozen=True)
class Row:
    armed: int | None
    now: int
    seconds: float


# A clock of a 1 s period and 0.02 s spacing whose last Tick was at 10,000 ms.
@pytest.mark.parametrize(
    "row",
    [
        pytest.param(Row(None, 10_000, 1.0), id="period"),
        pytest.param(Row(None, 10_400, 0.6), id="period-part-gone"),
        pytest.param(Row(10_300, 10_100, 0.2), id="armed-sooner"),
        pytest.param(Row(12_000, 10_000, 1.0), id="armed-after-the-period"),
        pytest.param(Row(10_005, 10_000, 0.02), id="no-sooner-than-spacing"),
        pytest.param(Row(9_000, 10_500, 0.0), id="armed-in-the-past"),
        pytest.param(Row(None, 12_000, 0.0), id="period-overdue"),
        pytest.param(Row(None, 5_000, 1.0), id="wall-clock-set-back"),
    ],
)
def test_delay(row: Row) -> None:
    clock = Clock(1.0, 0.02, _nowhere, now=lambda: row.now)
    clock.arm(row.armed)
    assert clock.delay(10_000) == pytest.approx(row.seconds)


@pytest.mark.anyio
async def test_the_clock_ticks_when_the_armed_time_comes_not_a_period_later() -> None:
    tx, rx = anyio.create_memory_object_stream[list[Event]](10)
    clock = Clock(10.0, 0.0, tx.send)
    async with anyio.create_task_group() as tg:
        tg.start_soon(clock.run)
        with anyio.fail_after(5):  # half the period
            for ahead in (100, 300):
                clock.arm(now_ms() + 60_000)
                armed = now_ms() + ahead
                clock.arm(armed)  # sooner: the clock works its wait out again
                (tick,) = await rx.receive()
                assert isinstance(tick, Tick)
                assert tick.at >= armed
        tg.cancel_scope.cancel()
