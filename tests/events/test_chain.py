"""The log's digest chain: the pure links and walk (`events.chain`), and what a writer's
start, a replay and `check_whole` report for each kind of damage, before and after the
newest snapshot (`events.store`)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import anyio
import msgspec
import pytest

from daemon.tools.synthetic import stream
from events.chain import GENESIS, ChainBroken, Walk, link, links
from events.fold import fold
from events.replay import open_for_replay, rebuild
from events.schema import Event, encode_event, event_ref
from events.state import empty_state, encode_state
from events.store import BrokenChain, EventLog, check_whole
from tests.events.builders import vandalize

# ---------------------------------------------------------------------------------------------
# The pure chain

ROW = (7, 1_000, "Pod/c/ns/p", b"\x93body")


@pytest.mark.parametrize(
    ("other", "previous"),
    [
        pytest.param((8, 1_000, "Pod/c/ns/p", b"\x93body"), GENESIS, id="seq"),
        pytest.param((7, 1_001, "Pod/c/ns/p", b"\x93body"), GENESIS, id="at"),
        pytest.param((7, 1_000, "Pod/c/ns/q", b"\x93body"), GENESIS, id="ref"),
        pytest.param((7, 1_000, "Pod/c/ns/p", b"\x93bodz"), GENESIS, id="body"),
        pytest.param((7, 1_000, "Pod/c/ns/pb", b"\x93ody"[1:]), GENESIS, id="ref-body-boundary"),
        pytest.param(ROW, b"\x01" * 16, id="previous"),
    ],
)
def test_every_stored_field_and_the_previous_digest_change_the_link(
    other: tuple[int, int, str, bytes], previous: bytes
) -> None:
    assert link(GENESIS, *ROW) != link(previous, *other)


def test_no_ref_is_not_the_empty_ref() -> None:
    assert link(GENESIS, 1, 0, None, b"x") != link(GENESIS, 1, 0, "", b"x")


def test_links_continue_the_chain_one_event_at_a_time() -> None:
    ats, refs, bodies = [1, 2, 3], ["a", None, "c"], [b"x", b"y", b"z"]
    one = link(GENESIS, 5, 1, "a", b"x")
    two = link(one, 6, 2, None, b"y")
    assert links(GENESIS, 5, ats, refs, bodies) == [one, two, link(two, 7, 3, "c", b"z")]


def _chained(count: int) -> list[tuple[int, int, str | None, bytes, bytes | None]]:
    rows: list[tuple[int, int, str | None, bytes, bytes | None]] = []
    digest = GENESIS
    for seq in range(1, count + 1):
        at, ref, body = 100 + seq, f"Pod/c/ns/p{seq}", b"body%d" % seq
        digest = link(digest, seq, at, ref, body)
        rows.append((seq, at, ref, body, digest))
    return rows


Rows = list[tuple[int, int, str | None, bytes, bytes | None]]


def _drop(seq: int) -> Callable[[Rows], Rows]:
    return lambda rows: [r for r in rows if r[0] != seq]


def _change(seq: int, field: int, value: object) -> Callable[[Rows], Rows]:
    def change(rows: Rows) -> Rows:
        return [
            (*r[:field], value, *r[field + 1 :]) if r[0] == seq else r  # type: ignore[misc]
            for r in rows
        ]

    return change


@pytest.mark.parametrize(
    ("damage", "broken", "reason"),
    [
        pytest.param(lambda rows: rows, None, "", id="intact"),
        pytest.param(_drop(4), 4, "the event is missing (the next one is seq 5)", id="missing"),
        pytest.param(_drop(10), 10, "the event is missing (the log holds up to 10)", id="last"),
        pytest.param(_change(6, 1, 0), 6, "digest does not follow", id="at"),
        pytest.param(_change(6, 2, None), 6, "digest does not follow", id="ref"),
        pytest.param(_change(6, 3, b"\xc1"), 6, "digest does not follow", id="body"),
        pytest.param(_change(6, 4, b"\x00" * 16), 6, "digest does not follow", id="digest"),
        pytest.param(_change(6, 4, None), 6, "the event has no digest", id="no-digest"),
        pytest.param(_change(6, 3, "text"), 6, "not of their types", id="text-body"),
        pytest.param(_change(1, 1, 2**64), 1, "not of their types", id="at-too-large"),
    ],
)
def test_a_walk_names_the_first_seq_that_does_not_follow(
    damage: Callable[[Rows], Rows], broken: int | None, reason: str
) -> None:
    walk = Walk(0, GENESIS)

    def follow_to_the_end() -> None:
        walk.follow(damage(_chained(10)))
        walk.end(10)

    if broken is None:
        follow_to_the_end()
        assert (walk.next_seq, walk.digest) == (11, _chained(10)[-1][4])
        return
    with pytest.raises(ChainBroken) as info:
        follow_to_the_end()
    assert info.value.seq == broken
    assert reason in info.value.reason


def test_a_walk_from_a_snapshot_starts_from_its_digest() -> None:
    rows = _chained(10)
    walk = Walk(4, rows[3][4] or b"")
    walk.follow(rows[4:])
    assert walk.digest == rows[-1][4]
    with pytest.raises(ChainBroken) as info:
        Walk(4, GENESIS).follow(rows[4:])
    assert info.value.seq == 5


# ---------------------------------------------------------------------------------------------
# Damaged logs: what a start, a replay and a whole check report

EVENTS = 2_000
SNAPSHOT = 1_000
BEFORE, AFTER = 300, 1_700


async def _write(path: Path) -> None:
    state = empty_state()
    events: list[Event] = list(stream(EVENTS, nodes=16))
    async with EventLog.open(path) as log:
        for seq, event in zip(await log.append(events), events, strict=True):
            fold(state, seq, event)
            if seq == SNAPSHOT:
                await log.save_snapshot(seq, encode_state(state))


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chain") / "log.db"
    anyio.run(_write, path)
    return path


def _zero_page_of(path: Path, seq: int) -> int:
    """Zero the database page holding event `seq` (or one just before it whose body is found
    only once in the file); returns the first seq on that page, read from the page itself."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        (page_size,) = db.execute("PRAGMA page_size").fetchone()
        rows = db.execute(
            "SELECT body FROM events WHERE seq BETWEEN ? AND ? ORDER BY seq DESC", (seq - 50, seq)
        ).fetchall()
    data = path.read_bytes()
    body = next(body for (body,) in rows if data.count(body) == 1)
    page = data.index(body) // page_size
    first = _first_rowid(data[page * page_size : (page + 1) * page_size])
    with path.open("r+b") as file:
        file.seek(page * page_size)
        file.write(bytes(page_size))
    return first


def _first_rowid(page: bytes) -> int:
    """The smallest rowid on a table b-tree leaf page: its first cell's (the cell pointers
    are in key order), after the cell's payload size."""
    assert page[0] == 0x0D, "not a table leaf page"
    cell = int.from_bytes(page[8:10], "big")
    _, at = _varint(page, cell)
    rowid, _ = _varint(page, at)
    return rowid


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = 0
    for i in range(9):
        byte = data[at + i]
        if i == 8:
            return (value << 8) | byte, at + 9
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    raise AssertionError("unreachable")


def _damage(path: Path, kind: str, seq: int) -> int:
    """Damage event `seq` of the log at `path` as `kind` says; returns the seq where the
    chain must then be said to break."""
    if kind == "page":
        return _zero_page_of(path, seq)
    sql = {
        "missing": "DELETE FROM events WHERE seq = ?",
        "body": "UPDATE events SET body = x'c1c1c1' WHERE seq = ?",
        "at": "UPDATE events SET at = at + 1 WHERE seq = ?",
        "ref": "UPDATE events SET ref = 'Pod/sim-0/default/someone-else' WHERE seq = ?",
    }[kind]
    vandalize(path, sql, seq)
    return seq


def _copy(intact: Path, directory: Path) -> Path:
    path = directory / "log.db"
    path.write_bytes(intact.read_bytes())
    return path


def _file(path: Path) -> bytes:
    """The log and its WAL, if any."""
    wal = Path(f"{path}-wal")
    return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")


async def _start(path: Path) -> None:
    async with EventLog.open(path):
        pass


async def _replay(path: Path) -> None:
    async with open_for_replay(path) as log:
        await rebuild(log)


async def _check(path: Path) -> None:
    await anyio.to_thread.run_sync(check_whole, str(path))


TOOLS = {"start": _start, "replay": _replay, "check": _check}

# What each reports: True, the seq where the chain breaks; False, nothing (a start and a
# replay check the chain from the newest snapshot on; before it only that seqs are dense,
# with a count that reads every page).
FOUND = {
    ("missing", "before"): {"start": True, "replay": True, "check": True},
    ("missing", "after"): {"start": True, "replay": True, "check": True},
    ("body", "before"): {"start": False, "replay": False, "check": True},
    ("body", "after"): {"start": True, "replay": True, "check": True},
    ("at", "before"): {"start": False, "replay": False, "check": True},
    ("at", "after"): {"start": True, "replay": True, "check": True},
    ("ref", "before"): {"start": False, "replay": False, "check": True},
    ("ref", "after"): {"start": True, "replay": True, "check": True},
    ("page", "before"): {"start": True, "replay": True, "check": True},
    ("page", "after"): {"start": True, "replay": True, "check": True},
}
REASONS = {
    "missing": "the event is missing (the next one is seq ",
    "body": "digest does not follow",
    "at": "digest does not follow",
    "ref": "digest does not follow",
    "page": "the event cannot be read (database disk image is malformed)",
}


@pytest.mark.anyio
@pytest.mark.parametrize("tool", list(TOOLS))
@pytest.mark.parametrize(("kind", "where"), list(FOUND))
async def test_damage_is_reported_at_its_seq(
    intact: Path, tmp_path: Path, kind: str, where: str, tool: str
) -> None:
    path = _copy(intact, tmp_path)
    breaks = _damage(path, kind, BEFORE if where == "before" else AFTER)
    damaged = _file(path)
    if not FOUND[kind, where][tool]:
        await TOOLS[tool](path)
        return
    with pytest.raises(BrokenChain) as info:
        await TOOLS[tool](path)
    assert info.value.seq == breaks
    message = str(info.value)
    assert message.startswith(f"{path}: the log breaks at seq {breaks}: "), message
    assert REASONS[kind] in message
    assert "\n" not in message
    # Nothing was appended, not even by the start: the file is as the damage left it.
    assert _file(path) == damaged


@pytest.mark.anyio
async def test_an_intact_log_checks_whole_and_a_start_appends_on_its_chain(
    intact: Path, tmp_path: Path
) -> None:
    path = _copy(intact, tmp_path)
    whole = check_whole(str(path))
    assert (whole.last_seq, whole.snapshots) == (EVENTS, 1)
    async with EventLog.open(path) as log:
        await log.append(list(stream(10, nodes=1)))
        await log.save_snapshot(log.last_seq, b"state")
    again = check_whole(str(path))
    assert (again.last_seq, again.snapshots) == (EVENTS + 10, 2)


DISAGREES = f"snapshot seq {SNAPSHOT} records another digest than the chain's there"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("sql", "reasons"),
    [
        pytest.param(
            f"UPDATE snapshots SET digest = x'00' WHERE seq = {SNAPSHOT}",
            {"start": DISAGREES, "replay": DISAGREES, "check": DISAGREES},
            id="snapshot-digest",
        ),
        pytest.param(
            # A start and a replay begin from the snapshot; the whole walk meets the event.
            f"UPDATE events SET digest = x'00' WHERE seq = {SNAPSHOT}",
            {"start": DISAGREES, "replay": DISAGREES, "check": "digest does not follow"},
            id="its-event's-digest",
        ),
    ],
)
async def test_a_snapshot_that_disagrees_with_its_event_breaks_the_chain_at_its_seq(
    intact: Path, tmp_path: Path, sql: str, reasons: dict[str, str]
) -> None:
    path = _copy(intact, tmp_path)
    vandalize(path, sql)
    for name, tool in TOOLS.items():
        with pytest.raises(BrokenChain) as info:
            await tool(path)
        assert info.value.seq == SNAPSHOT
        assert reasons[name] in str(info.value), name


@pytest.mark.anyio
async def test_appends_after_a_failed_one_continue_the_chain(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    events: list[Event] = list(stream(20, nodes=2))
    async with EventLog.open(path) as log:
        await log.append(events[:10])
        bad = msgspec.structs.replace(events[10], at=2**63)
        with pytest.raises(Exception, match=r"appending seq 11\.\.11 failed"):
            await log.append([bad])
        await log.append(events[10:])
    assert check_whole(str(path)).last_seq == 20
    with closing(sqlite3.connect(path)) as db:
        stored = [row[0] for row in db.execute("SELECT digest FROM events ORDER BY seq")]
    ats = [e.at for e in events]
    bodies = [encode_event(e) for e in events]
    refs = [event_ref(e) for e in events]
    assert stored == links(GENESIS, 1, ats, refs, bodies)
