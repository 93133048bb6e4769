"""`events.replay`: the collector pause around long folds; corrupt events and snapshots."""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Iterator
from contextlib import closing, nullcontext
from pathlib import Path

import pytest

from daemon.tools import timeline as timeline_module
from daemon.tools.timeline import timeline
from events import replay
from events.fold import fold
from events.replay import paused_gc, rebuild
from events.schema import Event
from events.state import State, empty_state, encode_state
from events.store import BrokenChain, CorruptEvent, CorruptLog, EventLog
from tests.events.builders import make_node, make_pod, observed, vandalize


@pytest.fixture
def collector() -> Iterator[None]:
    """Whatever a test does to the collector, it is on again afterwards."""
    yield
    gc.enable()


@pytest.mark.parametrize(
    ("enabled_before", "raises"),
    [(True, False), (False, False), (True, True), (False, True)],
)
def test_paused_gc_is_off_inside_and_as_before_after(
    collector: None, enabled_before: bool, raises: bool
) -> None:
    (gc.enable if enabled_before else gc.disable)()
    inside = None
    with pytest.raises(RuntimeError) if raises else nullcontext(), paused_gc():
        inside = gc.isenabled()
        if raises:
            raise RuntimeError("fold failed")
    assert inside is False
    assert gc.isenabled() is enabled_before


@pytest.mark.anyio
@pytest.mark.parametrize("tool", ["rebuild", "timeline"])
async def test_long_folds_run_with_the_collector_off_and_turn_it_back_on(
    collector: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str
) -> None:
    events: list[Event] = [observed(make_node("n1")), observed(make_pod("p1", node="n1"))]
    async with EventLog.open(tmp_path / "log.db") as log:
        await log.append(events)
    seen: list[bool] = []

    def spy(state: State, seq: int, event: Event) -> State:
        seen.append(gc.isenabled())
        return fold(state, seq, event)

    monkeypatch.setattr(replay, "fold", spy)
    monkeypatch.setattr(timeline_module, "fold", spy)
    gc.enable()
    async with EventLog.open(tmp_path / "log.db", readonly=True) as log:
        if tool == "rebuild":
            replayed = await rebuild(log)
            assert sorted(replayed.state.pods) == ["c1/ns/p1"]
            assert seen == [False, False]
        else:
            await timeline(log)
            assert seen == [False, False]
    assert gc.isenabled()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "prefix", "detail"),
    [
        (b"\xc1\xc1\xc1", "event seq 4 is corrupt: ", "MessagePack data is malformed"),
        ("text, not msgpack", "the log breaks at seq 4: ", "not of their types"),
    ],
    ids=["malformed-msgpack", "text-not-a-blob"],
)
async def test_rebuild_names_the_seq_of_a_corrupt_event(
    tmp_path: Path, body: bytes | str, prefix: str, detail: str
) -> None:
    path = tmp_path / "log.db"
    nodes: list[Event] = [observed(make_node(f"n{i}")) for i in range(5)]
    async with EventLog.open(path) as log:
        await log.append(nodes)
    # Rechained: a body the digest chain vouches for (text is not one it can).
    vandalize(
        path, "UPDATE events SET body = ? WHERE seq = 4", body, rechain=isinstance(body, bytes)
    )
    async with EventLog.open(path, readonly=True) as log:
        with pytest.raises(CorruptLog) as info:
            await rebuild(log)
    assert isinstance(info.value, CorruptEvent | BrokenChain)
    assert info.value.seq == 4
    assert str(info.value).startswith(f"{path}: {prefix}")
    assert detail in str(info.value)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("corrupt", "until", "used", "skipped"),
    [
        pytest.param((), None, 9, [], id="none-corrupt"),
        pytest.param((9,), None, 6, [9], id="newest-corrupt"),
        pytest.param((9, 6), None, 3, [9, 6], id="two-corrupt"),
        pytest.param((9, 6, 3), None, None, [9, 6, 3], id="all-corrupt-from-the-first-event"),
        pytest.param((9,), 7, 6, [], id="corrupt-one-after-the-point-not-read"),
        pytest.param((6,), 8, 3, [6], id="corrupt-one-before-the-point"),
    ],
)
async def test_a_snapshot_that_does_not_decode_is_folded_past(
    tmp_path: Path,
    corrupt: tuple[int, ...],
    until: int | None,
    used: int | None,
    skipped: list[int],
) -> None:
    path = tmp_path / "log.db"
    events: list[Event] = [observed(make_node(f"n{i}")) for i in range(10)]
    async with EventLog.open(path) as log:
        await log.append(events)
        whole = await rebuild(log)
        for seq in (3, 6, 9):
            partial = await rebuild(log, until=seq)
            await log.save_snapshot(seq, encode_state(partial.state))
    with closing(sqlite3.connect(path)) as db, db:
        for seq in corrupt:
            db.execute("UPDATE snapshots SET body = x'c1c1' WHERE seq = ?", (seq,))
    async with EventLog.open(path, readonly=True) as log:
        replayed = await rebuild(log, until=until)
        expected = whole if until is None else await rebuild_from_empty(log, until)
    assert replayed.snapshot == used
    assert [s.seq for s in replayed.skipped] == skipped
    assert all("MessagePack data is malformed" in s.reason for s in replayed.skipped)
    assert replayed.state == expected.state


async def rebuild_from_empty(log: EventLog, until: int) -> replay.Replayed:
    state = empty_state()
    async for seq, event in log.read(until=until):
        fold(state, seq, event)
    return replay.Replayed(state=state, snapshot=None, folded=until, last_seq=until)
