"""Event log benchmarks: append through the store against a bare insert and against the
store without its digest chain, replay against decode alone, what a start checks on the 1M
events and what filling in the chain of an older log costs, `kbatchd replay --until` at ten
points of a 1M-event log holding the daemon's snapshots, and the memory of folded state at
10,000 nodes and 100,000 pods."""

from __future__ import annotations

import gc
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from itertools import chain, islice
from pathlib import Path
from typing import Any, Final

import pytest
from msgspec.structs import replace

from daemon.service.config import Daemon
from daemon.tools.synthetic import make_nodes, make_pod, stream
from events import store
from events.fold import fold
from events.migrate import MIGRATIONS, apply_migrations
from events.replay import paused_gc, rebuild
from events.schema import Event, Observed, decode_event, encode_event, event_ref
from events.state import empty_state, encode_state, snapshot_due
from events.store import PAGE_SIZE, EventLog, check_whole
from tests.bench.table import Table

EVENTS = 1_000_000
BATCH = 10_000
# Where `kbatchd replay --until` is timed: every tenth of the log.
POINTS: Final = tuple(range(EVENTS // 10, EVENTS + 1, EVENTS // 10))
REPO: Final = Path(__file__).resolve().parents[2]


def _bare_insert(
    path: Path,
    rows: list[tuple[int, int, str | None, bytes]],
    per: int = 1,
    page_size: int | None = None,
) -> float:
    """Insert the pre-encoded rows in batches of BATCH, `per` rows to a statement, into a
    database of SQLite's default page size or `page_size` (the store uses 64-row statements
    and 64 KiB pages; the target is against the plain one-row `executemany` and defaults)."""
    db = sqlite3.connect(path, isolation_level=None)
    if page_size is not None:
        db.execute(f"PRAGMA page_size={page_size}")
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE events (seq INTEGER PRIMARY KEY, at INTEGER, ref TEXT, body BLOB)")
    many = "INSERT INTO events VALUES " + ", ".join(["(?, ?, ?, ?)"] * per)
    start = time.perf_counter()
    for i in range(0, len(rows), BATCH):
        batch = rows[i : i + BATCH]
        db.execute("BEGIN IMMEDIATE")
        if per == 1:
            db.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", batch)
        else:
            whole = len(batch) - len(batch) % per
            flat = list(chain.from_iterable(batch[:whole]))
            db.executemany(many, [flat[j : j + 4 * per] for j in range(0, len(flat), 4 * per)])
            db.executemany("INSERT INTO events VALUES (?, ?, ?, ?)", batch[whole:])
        db.execute("COMMIT")
    elapsed = time.perf_counter() - start
    db.close()
    return elapsed


async def _store_append(path: Path, snapshots: Daemon | None = None) -> float:
    """Time spent in `append` only. Each batch is made just before it is appended, as ingest
    makes events just before the log takes them (encoding what was just decoded is cache-warm;
    encoding a million events made long before is not, and is not what the daemon does).

    With `snapshots`, each batch is also folded and a snapshot saved when one is due, by the
    daemon's rule and settings (`snapshot_due`, `snapshot_every`, `keep_snapshots`), outside
    the time measured."""
    elapsed = 0.0
    source = stream(EVENTS, nodes=10_000)
    state = empty_state()
    since = 0
    async with EventLog.open(path) as log:
        while batch := list(islice(source, BATCH)):
            start = time.perf_counter()
            seqs = await log.append(batch)
            elapsed += time.perf_counter() - start
            if snapshots is None:
                continue
            with paused_gc():
                for seq, event in zip(seqs, batch, strict=True):
                    fold(state, seq, event)
            since += len(batch)
            if snapshot_due(state, since, snapshots.snapshot_every):
                body = encode_state(state)
                await log.save_snapshot(state.seq, body, keep=snapshots.keep_snapshots)
                since = 0
    return elapsed


# Left out of a timed `kbatchd replay`'s environment: a config file would replace the
# settings the log's own daemon start recorded, and without bytecode written every start
# compiles kbatchd's modules again (1.3 s of imports against 0.6 s), which no installed
# kbatchd does.
_UNSET: Final = frozenset({"KBATCHD_CONFIG", "PYTHONDONTWRITEBYTECODE"})


def _replay_until(path: Path, seq: int) -> tuple[float, float, dict[str, Any]]:
    """`kbatchd replay LOG --until SEQ --json` run as a user runs it: its wall time (the
    interpreter's start included), the CPU time it used (which other work on the machine
    changes less) and the summary it printed."""
    argv = [sys.executable, "-m", "daemon.cli", "replay", str(path), "--until", str(seq), "--json"]
    env = {name: value for name, value in os.environ.items() if name not in _UNSET}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, check=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    summary: dict[str, Any] = json.loads(done.stdout)
    return elapsed, cpu, summary


async def _replay_points(table: Table, path: Path) -> None:
    """`kbatchd replay --until` at ten points of a 1M-event log holding the snapshots the
    daemon would have left in it."""
    await _store_append(path, Daemon())
    with closing(sqlite3.connect(path)) as db:
        kept = [seq for (seq,) in db.execute("SELECT seq FROM snapshots ORDER BY seq")]
    table.add(
        "replay --until: snapshots left in the 1M-event log",
        f"{len(kept)}: " + ", ".join(f"{seq:,}" for seq in kept),
    )
    _replay_until(path, 1)  # untimed: writes the bytecode an installed kbatchd has
    # The ten points, then the longest tail a point can have: one event before a snapshot.
    for seq, target in [*((seq, True) for seq in POINTS), (kept[-1] - 1, False)]:
        elapsed, cpu, summary = _replay_until(path, seq)
        start = f"snapshot {summary['snapshot']:,}" if summary["snapshot"] else "empty"
        table.add(
            f"replay --until {seq:,} (from {start}, {summary['folded']:,} events folded)",
            f"{elapsed:.2f} s (CPU {cpu:.2f} s)",
            "≤ 3 s" if target else "",
            elapsed <= 3 if target else None,
        )


def _heads(
    previous: bytes,
    first: int,
    ats: Sequence[int],
    refs: Sequence[str | None],
    bodies: Sequence[bytes],
) -> list[bytes]:
    """In place of `events.chain.links`: the head stored for every row, nothing computed."""
    return [previous] * len(bodies)


@contextmanager
def _unchained() -> Iterator[None]:
    """The store with its digests not computed: the same appends but for the chain, which is
    what the ratio to it measures."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(store, "links", _heads)
        yield


def _log_before_the_chain(path: Path, rows: list[tuple[int, int, str | None, bytes]]) -> None:
    """A log as a kbatchd from before the digest chain wrote it (schema 2, 64 KiB pages)."""
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute(f"PRAGMA page_size={PAGE_SIZE}")
        db.execute("PRAGMA journal_mode=WAL")
        apply_migrations(db, [m for m in MIGRATIONS if m.version <= 2])
        for i in range(0, len(rows), BATCH):
            db.execute("BEGIN IMMEDIATE")
            db.executemany(
                "INSERT INTO events (seq, at, ref, body) VALUES (?, ?, ?, ?)", rows[i : i + BATCH]
            )
            db.execute("COMMIT")


def _remove(path: Path) -> None:
    """A log no longer measured: its disk space back for the next."""
    path.unlink()


async def _timed_open(path: Path) -> float:
    """How long opening read-write takes (the start's checks, and a migration if due)."""
    start = time.perf_counter()
    async with EventLog.open(path):
        elapsed = time.perf_counter() - start
    return elapsed


def _count(path: Path) -> float:
    """The start's density check alone: one count (and max) over the events."""
    with closing(sqlite3.connect(path)) as db:
        start = time.perf_counter()
        db.execute("SELECT count(*), coalesce(max(seq), 0) FROM events").fetchone()
        return time.perf_counter() - start


async def _starts(table: Table, path: Path) -> None:
    """What a start checks on the 1M-event log: with no snapshot (the chain of every event),
    and with the newest 50,000 events back (the daemon's `snapshot_every`); the count alone,
    and `--check` (the whole chain)."""
    bare = _count(path)
    whole = await _timed_open(path)
    async with EventLog.open(path) as log:
        await log.save_snapshot(log.last_seq - 50_000, b"a snapshot")
    tail = await _timed_open(path)
    start = time.perf_counter()
    check_whole(str(path))
    walk = time.perf_counter() - start
    table.add("start: seqs dense, one count over the 1M events", f"{bare:.2f} s")
    table.add("start: open read-write, newest snapshot 50,000 events back", f"{tail:.2f} s")
    table.add("start: open read-write, no snapshot (the chain of all 1M)", f"{whole:.2f} s")
    table.add("check: replay --check of the 1M events (the whole chain)", f"{walk:.2f} s")


# The three loops below differ only in what follows the decode, and run as a replay runs
# (`events.replay.rebuild`): the collector paused, each event dropped once it is used. Keeping
# every decoded event in a list instead, with the collector on, made "decode alone" five times
# slower (6.8 s against 1.4 s for the 1M events) and the ratio to it look met when it is not.


def _decode_alone(bodies: list[bytes]) -> float:
    with paused_gc():
        start = time.perf_counter()
        for body in bodies:
            decode_event(body)
        return time.perf_counter() - start


def _decode_keep_latest(bodies: list[bytes]) -> float:
    """The least any fold does: each object's newest version kept under its key, a deleted
    one dropped. What this costs over decoding alone is memory traffic (the replaced version
    was made long before and is freed cold), not the fold's logic."""
    latest: dict[str | None, object] = {}
    with paused_gc():
        start = time.perf_counter()
        for body in bodies:
            event = decode_event(body)
            if type(event) is Observed:
                key = event_ref(event)
                if event.change == "DELETED":
                    latest.pop(key, None)
                else:
                    latest[key] = event.obj
        elapsed = time.perf_counter() - start
    del latest
    return elapsed


def _decode_fold(bodies: list[bytes]) -> float:
    """Event by event, as the daemon folds what its watches bring and a replay folds the log."""
    state = empty_state()
    with paused_gc():
        start = time.perf_counter()
        for seq, body in enumerate(bodies, 1):
            fold(state, seq, decode_event(body))
        elapsed = time.perf_counter() - start
    del state
    return elapsed


def _cluster_of(count_nodes: int, count_pods: int) -> Iterator[Event]:
    nodes = make_nodes(count_nodes)
    for node in nodes:
        yield Observed(at=0, cluster="c", change="ADDED", obj=node)
    for i in range(count_pods):
        pod = make_pod(i // 8, i % 8, 0, i, 1)
        bound = replace(
            pod,
            node_name=nodes[i % count_nodes].name,
            phase="Running",
            conditions={"Ready": "True"},
        )
        yield Observed(at=0, cluster="c", change="ADDED", obj=bound)


async def run(table: Table) -> None:
    print(f"event log: generating {EVENTS:,} synthetic pod/node events", flush=True)
    events = list(stream(EVENTS, nodes=10_000))
    rows = [(seq, e.at, event_ref(e), encode_event(e)) for seq, e in enumerate(events, 1)]
    with tempfile.TemporaryDirectory() as tmp:
        bare = _bare_insert(Path(tmp) / "bare.db", rows)
        bare_many = _bare_insert(Path(tmp) / "bare-many.db", rows, per=64)
        bare_pages = _bare_insert(Path(tmp) / "bare-pages.db", rows, page_size=PAGE_SIZE)
        with _unchained():
            unchained = await _store_append(Path(tmp) / "unchained.db")
        _remove(Path(tmp) / "unchained.db")
        appended = await _store_append(Path(tmp) / "log.db")
        _log_before_the_chain(Path(tmp) / "old.db", rows)
        migrated = await _timed_open(Path(tmp) / "old.db")
        _remove(Path(tmp) / "old.db")
        table.add("append: bare executemany", f"{EVENTS / bare:,.0f} events/s")
        table.add("append: bare, 64-row INSERTs", f"{EVENTS / bare_many:,.0f} events/s")
        table.add("append: bare, the store's 64 KiB pages", f"{EVENTS / bare_pages:,.0f} events/s")
        table.add("append: through the store", f"{EVENTS / appended:,.0f} events/s")
        table.add(
            "append: through the store, without the digest chain",
            f"{EVENTS / unchained:,.0f} events/s",
        )
        ratio = bare / appended
        table.add("append: store / bare", f"{ratio:.2f}", "≥ 0.50", ratio >= 0.5)
        table.add("append: store / bare 64-row INSERTs", f"{bare_many / appended:.2f}")
        table.add("append: store / bare with 64 KiB pages", f"{bare_pages / appended:.2f}")
        table.add("append: with the chain / without", f"{unchained / appended:.2f}")
        table.add(
            "migrating a 1M-event log from before the chain (fill-in + start checks)",
            f"{migrated:.1f} s",
        )

        bodies = [row[3] for row in rows]
        del rows, events
        gc.collect()
        decode = _decode_alone(bodies)
        latest = _decode_keep_latest(bodies)
        decode_fold = _decode_fold(bodies)
        del bodies
        gc.collect()
        table.add("replay: decode alone", f"{EVENTS / decode:,.0f} events/s")
        table.add(
            "replay: decode + keep each object's latest version", f"{EVENTS / latest:,.0f} events/s"
        )
        table.add(
            "replay: decode + fold event by event (live)", f"{EVENTS / decode_fold:,.0f} events/s"
        )
        table.add("replay: (decode + keep latest) / decode", f"{decode / latest:.2f}")
        table.add("replay: (decode + fold event by event) / decode", f"{decode / decode_fold:.2f}")

        async with EventLog.open(Path(tmp) / "log.db", readonly=True) as log:
            start = time.perf_counter()
            await rebuild(log)
            whole = time.perf_counter() - start
            start = time.perf_counter()
            await log.check_chain()
            checked = time.perf_counter() - start
        table.add("replay: 1M events from the log with no snapshot", f"{whole:.1f} s")
        table.add("replay: of which the chain check (count + chain of 1M)", f"{checked:.1f} s")
        await _starts(table, Path(tmp) / "log.db")
        _remove(Path(tmp) / "log.db")
        await _replay_points(table, Path(tmp) / "points.db")

    gc.collect()
    tracemalloc.start()
    state = empty_state()
    for seq, event in enumerate(_cluster_of(10_000, 100_000), 1):
        fold(state, seq, event)
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    mb = held / 1e6
    table.add("memory: state, 10k nodes + 100k pods", f"{mb:.0f} MB", "< 400 MB", mb < 400)
