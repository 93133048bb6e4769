"""`kbatchd replay --verify`: recorded decisions must come out of the reconcilers again, and a
reconciler that is not pure is caught."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import pytest

from daemon.cli import main
from daemon.reconcilers.base import Decision
from daemon.reconcilers.runner import decide
from daemon.verify import first_difference, verify
from events.fold import fold
from events.objects import Job
from events.schema import Event, Observed, Tick
from events.state import State, empty_state
from events.store import EventLog

pytestmark = pytest.mark.anyio


class Stamping:
    """Deliberately impure: the reason carries the wall clock."""

    name = "stamping"
    kinds = frozenset({"Job"})

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        return Decision(f"Seen: at {time.time_ns()}")


class Pure:
    name = "stamping"
    kinds = frozenset({"Job"})

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        return Decision(f"Seen: {len(state.jobs)} job(s) at {now}")


async def _log_with_decisions(path: Path, reconciler: Stamping | Pure) -> None:
    """What the daemon's pump does: fold a batch, decide on the dirty keys, log the decision."""
    state = empty_state()
    async with EventLog.open(path) as log:
        for i in range(3):
            batch: list[Event] = [
                Tick(at=1_000 * i),
                Observed(at=1_000 * i + 1, cluster="c1", change="ADDED", obj=Job(name=f"j{i}")),
            ]
            dirty: set[str] = set()
            for seq, event in zip(await log.append(batch), batch, strict=True):
                fold(state, seq, event, dirty)
            decisions: list[Event] = []
            for key in sorted(k for k in dirty if k.startswith("Job/")):
                recorded, _ = decide(state, reconciler, key)
                assert recorded is not None
                decisions.append(recorded)
            for seq, event in zip(await log.append(decisions), decisions, strict=True):
                fold(state, seq, event)


async def test_pure_decisions_are_reproduced(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    await _log_with_decisions(path, Pure())
    async with EventLog.open(path, readonly=True) as log:
        result = await verify(log, [Pure()])
    assert result.divergence is None
    assert result.checked == 3


async def test_an_impure_reconciler_is_caught_at_its_first_decision(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    await _log_with_decisions(path, Stamping())
    async with EventLog.open(path, readonly=True) as log:
        result = await verify(log, [Stamping()])
    found = result.divergence
    assert found is not None
    assert (found.seq, found.reconciler, found.key) == (3, "stamping", "Job/c1//j0")
    assert found.path == "reason"
    assert found.recorded_value != found.recomputed_value
    assert [e["seq"] for e in found.fed_by] == [2]


async def test_verify_from_a_later_seq_skips_earlier_decisions(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    await _log_with_decisions(path, Pure())
    async with EventLog.open(path, readonly=True) as log:
        result = await verify(log, [Pure()], from_seq=4)
    assert result.checked == 2


@pytest.mark.parametrize(
    ("a", "b", "where"),
    [
        ({"x": 1}, {"x": 1}, "(whole)"),
        ({"x": 1, "y": [1, 2]}, {"x": 1, "y": [1, 3]}, "y[1]"),
        ({"x": {"z": "a"}}, {"x": {"z": "b"}}, "x.z"),
        ({"x": [1]}, {"x": [1, 2]}, "x (length)"),
        ({"x": 1}, None, "(whole)"),
        ({"x": 1}, {"y": 1}, "x"),
    ],
    ids=["equal", "list-item", "nested", "length", "none", "missing-key"],
)
def test_first_difference(a: object, b: object, where: str) -> None:
    assert first_difference(a, b)[0] == where


def test_the_cli_exits_1_on_a_divergence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], anyio_backend: str
) -> None:
    path = tmp_path / "log.db"
    anyio.run(_log_with_decisions, path, Pure())
    # The daemon's own reconcilers never made these decisions: "stamping" is unknown to them.
    assert main(["replay", str(path), "--verify"]) == 1
    out = capsys.readouterr().out
    assert "decision at seq 3 is not reproduced" in out
    assert "reconciler stamping" in out
    assert "a log written by another version of kbatchd diverges" in out
