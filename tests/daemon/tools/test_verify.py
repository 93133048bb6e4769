"""`kbatchd replay --verify`: recorded decisions must come out of the reconcilers again, and a
reconciler that is not pure is caught."""

from __future__ import annotations

import time
from pathlib import Path

import anyio
import msgspec
import pytest

from daemon.cli import main
from daemon.controllers.base import Decision, Reconciler
from daemon.controllers.gang.settings import GangSettings
from daemon.controllers.runner import decide, decide_all
from daemon.service import provenance
from daemon.service.config import Reconcilers, Settings
from daemon.tools.verify import Run, first_difference, verify
from events.fold import fold
from events.objects import Job
from events.schema import Event, Observed, Started, Tick
from events.state import State, empty_state, encode_state
from events.store import EventLog
from tests.daemon.controllers.gang_builders import REC, member, nodes, podgroup

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


class Configured:
    """Decides from a setting, as the daemon's reconcilers do."""

    name = "stamping"
    kinds = frozenset({"Job"})

    def __init__(self, settings: Settings) -> None:
        self.scheduler = settings.reconcilers.gang.scheduler_name

    def decide(self, state: State, key: str, now: int) -> Decision | None:
        return Decision(f"Seen: for {self.scheduler}")


def _configured(settings: Settings) -> list[Reconciler]:
    return [Configured(settings)]


OTHER = Settings(reconcilers=Reconcilers(gang=GangSettings(scheduler_name="other")))


async def _log_with_decisions(
    path: Path, reconciler: Stamping | Pure | Configured, start: Started | None = None
) -> None:
    """What the daemon's pump does: fold a batch, decide on the dirty keys, log the decision;
    `start` first, as the daemon records itself when it opens its log."""
    state = empty_state()
    async with EventLog.open(path) as log:
        if start is not None:
            (seq,) = await log.append([start])
            fold(state, seq, start)
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
    assert "the log does not say which kbatchd made this decision" in out


async def test_decisions_are_redecided_with_the_settings_their_daemon_recorded(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    await _log_with_decisions(path, Configured(OTHER), provenance.started(OTHER, at=0))
    async with EventLog.open(path, readonly=True) as log:
        followed = await verify(log, _configured(Settings()), build=_configured)
        given = await verify(log, _configured(Settings()), settings=Settings())
    assert followed.divergence is None
    assert followed.checked == 3
    assert followed.runs == [
        Run(1, provenance.kbatchd_version(), provenance.rules_digest(), True, "recorded")
    ]
    assert given.divergence is not None
    assert given.divergence.seq == 4  # the first decision, after the start and a batch
    assert given.runs[0].decided_with == "given"
    assert given.runs[0].settings_match is False
    assert given.run_at(4) == given.runs[0]
    assert given.run_at(1) is None


async def test_verify_from_a_snapshot_finds_the_start_in_force(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    await _log_with_decisions(path, Configured(OTHER), provenance.started(OTHER, at=0))
    async with EventLog.open(path) as log:
        state = empty_state()
        async for seq, event in log.read(1, 5):
            fold(state, seq, event)
        await log.save_snapshot(5, encode_state(state))
    async with EventLog.open(path, readonly=True) as log:
        result = await verify(log, _configured(Settings()), from_seq=6, build=_configured)
    assert result.divergence is None
    assert result.checked == 2
    assert [run.seq for run in result.runs] == [1]


async def test_settings_this_kbatchd_cannot_read_keep_the_previous_ones(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    start = provenance.started(Settings(), at=0)
    unknown = {**start.settings, "reconcilers": {"gang": {"no_such_setting": 1}}}
    await _log_with_decisions(
        path, Configured(Settings()), msgspec.structs.replace(start, settings=unknown)
    )
    async with EventLog.open(path, readonly=True) as log:
        result = await verify(log, _configured(Settings()), build=_configured)
    assert result.divergence is None
    assert result.runs[0].decided_with == "unreadable"


@pytest.mark.parametrize(
    ("rules", "config", "says", "notes"),
    [
        (None, False, "a decision that does not reproduce is a bug", ""),
        ("0123456789abcdef", False, "made by kbatchd", ""),
        (None, True, "a decision that does not reproduce is a bug", "ran with other reconciler"),
    ],
    ids=["same-rules", "other-rules", "config-differs"],
)
def test_the_cli_says_which_rules_made_a_decision_that_diverges(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    anyio_backend: str,
    rules: str | None,
    config: bool,
    says: str,
    notes: str,
) -> None:
    path = tmp_path / "log.db"
    start = provenance.started(OTHER, at=0)
    if rules is not None:
        start = msgspec.structs.replace(start, rules=rules)
    # The daemon's reconcilers never made these decisions ("stamping" is unknown to them).
    anyio.run(_log_with_decisions, path, Configured(OTHER), start)
    argv = ["replay", str(path), "--verify"]
    if config:
        (tmp_path / "kbatchd.toml").write_text("")
        argv += ["--config", str(tmp_path / "kbatchd.toml")]
    assert main(argv) == 1
    captured = capsys.readouterr()
    assert says in captured.out
    if rules is not None:
        assert f"decision rules {rules} (daemon started at seq 1)" in captured.out
        assert f"these are {provenance.rules_digest()}" in captured.out
    assert notes in captured.err


async def test_two_gangs_decided_in_one_pass_are_reproduced_in_one_pass(tmp_path: Path) -> None:
    """The second gang of a pass is placed around the first (the pass's scheduling cycle
    counts the first's room as taken): verify recomputes the pass the same way."""
    path = tmp_path / "log.db"
    state = empty_state()
    host = nodes("blocks=1,racks=1,hosts=2,gpus=8")
    objects = [*host, podgroup("a", 1), member("a-0", "a", gpus=4)]
    objects += [podgroup("b", 1), member("b-0", "b", gpus=8)]
    async with EventLog.open(path) as log:
        batch: list[Event] = [Observed(at=1, cluster="c1", change="ADDED", obj=o) for o in objects]
        for seq, event in zip(await log.append(batch), batch, strict=True):
            fold(state, seq, event)
        verdicts = decide_all(state, [REC], ["PodGroup/c1/ns/a", "PodGroup/c1/ns/b"])
        decisions: list[Event] = [v.event for v in verdicts if v.event is not None]
        assert len(decisions) == 2
        await log.append(decisions)
    async with EventLog.open(path, readonly=True) as log:
        result = await verify(log, [REC])
    assert result.divergence is None, result.divergence
    assert result.checked == 2
