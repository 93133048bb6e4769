"""A log as JSON lines: every event survives the trip with field names; export → import →
export is the same text; a bad file is refused at its line and leaves nothing behind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from hypothesis import HealthCheck, given, settings

from daemon.cli import main
from daemon.tools.jsonl import JsonlError, decode_line, encode_line, export, import_file
from daemon.tools.synthetic import stream
from events.fold import fold
from events.replay import rebuild, summary
from events.schema import Event, Tick
from events.state import empty_state, encode_state
from events.store import EventLog
from tests.events.replay_story import story
from tests.events.test_fold_properties import Stream, streams
from tests.events.test_schema import EVENTS

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("event", EVENTS, ids=[f"{type(e).__name__}-{e.at}" for e in EVENTS])
def test_every_kind_of_event_round_trips(event: Event) -> None:
    seq, back = decode_line(encode_line(7, event))
    assert seq == 7
    assert type(back) is type(event)
    assert back == event


@settings(max_examples=50, suppress_health_check=[HealthCheck.too_slow])
@given(streams())
def test_generated_streams_round_trip(generated: Stream) -> None:
    _, events = generated
    for seq, event in enumerate(events, 1):
        assert decode_line(encode_line(seq, event)) == (seq, event)


def test_lines_have_field_names_and_leave_defaults_out() -> None:
    assert encode_line(1, Tick(at=5)) == b'{"seq":1,"event":{"type":"tick","at":5}}'
    data = msgspec.json.decode(encode_line(2, EVENTS[1]))
    assert data["event"]["obj"]["kind"] == "Pod"
    assert data["event"]["obj"]["owners"][0] == {
        "kind": "Job",
        "name": "j",
        "uid": "uid-job-j",
        "controller": True,
    }
    assert "deletion_ts" not in data["event"]["obj"]  # at its default (None)


async def _log(path: Path, events: list[Event], snapshot_at: int | None = None) -> None:
    state = empty_state()
    async with EventLog.open(path) as log:
        for seq, event in zip(await log.append(events), events, strict=True):
            fold(state, seq, event)
            if seq == snapshot_at:
                await log.save_snapshot(seq, encode_state(state))


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


async def _export(log_path: Path, out: Path) -> str:
    async with EventLog.open(log_path, readonly=True) as log:
        await export(log, out)
    return _text(out)


async def _summary(path: Path) -> dict[str, Any]:
    async with EventLog.open(path, readonly=True) as log:
        data = summary(await rebuild(log), "")
    return {k: v for k, v in data.items() if k not in ("log", "snapshot", "folded")}


async def _events(path: Path) -> list[tuple[int, Event]]:
    async with EventLog.open(path, readonly=True) as log:
        return [pair async for pair in log.read()]


async def test_export_import_export_is_the_same_text(tmp_path: Path) -> None:
    events = story().events + list(stream(2_000, nodes=16))
    original = tmp_path / "original.db"
    await _log(original, events, snapshot_at=1_000)
    first = await _export(original, tmp_path / "first.jsonl")
    header = f'{{"format":"kbatchd-events","version":1,"events":{len(events)}}}'
    assert first.splitlines()[0] == header
    copy = tmp_path / "copy.db"
    assert await import_file(tmp_path / "first.jsonl", copy) == len(events)
    assert await _export(copy, tmp_path / "second.jsonl") == first
    assert await _events(copy) == await _events(original)
    assert await _summary(copy) == await _summary(original)
    # Nothing of the import is left beside it (reads leave SQLite's -wal and -shm files).
    assert not [name for name in _names(tmp_path) if name.startswith(".")]


async def test_export_until_a_seq(tmp_path: Path) -> None:
    original = tmp_path / "original.db"
    await _log(original, story().events)
    async with EventLog.open(original, readonly=True) as log:
        assert await export(log, tmp_path / "part.jsonl", until=10) == 10
    assert len((tmp_path / "part.jsonl").read_text().splitlines()) == 11


async def test_export_never_overwrites(tmp_path: Path) -> None:
    original = tmp_path / "original.db"
    await _log(original, story().events[:3])
    taken = tmp_path / "taken.jsonl"
    taken.write_text("mine\n")
    async with EventLog.open(original, readonly=True) as log:
        with pytest.raises(JsonlError, match="already exists"):
            await export(log, taken)
    assert taken.read_text() == "mine\n"


HEADER = '{"format":"kbatchd-events","version":1,"events":2}'
TICK1 = '{"seq":1,"event":{"type":"tick","at":5}}'
TICK2 = '{"seq":2,"event":{"type":"tick","at":6}}'


@pytest.mark.parametrize(
    ("lines", "where", "message"),
    [
        ([HEADER, TICK1, "{not json"], 3, "malformed"),
        ([HEADER, TICK1, TICK2.replace("6", '"six"')], 3, "Expected `int`, got `str`"),
        ([HEADER, TICK1, TICK2.replace('"at"', '"at":1,"when"')], 3, "unknown field `when`"),
        ([HEADER, TICK1, '{"seq":2,"event":{"type":"decided","at":1}}'], 3, "`reconciler`"),
        ([HEADER, TICK1, '{"seq":2,"event":{"type":"gadget","at":1}}'], 3, "'gadget'"),
        ([HEADER, TICK2], 2, "seq 2, expected 1"),
        ([TICK1, TICK2], 1, "not a kbatchd event export"),
        ([HEADER.replace("1,", "9,"), TICK1], 1, "version 9 is not"),
        ([HEADER, TICK1], None, "promises 2 event(s) but the file holds 1"),
    ],
    ids=[
        "not-json",
        "wrong-type",
        "unknown-field",
        "missing-field",
        "unknown-event",
        "seq-gap",
        "no-header",
        "newer-format",
        "truncated",
    ],
)
async def test_a_bad_file_is_refused_at_its_line_and_leaves_nothing(
    tmp_path: Path, lines: list[str], where: int | None, message: str
) -> None:
    source = tmp_path / "bad.jsonl"
    source.write_text("\n".join(lines) + "\n")
    target = tmp_path / "new.db"
    with pytest.raises(JsonlError) as caught:
        await import_file(source, target)
    text = str(caught.value)
    assert text.startswith(f"{source}:{where}: " if where else f"{source}: "), text
    assert message in text
    assert _names(tmp_path) == ["bad.jsonl"]


async def test_import_never_touches_an_existing_log(tmp_path: Path) -> None:
    source = tmp_path / "ok.jsonl"
    source.write_text("\n".join([HEADER, TICK1, TICK2]) + "\n")
    target = tmp_path / "existing.db"
    target.write_bytes(b"precious")
    with pytest.raises(JsonlError, match="already exists"):
        await import_file(source, target)
    assert target.read_bytes() == b"precious"


def test_the_cli_prints_one_line_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "bad.jsonl"
    source.write_text("\n".join([HEADER, TICK1, "{not json"]) + "\n")
    assert main(["replay", str(tmp_path / "new.db"), "--import-jsonl", str(source)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kbatchd: --import-jsonl {source}:3: ")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "new.db").exists()


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    source = tmp_path / "ok.jsonl"
    source.write_text("\n".join([HEADER, "", TICK1, "  ", TICK2, ""]) + "\n")
    assert anyio.run(import_file, source, tmp_path / "new.db") == 2
