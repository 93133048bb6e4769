"""The event log: one SQLite database in WAL mode holding every event under a dense `seq`.

Appends from any number of producers meet in one writer task, which commits whatever is
queued in a single transaction (group commit) and only then hands the producers their seqs:
an acknowledged append survives a crash of the process (with ``synchronous=NORMAL`` an OS
crash may lose the newest commits, never corrupt the log). Reads go through their own
read-only connection, so a replay or a history query never waits behind the writer and can
never write.

Every row carries the digest chain's value up to it (`events.chain`), computed by the writer
from the head it keeps in memory and written in the same transaction as the row; a snapshot
records the chain's value at its seq. Opening read-write checks the log before anything is
appended to it (`_check_start`); `EventLog.check_chain` checks a replay's stretch and
`check_whole` all of it.

Errors about the file itself are `LogError`s whose message is one self-contained line naming
the file, ready for a CLI to print.
"""

from __future__ import annotations

import errno
import fcntl
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, closing, contextmanager, suppress
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Final, NoReturn, cast

import aiosqlite
import anyio
import msgspec
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from events.chain import GENESIS, ChainBroken, Walk, link, links
from events.migrate import (
    APPLICATION_ID,
    MIGRATIONS,
    Migration,
    MigrationError,
    apply_migrations,
    schema_version,
)
from events.schema import DECODE_ERRORS, Event, decode_event, encode_event, event_ref

_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_TABLES: Final = frozenset({"events", "snapshots", "schema_migrations"})
_INSERT: Final = "INSERT INTO events (seq, at, ref, body, digest) VALUES (?, ?, ?, ?, ?)"
# Rows per INSERT statement: one sqlite3_step per statement instead of one per row took about
# a sixth off the insert when measured; longer statements gained nothing more.
_ROWS_PER_INSERT: Final = 64
_INSERT_MANY: Final = "INSERT INTO events (seq, at, ref, body, digest) VALUES " + ", ".join(
    ["(?, ?, ?, ?, ?)"] * _ROWS_PER_INSERT
)
_RANGE: Final = "SELECT body FROM events WHERE seq BETWEEN ? AND ? ORDER BY seq"
_ONE: Final = "SELECT seq, at, ref, body, digest FROM events WHERE seq = ?"
_CHAIN: Final = (
    "SELECT seq, at, ref, body, digest FROM events WHERE seq > ? AND seq <= ? ORDER BY seq"
)
_MAX_SEQ: Final = 2**63 - 1
# The newest seq and the chain's value there (NULL for an empty log).
_HEAD: Final = (
    "SELECT coalesce(max(seq), 0), (SELECT digest FROM events ORDER BY seq DESC LIMIT 1)"
    " FROM events"
)
# Rows per read query: a round trip to SQLite's thread costs about half a millisecond of a
# replay's time; 1M events in batches of 1,000 measured 10.6-11.4 s, of 5,000 10.0-10.8 s
# (alternating, one process), of 20,000 no faster.
READ_BATCH: Final = 5_000
# Pages of a new log: SQLite's largest. The log is appended at its end and read in runs of
# seq, never updated in place; 64 KiB pages took a sixth off the insert (fewer pages to split,
# link and log to the WAL per row) and made reading faster too. The price, a whole page
# written to the WAL by a commit of one small event, is a memory copy.
PAGE_SIZE: Final = 65_536
# Failures of the storage rather than of the file or the caller: what freeing space or a
# recovered device may fix (SQLite reports ENOSPC as SQLITE_FULL, other failed writes, EFBIG
# among them, as SQLITE_IOERR).
_STORAGE_CODES: Final = frozenset({sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR})
_STORAGE_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})


class LogError(Exception):
    """A log that cannot be opened, read or written; the message names the file."""


class NotALog(LogError):
    """The file is not SQLite, or is SQLite but not a kbatchd event log."""


class SchemaTooNew(LogError):
    """The log was written by a newer kbatchd than this one."""


class SchemaTooOld(LogError):
    """The log needs migrating, which a read-only open may not do."""


class LogInUse(LogError):
    """Another open log, in this process or another, is writing the same file."""


class LogStorageError(LogError):
    """The storage under the log failed: the disk is full, or an I/O error. Unlike the other
    LogErrors this is no fault of the file or of the caller: nothing was written, and the
    same call may succeed once there is room again (a retry, or a restart)."""


class CorruptLog(LogError):
    """The database is damaged (truncated, malformed pages, missing events)."""


class BrokenChain(CorruptLog):
    """The digest chain breaks at `seq`: the event is missing, cannot be read, or is not the
    one the chain was made of (`events.chain`)."""

    def __init__(self, path: str, seq: int, reason: str) -> None:
        super().__init__(f"{path}: the log breaks at seq {seq}: {reason}")
        self.seq = seq


class CorruptEvent(CorruptLog):
    """One stored event body does not decode."""

    def __init__(self, path: str, seq: int, detail: str) -> None:
        super().__init__(f"{path}: event seq {seq} is corrupt: {detail}")
        self.seq = seq


@dataclass
class Stats:
    """Counters of the writer; `transactions` much below `appends` is group commit working."""

    appends: int = 0
    events: int = 0
    transactions: int = 0
    failed_transactions: int = 0


class _Append:
    """One producer's events, encoded, as the columns of their rows.

    Columns rather than a tuple per row: a batch then allocates three lists instead of ten
    thousand tuples, which kept the garbage collector busy during every append."""

    __slots__ = ("ats", "bodies", "done", "error", "first", "refs")

    def __init__(self, ats: list[int], refs: list[str | None], bodies: list[bytes]) -> None:
        self.ats = ats
        self.refs = refs
        self.bodies = bodies
        self.done = anyio.Event()
        self.first = 0
        self.error: LogError | None = None


def _columns(events: Sequence[Event]) -> tuple[list[int], list[str | None], list[bytes]]:
    """The `at`, `ref` and encoded body of each event, in one pass: the second and third
    look at an event the first just brought into the CPU caches (three passes over ten
    thousand events read each from memory three times)."""
    ats: list[int] = []
    refs: list[str | None] = []
    bodies: list[bytes] = []
    at, ref, body = ats.append, refs.append, bodies.append
    for event in events:
        body(encode_event(event))
        ref(event_ref(event))
        at(event.at)
    return ats, refs, bodies


def _rows(
    batch: list[_Append], first: int, head: bytes
) -> tuple[list[list[Any]], list[list[Any]], bytes]:
    """The batch's rows from seq `first`, chained on from `head`, as the parameters of the
    64-row INSERTs and of the single-row ones for the rest, and the chain's new head."""
    next_seq = first
    rows: list[Iterator[tuple[int, int, str | None, bytes, bytes]]] = []
    for item in batch:
        item.first = next_seq
        next_seq += len(item.bodies)
        digests = links(head, item.first, item.ats, item.refs, item.bodies)
        head = digests[-1]
        rows.append(
            zip(range(item.first, next_seq), item.ats, item.refs, item.bodies, digests, strict=True)
        )
    # Every row's (seq, at, ref, body, digest) in one flat list, without a Python-level loop.
    flat: list[Any] = list(chain.from_iterable(chain.from_iterable(rows)))
    count = next_seq - first
    width = 5 * _ROWS_PER_INSERT
    whole = count - count % _ROWS_PER_INSERT
    statements = [flat[i : i + width] for i in range(0, 5 * whole, width)]
    rest = [flat[i : i + 5] for i in range(5 * whole, len(flat), 5)]
    return statements, rest, head


class EventBatch:
    """A batch of stored events, decoded one at a time as it is iterated.

    Decoding each event just before the caller uses it keeps the event in the CPU caches
    while it is folded; decoding a whole batch up front made a replay a third slower.
    """

    __slots__ = ("_name", "_rows")

    def __init__(self, name: str, rows: list[tuple[int, bytes]]) -> None:
        self._name = name
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[tuple[int, Event]]:
        for seq, body in self._rows:
            try:
                event = decode_event(body)
            except DECODE_ERRORS as exc:
                raise CorruptEvent(self._name, seq, str(exc)) from exc
            yield seq, event


class EventLog:
    """An open event log; get one with ``async with EventLog.open(path) as log``."""

    def __init__(
        self,
        name: str,
        reader: aiosqlite.Connection,
        writer: aiosqlite.Connection | None,
        send: MemoryObjectSendStream[_Append] | None,
        start: _Start,
        max_batch: int,
    ) -> None:
        self._name = name
        self._reader = reader
        self._writer = writer
        self._send = send
        self._last_seq = start.last_seq
        # The chain's value at `_last_seq`, extended by every commit.
        self._head = start.head
        # Read-write: the chain was checked from here to the end when the log was opened
        # (and every event after was chained by this writer), so `check_chain` skips it.
        self._checked_after = start.checked_after
        self._max_batch = max_batch
        # Serialises the writer connection between event batches and snapshots.
        self._write_lock = anyio.Lock()
        self.stats = Stats()

    @classmethod
    @asynccontextmanager
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        readonly: bool = False,
        migrations: Sequence[Migration] = MIGRATIONS,
        max_batch: int = 10_000,
        max_queued: int = 1_000,
    ) -> AsyncIterator[EventLog]:
        """Open (read-write: create and migrate if needed) the log at `path`.

        Read-write starts the writer task; leaving the context flushes every queued append,
        also when leaving by cancellation. Read-only never writes to the database (beside a
        cleanly closed log SQLite still creates the empty -wal and -shm files it reads
        through). `migrations` is for tests; `max_queued` bounds the appends waiting for the
        writer (back-pressure).
        """
        name = os.fspath(path)
        start, lock = await anyio.to_thread.run_sync(_prepare, name, readonly, migrations)
        async with AsyncExitStack() as stack:
            if lock is not None:
                stack.callback(lock.release)  # released last, once both connections closed
            writer = None if readonly else await _connect(name, readonly=False)
            if writer is not None:
                # Closed last (the stack unwinds in reverse): the last connection to close
                # checkpoints the WAL into the database and removes it.
                stack.push_async_callback(_close, writer)
            reader = await _connect(name, readonly=True)
            stack.push_async_callback(_close, reader)
            if writer is None:
                yield cls(name, reader, None, None, start, max_batch)
                return
            send, receive = anyio.create_memory_object_stream[_Append](max_queued)
            log = cls(name, reader, writer, send, start, max_batch)
            failure: Exception | None = None
            async with anyio.create_task_group() as tg:
                tg.start_soon(log._write_loop, receive)
                try:
                    yield log
                except Exception as exc:
                    # Re-raised below rather than through the task group, which would wrap it
                    # in an ExceptionGroup: a LogError from the caller's block stays one.
                    failure = exc
                finally:
                    send.close()
            if failure is not None:
                raise failure

    @property
    def path(self) -> str:
        return self._name

    @property
    def readonly(self) -> bool:
        return self._writer is None

    @property
    def last_seq(self) -> int:
        """The newest seq: as of the last commit (read-write) or of opening (read-only)."""
        return self._last_seq

    # -----------------------------------------------------------------------------------------
    # Appending

    async def append(self, events: Sequence[Event]) -> list[int]:
        """Append `events` in order, all or none, and return their seqs once durable."""
        if not events:
            return []
        if self._send is None:
            raise RuntimeError(f"{self._name}: log is open read-only")
        # Encoded here, by the producer: the writer task only binds rows and steps SQLite.
        item = _Append(*_columns(events))
        try:
            await self._send.send(item)
        except (anyio.ClosedResourceError, anyio.BrokenResourceError):
            raise RuntimeError(f"{self._name}: log is closed") from None
        await item.done.wait()
        if item.error is not None:
            raise item.error
        return list(range(item.first, item.first + len(item.bodies)))

    async def _write_loop(self, receive: MemoryObjectReceiveStream[_Append]) -> None:
        # Shielded: on cancellation the owner closes the stream and this still commits what
        # was queued, so no append is left half-done. It ends when the stream is closed.
        with anyio.CancelScope(shield=True), receive:
            async for first in receive:
                batch = [first]
                size = len(first.bodies)
                while size < self._max_batch:
                    try:
                        item = receive.receive_nowait()
                    except (anyio.WouldBlock, anyio.EndOfStream):
                        break
                    batch.append(item)
                    size += len(item.bodies)
                await self._commit(batch)

    async def _commit(self, batch: list[_Append]) -> None:
        try:
            await self._transaction(batch)
        except LogError as exc:
            if len(batch) > 1:
                # Retry one by one so that a bad append fails only its own producer.
                for item in batch:
                    await self._commit([item])
                return
            batch[0].error = exc
        for item in batch:
            item.done.set()

    async def _transaction(self, batch: list[_Append]) -> None:
        writer = cast(aiosqlite.Connection, self._writer)
        first = self._last_seq + 1
        count = sum(len(item.bodies) for item in batch)
        next_seq = first + count
        async with self._write_lock:
            try:
                # Inside: a value the row cannot hold fails the chain's digest first.
                statements, rest, head = _rows(batch, first, self._head)
                # The writer connection's isolation_level makes the first statement open the
                # transaction (BEGIN IMMEDIATE) itself: one round trip to its thread fewer.
                if statements:
                    await writer.executemany(_INSERT_MANY, statements)
                if rest:
                    await writer.executemany(_INSERT, rest)
                await writer.commit()
            except Exception as exc:
                self.stats.failed_transactions += 1
                await self._recover(writer)
                raise _error_class(exc)(
                    f"{self._name}: appending seq {first}..{next_seq - 1} failed: {exc}"
                ) from exc
        self._last_seq = next_seq - 1
        self._head = head
        self.stats.transactions += 1
        self.stats.appends += len(batch)
        self.stats.events += count

    async def _recover(self, writer: aiosqlite.Connection) -> None:
        with suppress(sqlite3.Error):
            await writer.rollback()
        # Seqs must stay dense and the chain whole: continue from what the file holds, not
        # from our guess.
        with suppress(sqlite3.Error):
            last_seq, head = await _fetchone(writer, _HEAD)
            self._last_seq, self._head = int(last_seq), head or GENESIS

    # -----------------------------------------------------------------------------------------
    # Reading

    async def read_raw_batches(
        self, from_seq: int = 1, until: int | None = None, batch: int = READ_BATCH
    ) -> AsyncIterator[tuple[int, list[tuple[bytes]]]]:
        """Stored events `from_seq..until` (inclusive) in batches of up to `batch`, undecoded:
        each as the seq of its first event and the bodies in seq order, one to a row as
        SQLite returns them. Seqs are dense (checked here), so a body's seq is the first's
        plus its index; not reading them took 0.3-0.5 s off a 1M-event replay of 11.

        The end is fixed when reading starts: events appended meanwhile are not included.
        """
        end = await self.count()
        if until is not None:
            end = min(end, until)
        for low, high in _spans(from_seq, end, batch):
            rows = cast(
                list[tuple[bytes]],
                await self._fetch(_RANGE, (low, high), f"reading events seq {low}..{high}"),
            )
            _check_dense(self._name, low, high, rows)
            yield low, rows

    async def read_batches(
        self, from_seq: int = 1, until: int | None = None, batch: int = READ_BATCH
    ) -> AsyncIterator[EventBatch]:
        """`read_raw_batches`, decoding as they are iterated."""
        async for first, rows in self.read_raw_batches(from_seq, until, batch):
            yield EventBatch(self._name, [(seq, body) for seq, (body,) in enumerate(rows, first)])

    async def read_raw(
        self, from_seq: int = 1, until: int | None = None, batch: int = READ_BATCH
    ) -> AsyncIterator[tuple[int, bytes]]:
        async for first, rows in self.read_raw_batches(from_seq, until, batch):
            for seq, (body,) in enumerate(rows, first):
                yield seq, body

    async def read(
        self, from_seq: int = 1, until: int | None = None, batch: int = READ_BATCH
    ) -> AsyncIterator[tuple[int, Event]]:
        async for events in self.read_batches(from_seq, until, batch):
            for pair in events:
                yield pair

    async def events_for(self, ref: str, until: int | None = None) -> list[tuple[int, Event]]:
        """Every event about `ref` (see `events.schema.event_ref`), oldest first."""
        rows = await self._fetch(
            "SELECT seq, body FROM events WHERE ref = ? AND seq <= ? ORDER BY seq",
            (ref, _MAX_SEQ if until is None else until),
            f"reading the events of {ref}",
        )
        return list(EventBatch(self._name, cast(list[tuple[int, bytes]], rows)))

    async def events_under(
        self, prefixes: Sequence[str], until: int | None = None
    ) -> list[tuple[int, Event]]:
        """Every event whose ref starts with one of `prefixes` (``Pod/c1/default/`` for the
        pods of one namespace), oldest first: the ref column is compared in SQLite, so only
        the matching events are decoded."""
        if not prefixes:
            return []
        # substr, not LIKE: names may hold LIKE's wildcards, and LIKE ignores case.
        match = " OR ".join("substr(ref, 1, ?) = ?" for _ in prefixes)
        params: list[Any] = [_MAX_SEQ if until is None else until]
        for prefix in prefixes:
            params += [len(prefix), prefix]
        rows = await self._fetch(
            f"SELECT seq, body FROM events WHERE seq <= ? AND ({match}) ORDER BY seq",
            tuple(params),
            f"reading the events under {', '.join(prefixes)}",
        )
        return list(EventBatch(self._name, cast(list[tuple[int, bytes]], rows)))

    async def count(self) -> int:
        """How many events the file holds now (seqs are dense, so also the newest seq)."""
        rows = await self._fetch("SELECT coalesce(max(seq), 0) FROM events", (), "reading the head")
        return int(rows[0][0])

    async def _fetch(self, sql: str, params: tuple[Any, ...], doing: str) -> list[tuple[Any, ...]]:
        with _translate(self._name, doing):
            return cast(list[tuple[Any, ...]], await self._reader.execute_fetchall(sql, params))

    # -----------------------------------------------------------------------------------------
    # Snapshots

    async def save_snapshot(self, seq: int, body: bytes, *, keep: int = 0) -> int:
        """Store folded state covering events 1..`seq`; saving again for a seq replaces it.
        With `keep` > 0, only the newest `keep` snapshots (by the seq they cover) remain
        afterwards, in the same transaction. Returns how many older ones were removed.

        Snapshots are a cache of the fold, each a whole copy of the state (at 100,000 pods
        about 56 MB). A replay to a point before the oldest kept one folds from the first
        event."""
        if self._writer is None:
            raise RuntimeError(f"{self._name}: log is open read-only")
        if not 1 <= seq <= self._last_seq:
            raise ValueError(f"snapshot seq {seq} is outside the log (1..{self._last_seq})")
        if keep < 0:
            raise ValueError(f"keep must be 0 (all) or more, not {keep}")
        with anyio.CancelScope(shield=True), _translate(self._name, f"saving snapshot {seq}"):
            async with self._write_lock:
                try:
                    # The chain's value at `seq`, as this writer stored it.
                    await self._writer.execute(
                        "INSERT OR REPLACE INTO snapshots (seq, created_at, body, digest) VALUES"
                        " (?, ?, ?, (SELECT digest FROM events WHERE seq = ?))",
                        (seq, time.time_ns() // 1_000_000, body, seq),
                    )
                    removed = 0
                    if keep:
                        cursor = await self._writer.execute(
                            "DELETE FROM snapshots WHERE seq < (SELECT seq FROM snapshots"
                            " ORDER BY seq DESC LIMIT 1 OFFSET ?)",
                            (keep - 1,),
                        )
                        removed = cursor.rowcount
                    await self._writer.commit()
                except sqlite3.Error:
                    with suppress(sqlite3.Error):
                        await self._writer.rollback()
                    raise
        return removed

    async def latest_snapshot(self, at_or_before: int | None = None) -> tuple[int, bytes] | None:
        """The newest snapshot covering no event after `at_or_before`, as ``(seq, body)``."""
        rows = await self._fetch(
            "SELECT seq, body FROM snapshots WHERE seq <= ? ORDER BY seq DESC LIMIT 1",
            (_MAX_SEQ if at_or_before is None else at_or_before,),
            "reading snapshots",
        )
        return (int(rows[0][0]), bytes(rows[0][1])) if rows else None

    # -----------------------------------------------------------------------------------------
    # The digest chain

    async def check_chain(self, after: int = 0, until: int | None = None) -> None:
        """Check the chain over events `after` + 1..`until` (the end when None), as a replay
        starting from the snapshot at `after` reads them, and that seqs 1..N are dense:
        `BrokenChain` names the first seq that is missing, unreadable or changed. The start
        is the snapshot's recorded digest if there is one at `after`, else the one stored
        with that event. What the writer checked when it opened the log is not read again."""
        end = self._last_seq if until is None else min(until, self._last_seq)
        if self._checked_after is not None:
            if after >= self._checked_after:
                return
            end = min(end, self._checked_after)
        await anyio.to_thread.run_sync(check_range, self._name, after, end)


# ---------------------------------------------------------------------------------------------
# Opening


class _Start(msgspec.Struct, frozen=True):
    """What opening found: the newest seq, the chain's value there and, read-write, the seq
    from which the open checked the chain to the end."""

    last_seq: int
    head: bytes
    checked_after: int | None = None


def _prepare(
    name: str, readonly: bool, migrations: Sequence[Migration]
) -> tuple[_Start, _WriterLock | None]:
    """Check that `name` is a usable log, create or migrate it (read-write only), and return
    what it found and, read-write, the writer's lock (`_WriterLock`). Runs in a worker
    thread with plain sqlite3. Nothing is written to a file until it is known to be a
    kbatchd log (or a new, empty one); read-write, nothing is appended to a log whose
    start-up checks fail (`_check_start`)."""
    _check_file(name, readonly)
    # Before SQLite opens the file: the lock's descriptor is what creates a new one.
    lock = None if readonly else _WriterLock(name)
    try:
        with _translate(name, "opening"):
            conn = _sqlite_connect(name, readonly)
        # Closed before the lock is released on failure: closing the lock's descriptor drops
        # the fcntl locks SQLite holds on the file (see `_WriterLock`).
        with closing(conn), _translate(name, "opening"):
            _check_identity(conn, name, readonly)
            if lock is not None:
                lock.name_holder()
            version = schema_version(conn)
            known = migrations[-1].version
            if version > known:
                raise SchemaTooNew(
                    f"{name}: log schema version {version} is newer than this kbatchd "
                    f"(knows up to {known}); upgrade kbatchd"
                )
            if version == 0 and not readonly:
                # Before anything is written: a new log's pages are PAGE_SIZE from the start.
                conn.execute(f"PRAGMA page_size = {PAGE_SIZE}")
            if version < known:
                if readonly:
                    raise SchemaTooOld(
                        f"{name}: log schema version {version} needs migrating to {known}, "
                        "which a read-only open does not do; open it read-write once"
                    )
                conn.execute("PRAGMA journal_mode = WAL")
                try:
                    apply_migrations(conn, migrations, {"digest_chain": _fill_in_chain})
                except MigrationError as exc:
                    # One that failed for want of room is no fault of the migration.
                    raise _error_class(exc.__cause__ or exc)(f"{name}: {exc}") from exc
            missing = _TABLES - _tables(conn)
            if missing:
                raise NotALog(f"{name}: not a kbatchd log (no table {', '.join(sorted(missing))})")
            if readonly:
                last_seq, head = conn.execute(_HEAD).fetchone()
                return _Start(int(last_seq), head or GENESIS), lock
            return _check_start(conn, name), lock
    except BaseException:
        if lock is not None:
            lock.release()
        raise


class _WriterLock:
    """The log's writer lock: `flock` on a descriptor of the database file itself, held while
    the log is open. Two writers would each number their events from their own newest seq,
    and the second's appends would collide with or interleave the first's. The lock belongs
    to the file (its inode), so a second writer meets it by any name that reaches the file: a
    hard link, a symlink, a bind mount. A killed writer's lock goes with its process.
    Readers take no lock.

    flock, not fcntl: SQLite locks the file with fcntl, and an fcntl lock belongs to the
    process, so closing any descriptor of the file drops all of them. On Linux the two kinds
    are independent, and an flock belongs to its own descriptor: it lasts, whatever SQLite
    opens and closes, until `release` closes that descriptor (after SQLite's connections).
    (So does a refused open's descriptor, closed at once: in the holder's own process that
    drops SQLite's fcntl locks, which is why one process opens one log once.)

    The descriptor also creates a new log, owner-only: the log holds Job templates, inline
    env values included, and SQLite gives its -wal and -shm files the database's mode. An
    existing log keeps its mode.

    ``LOG-writer`` beside the file (its real path, symlinks resolved) names the holder's pid
    for a refused writer's message, and nothing more: the lock does not depend on it. The
    holder keeps an flock on it too, so a note left by a killed writer is never believed."""

    def __init__(self, name: str) -> None:
        self.note = f"{os.path.realpath(name)}-writer"
        self._note_fd: int | None = None
        try:
            fd = os.open(name, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise _error_class(exc)(f"{name}: cannot open: {exc.strerror}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            holder = self._holder()
            raise LogInUse(
                f"{name}: in use by another writer" + (f" (pid {holder})" if holder else "")
            ) from None
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def _holder(self) -> str:
        """The pid in the note, if a live writer holds the note ("" otherwise)."""
        try:
            fd = os.open(self.note, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return ""
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return os.pread(fd, 32, 0).decode("ascii", "replace").strip()
        except OSError:
            return ""
        finally:
            os.close(fd)
        return ""  # no one holds it: left by a killed writer

    def name_holder(self) -> None:
        """Write this process's pid into the note (best effort: it is only for messages)."""
        with suppress(OSError):
            fd = os.open(self.note, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                os.ftruncate(fd, 0)  # a killed writer's pid may be longer than ours
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            except BaseException:
                os.close(fd)
                raise
            self._note_fd = fd

    def release(self) -> None:
        if self._note_fd is not None:
            with suppress(OSError):
                if os.path.samestat(os.stat(self.note), os.fstat(self._note_fd)):
                    os.unlink(self.note)
            os.close(self._note_fd)
        os.close(self._fd)


def _check_file(name: str, readonly: bool) -> None:
    """Fail early, with a plain message, where SQLite would be vague or would create a file."""
    path = Path(name)
    try:
        special = path.exists() and not (path.is_file() or path.is_dir())
    except OSError as exc:
        raise LogError(f"{name}: cannot read: {exc.strerror or exc}") from None
    if special:
        # Before opening it: opening a FIFO waits for a writer, for ever.
        kind = "a FIFO" if path.is_fifo() else "a socket" if path.is_socket() else "a device"
        raise LogError(f"{name}: is {kind}, not a log file (a regular file)")
    try:
        with path.open("rb") as file:
            header = file.read(len(_SQLITE_MAGIC))
    except FileNotFoundError:
        if not path.parent.is_dir():
            raise LogError(f"{name}: directory {path.parent} does not exist") from None
        if readonly:
            raise LogError(f"{name}: no such log file") from None
        return
    except IsADirectoryError:
        raise LogError(f"{name}: is a directory, not a log file") from None
    except OSError as exc:
        raise _error_class(exc)(f"{name}: cannot read: {exc.strerror or exc}") from None
    # An empty file is an empty database to SQLite: a new log when opened read-write.
    if header and header != _SQLITE_MAGIC:
        raise NotALog(f"{name}: not a kbatchd log (not an SQLite database)")


def _check_identity(conn: sqlite3.Connection, name: str, readonly: bool) -> None:
    (app_id,) = conn.execute("PRAGMA application_id").fetchone()
    if app_id == APPLICATION_ID:
        return
    if app_id != 0:
        raise NotALog(
            f"{name}: not a kbatchd log (SQLite application_id {app_id:#010x}, "
            f"expected {APPLICATION_ID:#010x})"
        )
    tables = _tables(conn)
    if tables:
        raise NotALog(
            f"{name}: not a kbatchd log (an SQLite database of another application, "
            f"with tables {', '.join(sorted(tables))})"
        )
    if readonly:
        raise NotALog(f"{name}: not a kbatchd log (an empty database)")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


# ---------------------------------------------------------------------------------------------
# The digest chain


def _fill_in_chain(conn: sqlite3.Connection) -> None:
    """The digests of the events of a log written before the chain (migration 0003, inside
    its transaction), and those of its snapshots. One pass in seq order over the rows as
    they are: a seq missing from such a log is then found by the checks, like any other."""
    walk = Walk(0, GENESIS)
    low = 0
    while True:
        rows = conn.execute(
            "SELECT seq, at, ref, body FROM events WHERE seq > ? ORDER BY seq LIMIT ?",
            (low, READ_BATCH),
        ).fetchall()
        if not rows:
            break
        updates = []
        digest = walk.digest
        for seq, at, ref, body in rows:
            digest = link(digest, seq, at, ref, body)
            updates.append((digest, seq))
        walk.digest = digest
        conn.executemany("UPDATE events SET digest = ? WHERE seq = ?", updates)
        low = rows[-1][0]
    conn.execute(
        "UPDATE snapshots SET digest = (SELECT digest FROM events WHERE events.seq = snapshots.seq)"
    )


def _check_start(conn: sqlite3.Connection, name: str) -> _Start:
    """What a writer checks before it appends to a log: that seqs 1..N are dense (a count,
    which also reads every page of the events' table), that the newest snapshot's digest is
    its event's, and the chain from there to the end. `BrokenChain` names where it breaks."""
    last_seq = _check_dense_log(conn, name)
    found = conn.execute("SELECT seq FROM snapshots ORDER BY seq DESC LIMIT 1").fetchone()
    after = int(found[0]) if found else 0
    head = _walk_chain(conn, name, after, last_seq)
    return _Start(last_seq, head, checked_after=after)


def check_range(name: str, after: int, until: int) -> None:
    """`EventLog.check_chain` of the log at `name`, on a read-only connection of its own."""
    with _translate(name, "opening"):
        conn = _sqlite_connect(name, readonly=True)
    with closing(conn):
        _check_dense_log(conn, name)
        _walk_chain(conn, name, after, until)


class Checked(msgspec.Struct, frozen=True):
    """What `check_whole` found: a whole chain over seqs 1..`last_seq`."""

    log: str
    last_seq: int
    snapshots: int
    head: str


def check_whole(name: str) -> Checked:
    """The whole log: every event's digest recomputed from the first, and every snapshot's
    against the chain at its seq (`kbatchd replay LOG --check`). `BrokenChain` names the
    first seq where it breaks."""
    with _translate(name, "opening"):
        conn = _sqlite_connect(name, readonly=True)
    with closing(conn):
        with _translate(name, "reading the snapshots"):
            snapshots = conn.execute("SELECT seq, digest FROM snapshots ORDER BY seq").fetchall()
            (last_seq,) = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
        walk = Walk(0, GENESIS)
        for seq, recorded in snapshots:
            _follow(conn, name, walk, seq)
            if recorded != walk.digest:
                raise BrokenChain(name, seq, _SNAPSHOT_DIFFERS.format(seq=seq))
        _follow(conn, name, walk, last_seq)
        return Checked(name, last_seq, len(snapshots), walk.digest.hex())


_SNAPSHOT_DIFFERS: Final = "snapshot seq {seq} records another digest than the chain's there"


def _check_dense_log(conn: sqlite3.Connection, name: str) -> int:
    """The newest seq, once seqs 1..N are known dense: one count, which reads every page of
    the events' table (a damaged one fails it). Where it breaks is then looked for."""
    try:
        with _translate(name, "counting the events"):
            count, last_seq = conn.execute(
                "SELECT count(*), coalesce(max(seq), 0) FROM events"
            ).fetchone()
    except CorruptLog:
        _first_gap(conn, name)
        raise
    if count != last_seq:
        _first_gap(conn, name)
        raise CorruptLog(f"{name}: {count} events under seqs 1..{last_seq}")
    return int(last_seq)


def _first_gap(conn: sqlite3.Connection, name: str) -> None:
    """`BrokenChain` at the first seq missing or unreadable, walking the seqs from 1."""
    expected = 1
    try:
        for (seq,) in conn.execute("SELECT seq FROM events ORDER BY seq"):
            if seq != expected:
                raise BrokenChain(
                    name, expected, f"the event is missing (the next one is seq {seq})"
                )
            expected += 1
    except sqlite3.DatabaseError as exc:
        with _translate(name, "reading the newest seq"):
            (last,) = conn.execute("SELECT coalesce(max(seq), 0) FROM events").fetchone()
        _look_up_one_by_one(conn, name, Walk(expected - 1, b""), last, exc, seqs_only=True)


def _walk_chain(conn: sqlite3.Connection, name: str, after: int, until: int) -> bytes:
    """The chain's value at `until`, walked from `after`: from the digest its snapshot
    recorded, which must be the one stored with its event (or from that event's alone when
    no snapshot is at `after`)."""
    start = GENESIS
    if after:
        with _translate(name, f"reading the digest of seq {after}"):
            stored = conn.execute("SELECT digest FROM events WHERE seq = ?", (after,)).fetchone()
            snapshot = conn.execute(
                "SELECT digest FROM snapshots WHERE seq = ?", (after,)
            ).fetchone()
        if stored is None:
            raise BrokenChain(name, after, "the event is missing")
        if stored[0] is None:
            raise BrokenChain(name, after, "the event has no digest")
        if snapshot is not None and snapshot[0] != stored[0]:
            raise BrokenChain(name, after, _SNAPSHOT_DIFFERS.format(seq=after))
        start = stored[0]
    walk = Walk(after, start)
    _follow(conn, name, walk, until)
    return walk.digest


def _follow(conn: sqlite3.Connection, name: str, walk: Walk, until: int) -> None:
    """Walk the stored events after the walk's position up to `until`, row by row: a page that
    cannot be read stops the walk at the first seq it holds."""
    try:
        walk.follow(conn.execute(_CHAIN, (walk.next_seq - 1, until)))
        walk.end(until)
    except ChainBroken as exc:
        raise BrokenChain(name, exc.seq, exc.reason) from None
    except sqlite3.DatabaseError as exc:
        _look_up_one_by_one(conn, name, walk, until, exc)


def _look_up_one_by_one(
    conn: sqlite3.Connection,
    name: str,
    walk: Walk,
    until: int,
    failure: sqlite3.DatabaseError,
    *,
    seqs_only: bool = False,
) -> NoReturn:
    """Where a walk that failed breaks. sqlite3's cursor steps one row past the one it
    returns, so the row it failed on may be readable: look each up alone (a seek, which
    reads no neighbour) from the first the walk did not get, up to the first that cannot
    be read or is missing (`seqs_only`: there is no chain to follow, only seqs)."""
    while walk.next_seq <= until:
        seq = walk.next_seq
        try:
            row = conn.execute(_ONE, (seq,)).fetchone()
        except sqlite3.DatabaseError as exc:
            raise _unreadable(name, seq, exc) from exc
        if row is None:
            raise BrokenChain(name, seq, "the event is missing")
        if seqs_only:
            walk.next_seq += 1
            continue
        try:
            walk.follow([row])
        except ChainBroken as exc:
            raise BrokenChain(name, exc.seq, exc.reason) from None
    raise _unreadable(name, walk.next_seq, failure) from failure


def _unreadable(name: str, seq: int, exc: sqlite3.DatabaseError) -> LogError:
    """A damaged page met at `seq` breaks the chain there; another error is the file's."""
    if getattr(exc, "sqlite_errorcode", 0) & 0xFF == sqlite3.SQLITE_CORRUPT:
        return BrokenChain(name, seq, f"the event cannot be read ({exc})")
    return LogError(f"{name}: {exc} while reading events from seq {seq}")


def _spans(from_seq: int, until: int, batch: int) -> Iterator[tuple[int, int]]:
    """The seq ranges (inclusive) of the batches a range read asks for."""
    low = max(from_seq, 1)
    while low <= until:
        high = min(low + batch - 1, until)
        yield low, high
        low = high + 1


def _check_dense(name: str, low: int, high: int, rows: list[tuple[bytes]]) -> None:
    if len(rows) != high - low + 1:
        raise CorruptLog(
            f"{name}: events missing in seq {low}..{high} ({len(rows)} of {high - low + 1} found)"
        )


def _sqlite_connect(name: str, readonly: bool) -> sqlite3.Connection:
    if readonly:
        # mode=ro: SQLite itself refuses writes; URI form needs an absolute, quoted path.
        uri = Path(name).absolute().as_uri() + "?mode=ro"
        conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    else:
        conn = sqlite3.connect(name, isolation_level=None)
    try:
        # Both per connection, not written to the file. NORMAL: a commit reaches the WAL,
        # fsync waits for the checkpoint; durable across a crash of the process, not the OS.
        conn.execute("PRAGMA query_only = ON" if readonly else "PRAGMA synchronous = NORMAL")
    except BaseException:
        conn.close()
        raise
    return conn


async def _connect(name: str, *, readonly: bool) -> aiosqlite.Connection:
    def connector() -> sqlite3.Connection:
        with _translate(name, "opening"):
            conn = _sqlite_connect(name, readonly)
        if not readonly:
            conn.isolation_level = "IMMEDIATE"
        return conn

    # aiosqlite.connect() offers no hook for setting pragmas inside its thread.
    conn = aiosqlite.Connection(connector, iter_chunk_size=10_000)
    return await conn


async def _close(conn: aiosqlite.Connection) -> None:
    with anyio.CancelScope(shield=True):
        await conn.close()


async def _fetchone(conn: aiosqlite.Connection, sql: str) -> tuple[Any, ...]:
    rows = cast(list[tuple[Any, ...]], await conn.execute_fetchall(sql))
    return rows[0]


@contextmanager
def _translate(name: str, doing: str) -> Iterator[None]:
    """Turn sqlite3 errors into one-line `LogError`s that name the file and the action."""
    try:
        yield
    except sqlite3.Error as exc:
        code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
        if code == sqlite3.SQLITE_NOTADB:
            raise NotALog(f"{name}: not a kbatchd log ({exc})") from exc
        if code == sqlite3.SQLITE_CORRUPT:
            raise CorruptLog(f"{name}: log is corrupt ({exc}) while {doing}") from exc
        raise _error_class(exc)(f"{name}: {exc} while {doing}") from exc
    except UnicodeDecodeError as exc:
        # kbatchd writes only UTF-8 text, so text that is not is damage: a value in a text
        # column, or the schema itself, which SQLite's error message then quotes.
        raise CorruptLog(f"{name}: log is corrupt (text that is not UTF-8) while {doing}") from exc


def _error_class(exc: BaseException) -> type[LogError]:
    """`LogStorageError` for a failure of the storage (SQLite's full disk or I/O error, or
    the same errno from the OS), `LogError` for anything else."""
    if isinstance(exc, sqlite3.Error):
        storage = (getattr(exc, "sqlite_errorcode", 0) & 0xFF) in _STORAGE_CODES
    else:
        storage = isinstance(exc, OSError) and exc.errno in _STORAGE_ERRNOS
    return LogStorageError if storage else LogError
