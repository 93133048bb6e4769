"""`events.replay`: the collector pause around bulk folds."""

from __future__ import annotations

import gc
import sqlite3
from collections.abc import Iterator
from contextlib import closing, nullcontext
from pathlib import Path

import pytest

from events import replay
from events import timeline as timeline_module
from events.fold import fold
from events.replay import paused_gc, rebuild
from events.schema import Event
from events.state import State
from events.store import CorruptEvent, EventLog
from events.timeline import timeline
from tests.events.builders import make_node, make_pod, observed


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
async def test_bulk_folds_run_with_the_collector_off_and_turn_it_back_on(
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
        else:
            await timeline(log)
    assert seen == [False, False]
    assert gc.isenabled()


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "detail"),
    [(b"\xc1\xc1\xc1", "MessagePack data is malformed"), ("text, not msgpack", "")],
    ids=["malformed-msgpack", "text-not-a-blob"],
)
async def test_rebuild_names_the_seq_of_a_corrupt_event(
    tmp_path: Path, body: bytes | str, detail: str
) -> None:
    """`rebuild` decodes the rows itself (not through `EventBatch`), so it is checked here
    that a bad body still becomes `CorruptEvent` with the file and its seq."""
    path = tmp_path / "log.db"
    nodes: list[Event] = [observed(make_node(f"n{i}")) for i in range(5)]
    async with EventLog.open(path) as log:
        await log.append(nodes)
    with closing(sqlite3.connect(path)) as db, db:
        db.execute("DROP TRIGGER events_no_update")  # only vandalism gets past it
        db.execute("UPDATE events SET body = ? WHERE seq = 4", (body,))
    async with EventLog.open(path, readonly=True) as log:
        with pytest.raises(CorruptEvent) as info:
            await rebuild(log)
    assert info.value.seq == 4
    assert str(info.value).startswith(f"{path}: event seq 4 is corrupt: ")
    assert detail in str(info.value)
