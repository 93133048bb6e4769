"""Schema migrations: found, ordered, applied once each, recorded; an older log is upgraded."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from events.migrate import (
    APPLICATION_ID,
    CODE_SCHEMA_VERSION,
    MIGRATIONS,
    MigrationError,
    apply_migrations,
    list_migrations,
    migrations_dir,
    schema_version,
)
from events.schema import Tick, encode_event, event_ref
from events.store import EventLog, LogError, SchemaTooOld, check_whole

REPO_MIGRATIONS = Path(__file__).resolve().parents[2] / "migrations"


def connect(path: Path) -> closing[sqlite3.Connection]:
    return closing(sqlite3.connect(path, isolation_level=None))


def recorded(path: Path) -> list[tuple[int, str, int]]:
    with connect(path) as conn:
        rows = conn.execute("SELECT version, name, applied_at FROM schema_migrations ORDER BY 1")
        return [tuple(row) for row in rows]


@pytest.fixture
def three(tmp_path: Path) -> Path:
    """The real 0001 plus two that build on it; written newest first, so that listing order
    cannot stand in for version order."""
    directory = tmp_path / "migrations"
    directory.mkdir()
    (directory / "0003_label_index.sql").write_text(
        "CREATE INDEX labels_by_value ON labels (value);\n"
        "INSERT INTO labels (key, value) VALUES ('order', '3; after 2');\n"
    )
    (directory / "0002_labels.sql").write_text(
        "-- a table for the test; ';' in a comment is not a statement end\n"
        "CREATE TABLE labels (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n"
        "INSERT INTO labels (key, value) VALUES ('first', 'a;b');"
    )
    (directory / "README").write_text("not a migration; ignored\n")
    shutil.copy(REPO_MIGRATIONS / "0001_init.sql", directory)
    return directory


@pytest.fixture
def later(tmp_path: Path) -> Path:
    """The shipped migrations plus two of this test's after them: a log the store can write
    (it needs the shipped schema), then upgraded by a kbatchd that knows more."""
    directory = tmp_path / "later"
    directory.mkdir()
    for migration in MIGRATIONS:
        shutil.copy(REPO_MIGRATIONS / f"{migration.label}.sql", directory)
    after = CODE_SCHEMA_VERSION
    (directory / f"{after + 1:04d}_labels.sql").write_text(
        "CREATE TABLE labels (key TEXT PRIMARY KEY, value TEXT NOT NULL);\n"
    )
    (directory / f"{after + 2:04d}_label_index.sql").write_text(
        "CREATE INDEX labels_by_value ON labels (value);\n"
    )
    return directory


def test_the_shipped_migrations() -> None:
    assert Path(str(migrations_dir())) == REPO_MIGRATIONS
    assert MIGRATIONS[0].version == 1
    assert MIGRATIONS[0].name == "init"
    assert CODE_SCHEMA_VERSION == len(MIGRATIONS) == MIGRATIONS[-1].version


def test_applied_in_order_recorded_and_idempotent(tmp_path: Path, three: Path) -> None:
    path = tmp_path / "db.sqlite"
    migrations = list_migrations(three)
    assert [(m.version, m.name) for m in migrations] == [
        (1, "init"),
        (2, "labels"),
        (3, "label_index"),
    ]
    with connect(path) as conn:
        assert schema_version(conn) == 0
        assert apply_migrations(conn, migrations) == [1, 2, 3]
        assert schema_version(conn) == 3
        assert conn.execute("PRAGMA user_version").fetchone() == (3,)
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
        labels = conn.execute("SELECT key, value FROM labels ORDER BY rowid").fetchall()
        assert labels == [("first", "a;b"), ("order", "3; after 2")]
    first = recorded(path)
    assert [(v, n) for v, n, _ in first] == [(1, "init"), (2, "labels"), (3, "label_index")]
    with connect(path) as conn:
        assert apply_migrations(conn, migrations) == []
    assert recorded(path) == first


def test_a_failing_migration_leaves_nothing_behind(tmp_path: Path, three: Path) -> None:
    (three / "0003_label_index.sql").write_text(
        "CREATE TABLE half_done (x);\nCREATE INDEX broken ON no_such_table (x);\n"
    )
    path = tmp_path / "db.sqlite"
    with connect(path) as conn:
        with pytest.raises(MigrationError, match=r"0003_label_index\.sql failed: no such table"):
            apply_migrations(conn, list_migrations(three))
        assert schema_version(conn) == 2
        assert not conn.in_transaction
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert "labels" in tables
        assert "half_done" not in tables


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"0001_init.sql": "", "0003_later.sql": ""}, "expected migration 0002, found 0003_later"),
        ({"0002_first.sql": ""}, "expected migration 0001"),
        ({"0001_init.sql": "", "0001_again.sql": ""}, "two migrations numbered 0001"),
        ({"1_init.sql": ""}, "'1_init.sql' is not named like 0001_some_name.sql"),
        ({"0001-init.sql": ""}, "is not named like"),
        ({"notes.txt": ""}, "no migrations found"),
    ],
)
def test_bad_migration_directories(tmp_path: Path, files: dict[str, str], message: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    with pytest.raises(MigrationError, match=message):
        list_migrations(tmp_path)


def test_a_migration_ending_inside_a_statement(tmp_path: Path) -> None:
    (tmp_path / "0001_init.sql").write_text(
        "CREATE TABLE t (x);\nCREATE TRIGGER t_no_delete BEFORE DELETE ON t BEGIN SELECT 1;"
    )
    with connect(tmp_path / "db.sqlite") as conn:
        with pytest.raises(MigrationError, match="ends inside a statement"):
            apply_migrations(conn, list_migrations(tmp_path))
        assert schema_version(conn) == 0


def test_a_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(MigrationError, match="migrations directory not found"):
        list_migrations(tmp_path / "nope")


@pytest.mark.anyio
async def test_an_older_log_is_upgraded_on_a_read_write_open(tmp_path: Path, later: Path) -> None:
    path = tmp_path / "log.db"
    old, new = MIGRATIONS, list_migrations(later)
    shipped = CODE_SCHEMA_VERSION
    async with EventLog.open(path, migrations=old) as log:
        await log.append([Tick(at=i) for i in range(10)])
    assert [v for v, _, _ in recorded(path)] == list(range(1, shipped + 1))
    before = hashlib.sha256(path.read_bytes()).hexdigest()

    with pytest.raises(SchemaTooOld) as info:
        async with EventLog.open(path, readonly=True, migrations=new):
            pass
    message = str(info.value)
    assert message.startswith(
        f"{path}: log schema version {shipped} needs migrating to {shipped + 2}"
    )
    assert "read-only" in message
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before

    async with EventLog.open(path, migrations=new) as log:
        assert log.last_seq == 10
        assert await log.append([Tick(at=10)]) == [11]
    upgraded = recorded(path)
    assert [v for v, _, _ in upgraded] == list(range(1, shipped + 3))

    async with EventLog.open(path, migrations=new) as log:
        assert [e async for _, e in log.read()] == [Tick(at=i) for i in range(11)]
    async with EventLog.open(path, readonly=True, migrations=new) as log:
        assert await log.count() == 11
    assert recorded(path) == upgraded


@pytest.mark.anyio
async def test_a_failing_migration_at_open_is_a_log_error(tmp_path: Path, three: Path) -> None:
    (three / "0002_labels.sql").write_text("CREATE TABLE labels (;\n")
    path = tmp_path / "log.db"
    with pytest.raises(LogError) as info:
        async with EventLog.open(path, migrations=list_migrations(three)):
            pass
    message = str(info.value)
    assert message.startswith(f"{path}: migration 0002_labels.sql failed: ")
    assert "\n" not in message
    # 0001 stays applied; a fixed kbatchd continues from there.
    assert [v for v, _, _ in recorded(path)] == [1]


def _log_before_the_chain(path: Path, events: list[Tick], snapshot: int) -> None:
    """A log as a kbatchd before the digest chain wrote it: schema 0002, rows without
    digests, a snapshot."""
    with connect(path) as conn:
        apply_migrations(conn, [m for m in MIGRATIONS if m.version <= 2])
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO events (seq, at, ref, body) VALUES (?, ?, ?, ?)",
            [(seq, e.at, event_ref(e), encode_event(e)) for seq, e in enumerate(events, 1)],
        )
        conn.execute(
            "INSERT INTO snapshots (seq, created_at, body) VALUES (?, 0, x'00')", (snapshot,)
        )
        conn.execute("COMMIT")


@pytest.mark.anyio
async def test_the_chain_of_a_log_from_before_it_is_filled_in_once(tmp_path: Path) -> None:
    events = [Tick(at=1_000 + i) for i in range(12_000)]  # more than one fill-in batch
    old, new = tmp_path / "old.db", tmp_path / "new.db"
    _log_before_the_chain(old, events, snapshot=7_000)
    async with EventLog.open(new) as log:
        await log.append(events)
    with pytest.raises(SchemaTooOld):
        async with EventLog.open(old, readonly=True):
            pass

    async with EventLog.open(old) as log:
        assert log.last_seq == 12_000
        await log.append([Tick(at=99)])
    async with EventLog.open(new) as log:
        await log.append([Tick(at=99)])

    def digests(path: Path) -> list[bytes]:
        with connect(path) as conn:
            return [d for (d,) in conn.execute("SELECT digest FROM events ORDER BY seq")]

    # The same chain as if the events had been appended by this kbatchd.
    assert digests(old) == digests(new)
    assert check_whole(str(old)).snapshots == 1
    with connect(old) as conn:
        (snapshot,) = conn.execute("SELECT digest FROM snapshots").fetchone()
        assert snapshot == digests(old)[7_000 - 1]
        # Filled in once: a digest set is never set again, nor is any stored field.
        for sql in ("UPDATE events SET digest = x'00' WHERE seq = 5", "UPDATE events SET at = 0"):
            with pytest.raises(sqlite3.DatabaseError, match="events are append-only"):
                conn.execute(sql)
