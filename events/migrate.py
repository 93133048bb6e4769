"""Schema migrations of the event log: numbered SQL files, applied in order when a log opens.

The files live in the repository's top-level ``migrations/`` directory; the wheel carries them
as ``events/migrations/`` (see pyproject's ``force-include``), which is looked at first so an
installed kbatchd never depends on where it was built.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Final

# Stamped into every log so that kbatchd never mistakes another program's SQLite file for one.
APPLICATION_ID: Final = 0x6B62_6431  # "kbd1"

_FILE_NAME: Final = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")


class MigrationError(Exception):
    """A migration file that is misnamed, missing from the sequence, or fails to apply."""


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def label(self) -> str:
        return f"{self.version:04d}_{self.name}"


def migrations_dir() -> Traversable:
    """Where the migrations are: inside the installed package, else in the source checkout."""
    packaged = files("events") / "migrations"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "migrations"


def list_migrations(directory: Traversable | None = None) -> tuple[Migration, ...]:
    """The migrations in `directory` (default: `migrations_dir()`), ordered by version.

    Versions must run 1, 2, 3, ... without gaps: a missing file would otherwise leave every
    log that skipped it silently different from the ones that did not.
    """
    root = migrations_dir() if directory is None else directory
    if not root.is_dir():
        raise MigrationError(f"{root}: migrations directory not found")
    found: list[Migration] = []
    for entry in root.iterdir():
        if not entry.name.endswith(".sql"):
            continue
        match = _FILE_NAME.fullmatch(entry.name)
        if match is None:
            raise MigrationError(f"{root}: {entry.name!r} is not named like 0001_some_name.sql")
        found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: (m.version, m.name))
    for expected, migration in enumerate(found, start=1):
        if migration.version == expected - 1:
            raise MigrationError(f"{root}: two migrations numbered {migration.version:04d}")
        if migration.version != expected:
            raise MigrationError(
                f"{root}: expected migration {expected:04d}, found {migration.label}.sql"
            )
    if not found:
        raise MigrationError(f"{root}: no migrations found")
    return tuple(found)


MIGRATIONS: Final = list_migrations()
CODE_SCHEMA_VERSION: Final = MIGRATIONS[-1].version


def schema_version(conn: sqlite3.Connection) -> int:
    """The schema version a database is at: 0 for a database kbatchd never initialised."""
    (user_version,) = conn.execute("PRAGMA user_version").fetchone()
    has_table = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_migrations'"
    ).fetchone()
    recorded = 0
    if has_table:
        (recorded,) = conn.execute(
            "SELECT coalesce(max(version), 0) FROM schema_migrations"
        ).fetchone()
    # Either record alone may have been bumped by hand or by a newer kbatchd; trust the higher.
    return max(int(user_version), int(recorded))


# A step of a migration that SQL cannot take (filling in digests), run inside its transaction.
Step = Callable[[sqlite3.Connection], None]


def apply_migrations(
    conn: sqlite3.Connection,
    migrations: Sequence[Migration] = MIGRATIONS,
    steps: Mapping[str, Step] | None = None,
) -> list[int]:
    """Apply the migrations newer than the database, each in its own transaction, and return
    the versions applied. `steps`, by migration name: what runs after its statements, in the
    same transaction. `conn` must be in autocommit mode (``isolation_level=None``)."""
    applied: list[int] = []
    for migration in migrations:
        if migration.version <= schema_version(conn):
            continue
        statements = list(_statements(migration))
        conn.execute("BEGIN IMMEDIATE")
        try:
            # Checked again under the write lock: another process may have just migrated.
            if migration.version <= schema_version(conn):
                conn.execute("ROLLBACK")
                continue
            for statement in statements:
                conn.execute(statement)
            step = (steps or {}).get(migration.name)
            if step is not None:
                step(conn)
            conn.execute(
                "INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)",
                (migration.version, migration.name, time.time_ns() // 1_000_000),
            )
            # PRAGMA takes no parameters; both values are ints of our own making.
            conn.execute(f"PRAGMA user_version = {migration.version:d}")
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID:d}")
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise MigrationError(f"migration {migration.label}.sql failed: {exc}") from exc
        applied.append(migration.version)
    return applied


def _statements(migration: Migration) -> Iterator[str]:
    """Split a script into statements; `executescript` cannot be used because it commits."""
    pending = ""
    for piece in migration.sql.split(";"):
        pending += piece + ";"
        # complete_statement knows that a ';' inside a trigger body or a string is not an end.
        if sqlite3.complete_statement(pending):
            yield pending
            pending = ""
    if pending.strip(" \t\r\n;"):
        raise MigrationError(f"migration {migration.label}.sql ends inside a statement")
