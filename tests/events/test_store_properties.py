"""Properties of opening a log damaged at random: bytes flipped at random offsets, the file cut
short, rows deleted or changed past the triggers (`vandalize`).

The promise: the log opens and reads (a flip in SQLite's free space may change nothing that
is read), or it is refused with one `LogError` line naming the file; and a refused log is not
written, read-only or read-write. A read-only open never writes at all.
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import anyio
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from msgspec.structs import replace

from events.state import empty_state, encode_state
from events.store import EventLog, LogError
from tests.events.builders import vandalize
from tests.events.test_store import read_all, sample_events

COPIES = 40  # of the sample events: a log of a few hundred events, a few pages
EVENTS = COPIES * len(sample_events())
SNAPSHOT_AT = EVENTS // 2

# Row changes past the triggers, each with a parameter drawn for it.
VANDALISM = (
    "DELETE FROM events WHERE seq = ?",
    "UPDATE events SET body = randomblob(?) WHERE seq = 7",
    "UPDATE events SET body = substr(body, 1, ?) WHERE seq = 11",
    "UPDATE events SET body = NULL WHERE seq = ?",
    "UPDATE events SET at = ? WHERE seq = 13",
    "UPDATE events SET ref = 'x/' || ? WHERE seq = 17",
    "UPDATE events SET digest = randomblob(?) WHERE seq = 19",
    "UPDATE events SET seq = seq + ? WHERE seq = 23",
    "DELETE FROM events WHERE seq > ?",
    "UPDATE snapshots SET body = randomblob(?)",
    "UPDATE snapshots SET seq = ?",
    "UPDATE schema_migrations SET version = ?",
    "DELETE FROM schema_migrations WHERE version >= ?",
)


@st.composite
def damage(draw: st.DrawFn) -> tuple[str, object]:
    """How to damage a log: ("flip", [(offset, xor mask), ...]), ("truncate", length), or
    ("vandalize", (sql, parameter)); offsets and lengths wrap around the file's size."""
    how = draw(st.sampled_from(["flip", "truncate", "vandalize"]))
    if how == "flip":
        masks = st.tuples(st.integers(0, 2**22), st.integers(1, 255))
        return how, draw(st.lists(masks, min_size=1, max_size=8))
    if how == "truncate":
        return how, draw(st.integers(0, 2**22))
    return how, (draw(st.sampled_from(VANDALISM)), draw(st.integers(-3, EVENTS + 3)))


def apply_damage(path: Path, how: str, detail: object) -> None:
    if how == "flip":
        data = bytearray(path.read_bytes())
        for offset, mask in detail:  # type: ignore[attr-defined]
            data[offset % len(data)] ^= mask
        path.write_bytes(bytes(data))
    elif how == "truncate":
        data = path.read_bytes()
        path.write_bytes(data[: detail % (len(data) + 1)])  # type: ignore[operator]
    else:
        sql, parameter = detail  # type: ignore[misc]
        # A change a constraint refuses leaves the log as it was.
        with suppress(sqlite3.Error):
            vandalize(path, sql, parameter)


def file_digest(path: Path) -> str:
    """The file and its WAL companion, if any."""
    digest = hashlib.sha256(path.read_bytes())
    wal = Path(f"{path}-wal")
    if wal.exists():
        digest.update(wal.read_bytes())
    return digest.hexdigest()


async def _write(path: Path) -> None:
    events = [
        replace(event, at=event.at + 10 * copy)
        for copy in range(COPIES)
        for event in sample_events()
    ]
    async with EventLog.open(path) as log:
        await log.append(events)
        await log.save_snapshot(SNAPSHOT_AT, encode_state(empty_state()))


@pytest.fixture(scope="module")
def intact_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("log") / "kbatchd.db"
    anyio.run(_write, path)
    return path


@contextmanager
def damaged_copy(intact: Path, how: str, detail: object) -> Iterator[Path]:
    """A damaged copy of the log in a directory of its own (each example starts afresh)."""
    with tempfile.TemporaryDirectory(prefix="kbatchd-damaged-") as where:
        path = Path(where) / "kbatchd.db"
        shutil.copyfile(intact, path)
        apply_damage(path, how, detail)
        yield path


async def _open_read_and_check(path: Path, readonly: bool) -> None:
    async with EventLog.open(path, readonly=readonly) as log:
        await read_all(log)
        await log.latest_snapshot()
        await log.check_chain()


@settings(
    max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(damage(), st.booleans())
@example(("flip", [(0, 1)]), True)  # the SQLite header
@example(("truncate", 70_000), False)  # within the second page
@example(("vandalize", ("UPDATE events SET body = NULL WHERE seq = ?", 5)), True)
@example(("vandalize", ("UPDATE schema_migrations SET version = ?", 1)), False)
def test_a_damaged_log_reads_or_is_refused_in_one_line_and_a_refused_one_is_not_written(
    intact_log: Path, hurt: tuple[str, object], readonly: bool
) -> None:
    with damaged_copy(intact_log, *hurt) as path:
        before = file_digest(path)
        try:
            anyio.run(_open_read_and_check, path, readonly)
        except LogError as exc:
            message = str(exc)
            assert message.startswith(f"{path}: "), message
            assert "\n" not in message, message
            assert file_digest(path) == before
            return
        if readonly:
            assert file_digest(path) == before


def test_a_schema_whose_text_is_not_utf8_is_a_corrupt_log_not_a_traceback(
    intact_log: Path,
) -> None:
    """Found by the property above (offset 65535, mask 0xa5): a flipped byte in a trigger's
    SQL in the schema made the open raise UnicodeDecodeError, for SQLite's error message
    quotes the SQL near where it fails to parse it."""
    with tempfile.TemporaryDirectory() as where:
        path = Path(where) / "kbatchd.db"
        data = bytearray(intact_log.read_bytes())
        at = data.rindex(b"END", 0, 65_536)  # a trigger's last word, in the first page
        data[at + 2] = 0xE1  # "EN\xe1": a UTF-8 lead byte with no continuation
        path.write_bytes(bytes(data))
        before = file_digest(path)
        for readonly in (True, False):
            with pytest.raises(LogError, match="log is corrupt \\(text that is not UTF-8\\)"):
                anyio.run(_open_read_and_check, path, readonly)
            assert file_digest(path) == before
