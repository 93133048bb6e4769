"""The SQLite event log: round trips, group commit, append-only history, snapshots, bad files."""

from __future__ import annotations

import hashlib
import os
import socket
import sqlite3
import sys
import textwrap
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

import anyio
import pytest
from anyio.streams.buffered import BufferedByteReceiveStream

from events.intents import Bind, Create, Delete, Patch
from events.migrate import APPLICATION_ID, CODE_SCHEMA_VERSION
from events.objects import Node, OwnerRef, Pod, Taint
from events.schema import (
    Decided,
    Event,
    Observed,
    Outcome,
    Resynced,
    Tick,
    encode_event,
    event_ref,
)
from events.store import (
    PAGE_SIZE,
    BrokenChain,
    CorruptEvent,
    CorruptLog,
    EventLog,
    LogError,
    LogInUse,
    LogStorageError,
    NotALog,
    SchemaTooNew,
)
from tests.events.builders import vandalize
from tests.processes import snapshot_seqs

pytestmark = pytest.mark.anyio

T0 = 1_700_000_000_000


def pod(name: str, rv: int = 1, **fields: object) -> Pod:
    return Pod(
        name=name,
        namespace="train",
        uid=f"uid-{name}",
        rv=str(rv),
        labels={"app": "llm", "team": "ml"},
        owners=(OwnerRef("Job", "job-a", "uid-job-a", controller=True),),
        requests={"cpu": 4000, "nvidia.com/gpu": 8},
        **fields,  # type: ignore[arg-type]
    )


def sample_events() -> list[Event]:
    """One of every event type, with intents of every kind."""
    return [
        Observed(at=T0, cluster="c1", change="ADDED", obj=pod("p0")),
        Observed(
            at=T0 + 1,
            cluster="c1",
            change="ADDED",
            obj=Node(
                name="host-1",
                uid="uid-host-1",
                allocatable={"nvidia.com/gpu": 8, "cpu": 96_000},
                ready=True,
                taints=(Taint("gpu", "NoSchedule"),),
            ),
        ),
        Resynced(at=T0 + 2, cluster="c1", kind="Pod", resource_version="42"),
        Tick(at=T0 + 3),
        Decided(
            at=T0 + 4,
            reconciler="gang",
            key="Pod/c1/train/p0",
            reason="gang complete",
            intents=(
                Bind("c1", "Pod", "train", "p0", node="host-1", uid="uid-p0"),
                Patch("c1", "Pod", "train", "p0", patch={"metadata": {"labels": {"a": "b"}}}),
                Create("c1", "ConfigMap", "train", "cm", body={"data": {"k": "v"}}),
                Delete("c1", "Pod", "train", "old", precondition_uid="uid-old", grace_seconds=0),
            ),
        ),
        Outcome(at=T0 + 5, decision=5, index=0, ok=True, code=201, resource_version="43"),
        Observed(at=T0 + 6, cluster="c1", change="MODIFIED", obj=pod("p0", 2, node_name="host-1")),
        Observed(at=T0 + 7, cluster="c1", change="DELETED", obj=pod("p0", 3, phase="Succeeded")),
    ]


def ticks(n: int, start: int = 0) -> list[Event]:
    return [Tick(at=T0 + start + i) for i in range(n)]


def names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sqlite(path: Path, readonly: bool = False) -> closing[sqlite3.Connection]:
    """A plain, autocommitting connection: the tests' way around the store."""
    target = f"file:{path}?mode=ro" if readonly else str(path)
    return closing(sqlite3.connect(target, uri=readonly, isolation_level=None))


def row_hashes(path: Path) -> dict[int, str]:
    with sqlite(path, readonly=True) as conn:
        rows = conn.execute("SELECT seq, at, ref, body FROM events ORDER BY seq").fetchall()
    return {row[0]: hashlib.sha256(repr(row).encode()).hexdigest() for row in rows}


async def read_all(log: EventLog) -> list[tuple[int, Event]]:
    return [pair async for pair in log.read()]


async def make_log(path: Path, events: list[Event]) -> None:
    async with EventLog.open(path) as log:
        await log.append(events)


# ---------------------------------------------------------------------------------------------
# Appending and reading


async def test_round_trip_and_reopen_continues_numbering(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    events = sample_events()
    async with EventLog.open(path) as log:
        assert log.last_seq == 0
        assert await log.append(events[:3]) == [1, 2, 3]
        assert await log.append(events[3:]) == list(range(4, len(events) + 1))
        assert log.last_seq == len(events)
        assert await read_all(log) == list(enumerate(events, start=1))
        raw = [pair async for pair in log.read_raw()]
        assert raw == [(seq, encode_event(e)) for seq, e in enumerate(events, start=1)]

    more = ticks(5)
    async with EventLog.open(path) as log:
        assert log.last_seq == len(events)
        assert await log.append(more) == list(range(len(events) + 1, len(events) + 6))
        assert await log.count() == len(events) + 5
        assert await read_all(log) == list(enumerate(events + more, start=1))


async def test_read_ranges_and_batches(tmp_path: Path) -> None:
    events = ticks(25)
    async with EventLog.open(tmp_path / "log.db") as log:
        await log.append(events)
        assert [s for s, _ in [p async for p in log.read(from_seq=10, until=12)]] == [10, 11, 12]
        assert [p async for p in log.read(from_seq=24, until=999)] == [
            (24, events[23]),
            (25, events[24]),
        ]
        assert [p async for p in log.read(from_seq=26)] == []
        batches = [batch async for batch in log.read_batches(batch=10)]
        assert [len(batch) for batch in batches] == [10, 10, 5]
        assert [list(batch) for batch in batches] == [
            list(enumerate(events, start=1))[i : i + 10] for i in (0, 10, 20)
        ]
        raw = [(first, rows) async for first, rows in log.read_raw_batches(from_seq=3, batch=10)]
        assert [(first, len(rows)) for first, rows in raw] == [(3, 10), (13, 10), (23, 3)]
        assert [body for _, rows in raw for (body,) in rows] == [
            encode_event(e) for e in events[2:]
        ]
        assert [p async for p in log.read_raw(from_seq=24)] == [
            (24, encode_event(events[23])),
            (25, encode_event(events[24])),
        ]


async def test_events_for_uses_the_ref(tmp_path: Path) -> None:
    events = sample_events()
    async with EventLog.open(tmp_path / "log.db") as log:
        await log.append(events)
        history = await log.events_for("Pod/c1/train/p0")
        # Observed events of the pod and the decision keyed on it.
        assert [seq for seq, _ in history] == [1, 5, 7, 8]
        assert [event_ref(e) for _, e in history] == ["Pod/c1/train/p0"] * 4
        assert [seq for seq, _ in await log.events_for("Pod/c1/train/p0", until=6)] == [1, 5]
        assert await log.events_for("Pod/c1/train/nope") == []


async def test_empty_append_is_a_no_op(tmp_path: Path) -> None:
    async with EventLog.open(tmp_path / "log.db") as log:
        assert await log.append([]) == []
        assert log.stats.transactions == 0


async def test_group_commit_many_producers(tmp_path: Path) -> None:
    producers, per_append = 200, 3
    results: dict[int, list[int]] = {}

    async with EventLog.open(tmp_path / "log.db") as log:

        async def produce(i: int) -> None:
            results[i] = await log.append(ticks(per_append, start=i * per_append))

        async with anyio.create_task_group() as tg:
            for i in range(producers):
                tg.start_soon(produce, i)

        total = producers * per_append
        assert sorted(s for seqs in results.values() for s in seqs) == list(range(1, total + 1))
        for seqs in results.values():
            assert seqs == list(range(seqs[0], seqs[0] + per_append))
        assert log.stats.appends == producers
        assert log.stats.events == total
        assert log.stats.transactions <= producers // 10
        stored = dict(await read_all(log))
        for i, seqs in results.items():
            assert [stored[s] for s in seqs] == ticks(per_append, start=i * per_append)


async def test_a_failing_append_fails_alone_and_seqs_stay_dense(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    outcomes: dict[int, list[int] | LogError] = {}
    async with EventLog.open(path) as log:

        async def produce(i: int) -> None:
            # SQLite integers are 64-bit: this one cannot be stored.
            events = [Tick(at=2**63)] if i == 5 else ticks(2, start=10 * i)
            try:
                outcomes[i] = await log.append(events)
            except LogError as exc:
                outcomes[i] = exc

        async with anyio.create_task_group() as tg:
            for i in range(10):
                tg.start_soon(produce, i)

        failure = outcomes.pop(5)
        assert isinstance(failure, LogError)
        assert str(path) in str(failure)
        assert log.stats.failed_transactions >= 1
        seqs = sorted(
            s for seq_list in outcomes.values() if isinstance(seq_list, list) for s in seq_list
        )
        assert seqs == list(range(1, 19))
        assert await log.append(ticks(1)) == [19]
    async with EventLog.open(path, readonly=True) as log:
        assert [s for s, _ in await read_all(log)] == list(range(1, 20))


async def test_cancellation_still_commits_what_was_queued(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    await make_log(path, [])
    acknowledged: dict[int, list[int]] = {}
    with sqlite(path) as blocker, anyio.CancelScope() as scope:
        # Another writer holds the lock, so nothing can commit until after the cancellation.
        blocker.execute("BEGIN IMMEDIATE")
        async with EventLog.open(path) as log:

            async def produce(i: int) -> None:
                acknowledged[i] = await log.append(ticks(3, start=3 * i))

            async with anyio.create_task_group() as tg:
                for i in range(100):
                    tg.start_soon(produce, i)
                # Every producer has queued its append; the writer waits for the lock.
                await anyio.wait_all_tasks_blocked()
                scope.cancel()
                blocker.execute("ROLLBACK")
    assert scope.cancelled_caught

    async with EventLog.open(path, readonly=True) as log:
        stored = dict(await read_all(log))
    # All 100 appends are in the log, each whole, whether acknowledged or not.
    assert sorted(stored) == list(range(1, 301))
    assert sorted(e.at for e in stored.values()) == [e.at for e in ticks(300)]
    for i, seqs in acknowledged.items():
        assert [stored[s] for s in seqs] == ticks(3, start=3 * i)


async def test_append_after_close_or_read_only_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    async with EventLog.open(path) as log:
        await log.append(ticks(1))
    with pytest.raises(RuntimeError, match="closed"):
        await log.append(ticks(1))
    async with EventLog.open(path, readonly=True) as ro:
        with pytest.raises(RuntimeError, match="read-only"):
            await ro.append(ticks(1))
        with pytest.raises(RuntimeError, match="read-only"):
            await ro.save_snapshot(1, b"x")


async def test_an_error_in_the_block_propagates_unwrapped(tmp_path: Path) -> None:
    path = tmp_path / "log.db"

    async def append_then_fail() -> None:
        async with EventLog.open(path) as log:
            await log.append(ticks(2))
            raise KeyError("boom")

    # Not an ExceptionGroup from the writer's task group: what the block raised.
    with pytest.raises(KeyError):
        await append_then_fail()
    async with EventLog.open(path, readonly=True) as log:
        assert await log.count() == 2


# ---------------------------------------------------------------------------------------------
# Append-only


async def test_triggers_refuse_update_and_delete(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    await make_log(path, ticks(3))
    with sqlite(path) as conn:
        with pytest.raises(sqlite3.DatabaseError, match="events are append-only"):
            conn.execute("UPDATE events SET body = x'00' WHERE seq = 2")
        with pytest.raises(sqlite3.DatabaseError, match="events are append-only"):
            conn.execute("DELETE FROM events WHERE seq = 3")
    assert len(row_hashes(path)) == 3


async def test_history_never_changes(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    await make_log(path, sample_events())
    before = row_hashes(path)

    async with EventLog.open(path) as log:
        await log.append(ticks(10))
        await log.save_snapshot(5, b"state-5")
        await log.save_snapshot(log.last_seq, b"state-end")
    async with EventLog.open(path) as log:
        await log.append(sample_events())
        await log.save_snapshot(5, b"state-5-again")
    async with EventLog.open(path, readonly=True) as log:
        await read_all(log)
        await log.events_for("Pod/c1/train/p0")

    after = row_hashes(path)
    assert len(after) == len(before) + 10 + len(sample_events())
    assert {seq: after[seq] for seq in before} == before


# ---------------------------------------------------------------------------------------------
# Snapshots


async def test_snapshots(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    async with EventLog.open(path) as log:
        await log.append(ticks(10))
        assert await log.latest_snapshot() is None
        for seq in (3, 9, 5):
            await log.save_snapshot(seq, f"state@{seq}".encode())
        assert await log.latest_snapshot() == (9, b"state@9")
        assert await log.latest_snapshot(at_or_before=8) == (5, b"state@5")
        assert await log.latest_snapshot(at_or_before=5) == (5, b"state@5")
        assert await log.latest_snapshot(at_or_before=4) == (3, b"state@3")
        assert await log.latest_snapshot(at_or_before=2) is None
        await log.save_snapshot(9, b"state@9 again")
        assert await log.latest_snapshot() == (9, b"state@9 again")
        for bad in (0, 11):
            with pytest.raises(ValueError, match="outside the log"):
                await log.save_snapshot(bad, b"x")
        assert log.stats.transactions == 1
    async with EventLog.open(path, readonly=True) as log:
        assert await log.latest_snapshot(at_or_before=6) == (5, b"state@5")


@pytest.mark.parametrize(
    ("saved", "keep", "kept", "removed"),
    [
        ((2, 4, 6, 8), 0, [2, 4, 6, 8], [0, 0, 0, 0]),
        ((2, 4, 6, 8), 2, [6, 8], [0, 0, 1, 1]),
        ((2, 4, 6, 8), 1, [8], [0, 1, 1, 1]),
        ((2, 4), 5, [2, 4], [0, 0]),
        # Saved out of order: the newest are the ones covering the most events.
        ((8, 2, 6), 2, [6, 8], [0, 0, 1]),
        # Saving a kept seq again replaces it and removes nothing.
        ((2, 4, 4), 2, [2, 4], [0, 0, 0]),
    ],
    ids=["keep-all", "keep-two", "keep-one", "fewer-than-kept", "out-of-order", "resaved"],
)
async def test_saving_a_snapshot_keeps_the_newest(
    tmp_path: Path, saved: tuple[int, ...], keep: int, kept: list[int], removed: list[int]
) -> None:
    path = tmp_path / "log.db"
    async with EventLog.open(path) as log:
        await log.append(ticks(10))
        counts = [await log.save_snapshot(seq, b"s%d" % seq, keep=keep) for seq in saved]
        assert await log.latest_snapshot() == (kept[-1], b"s%d" % kept[-1])
    assert counts == removed
    assert snapshot_seqs(path) == kept


async def test_a_negative_snapshot_count_is_refused_and_removes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    async with EventLog.open(path) as log:
        await log.append(ticks(4))
        await log.save_snapshot(2, b"s2")
        with pytest.raises(ValueError, match="keep must be 0"):
            await log.save_snapshot(4, b"s4", keep=-1)
    assert snapshot_seqs(path) == [2]


async def test_removed_snapshots_leave_their_pages_for_the_next(tmp_path: Path) -> None:
    """The point of the bound: a long-running daemon's file stops growing with snapshots."""
    path = tmp_path / "log.db"
    body = bytes(range(256)) * 4096  # 1 MiB
    async with EventLog.open(path) as log:
        await log.append(ticks(40))
        for seq in range(1, 11):
            await log.save_snapshot(seq, body, keep=2)
    size = path.stat().st_size  # closed: the write-ahead log is in the file
    async with EventLog.open(path) as log:
        for seq in range(11, 41):
            await log.save_snapshot(seq, body, keep=2)
    assert size < 4 * len(body) < 30 * len(body)
    assert path.stat().st_size == size
    assert snapshot_seqs(path) == [39, 40]


# ---------------------------------------------------------------------------------------------
# Read-only access


async def test_read_only_after_a_clean_close(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    events = sample_events()
    await make_log(path, events)
    # A clean close checkpoints the WAL into the database and removes it.
    assert names(tmp_path) == ["log.db"]
    before = digest(path)
    async with EventLog.open(path, readonly=True) as log:
        assert log.readonly
        assert log.last_seq == len(events)
        assert await read_all(log) == list(enumerate(events, start=1))
    assert digest(path) == before


async def test_read_only_beside_a_writer_in_this_process(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    async with EventLog.open(path) as writer:
        await writer.append(ticks(10))
        async with EventLog.open(path, readonly=True) as reader:
            assert [s for s, _ in await read_all(reader)] == list(range(1, 11))
            await writer.append(ticks(5, start=10))
            assert reader.last_seq == 10
            assert await reader.count() == 15
            assert await read_all(reader) == list(enumerate(ticks(15), start=1))


async def test_read_only_beside_a_writer_in_another_process(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    script = textwrap.dedent(
        """
        import sys
        import anyio
        from events.schema import Tick
        from events.store import EventLog

        async def main() -> None:
            async with EventLog.open(sys.argv[1]) as log:
                await log.append([Tick(at=i) for i in range(100)])
                print("appended", flush=True)
                await anyio.to_thread.run_sync(sys.stdin.readline)
                await log.append([Tick(at=100)])

        anyio.run(main)
        """
    )
    with anyio.fail_after(60):
        async with await anyio.open_process([sys.executable, "-c", script, str(path)]) as child:
            assert child.stdout is not None
            assert child.stdin is not None
            stdout = BufferedByteReceiveStream(child.stdout)
            assert await stdout.receive_until(b"\n", 100) == b"appended"
            async with EventLog.open(path, readonly=True) as log:
                assert await read_all(log) == [(i + 1, Tick(at=i)) for i in range(100)]
            await child.stdin.send(b"go\n")
            assert await child.wait() == 0
    async with EventLog.open(path, readonly=True) as log:
        assert await log.count() == 101


# ---------------------------------------------------------------------------------------------
# Bad input: the right error, one line naming the file, and nothing written


def _check_error(exc: LogError, path: Path, *fragments: str) -> None:
    message = str(exc)
    assert message.startswith(str(path)), message
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


async def _open_and_read_everything(path: Path, readonly: bool) -> None:
    async with EventLog.open(path, readonly=readonly) as log:
        await read_all(log)
        await log.latest_snapshot()


@pytest.fixture(params=[False, True], ids=["read-write", "read-only"])
def readonly(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


async def test_a_text_file_is_not_a_log(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are not the events you are looking for\n" * 100)
    before = digest(path)
    with pytest.raises(NotALog) as info:
        await _open_and_read_everything(path, readonly)
    _check_error(info.value, path, "not an SQLite database")
    assert digest(path) == before


@pytest.mark.parametrize("application_id", [0, 0x1234_5678])
async def test_another_applications_database_is_not_a_log(
    tmp_path: Path, readonly: bool, application_id: int
) -> None:
    path = tmp_path / "other.db"
    with sqlite(path) as conn:
        conn.execute(f"PRAGMA application_id = {application_id}")
        conn.execute("CREATE TABLE events (id INTEGER PRIMARY KEY, what TEXT)")
        conn.execute("INSERT INTO events (what) VALUES ('party')")
    before = digest(path)
    with pytest.raises(NotALog) as info:
        await _open_and_read_everything(path, readonly)
    _check_error(info.value, path, "not a kbatchd log")
    assert digest(path) == before
    assert names(tmp_path) == ["other.db"]


async def test_an_empty_file_is_not_a_log_when_read_only(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.touch()
    with pytest.raises(NotALog) as info:
        await _open_and_read_everything(path, readonly=True)
    _check_error(info.value, path, "not a kbatchd log")
    assert path.read_bytes() == b""


async def test_a_truncated_log_is_corrupt(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "log.db"
    # Large enough to span hundreds of pages, so half the file loses real data.
    async with EventLog.open(path) as log:
        await log.append(sample_events() * 625)
        await log.save_snapshot(log.last_seq, b"state")
    size = path.stat().st_size
    assert size > 100 * 4096
    with path.open("r+b") as file:
        file.truncate(size // 2)
    before = digest(path)
    with pytest.raises(CorruptLog) as info:
        await _open_and_read_everything(path, readonly)
    _check_error(info.value, path, "corrupt")
    assert digest(path) == before


async def test_a_damaged_page_names_the_seqs_being_read(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "log.db"
    await make_log(path, sample_events() * 625)
    with sqlite(path, readonly=True) as conn:
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        (pages,) = conn.execute("PRAGMA page_count").fetchone()
    with path.open("r+b") as file:
        file.seek(page_size * (pages // 2))
        file.write(b"\xff" * page_size)
    before = digest(path)
    if readonly:
        async with EventLog.open(path, readonly=True) as log:
            with pytest.raises(CorruptLog) as info:
                await read_all(log)
        _check_error(info.value, path, "log is corrupt", "while reading events seq ")
    else:
        # A writer's start counts the events, which reads every page: it appends nothing.
        with pytest.raises(BrokenChain) as info:
            await _open_and_read_everything(path, readonly)
        _check_error(info.value, path, "the log breaks at seq ", "the event cannot be read")
    assert digest(path) == before


async def test_a_corrupt_event_is_reported_with_its_seq(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "log.db"
    events = sample_events() * 5
    await make_log(path, events)
    # Chained again over the bad body: the store's reads, not the chain, are under test.
    vandalize(path, "UPDATE events SET body = x'c1c1c1' WHERE seq = 17", rechain=True)
    before = digest(path)

    seen: list[int] = []

    async def read_into_seen(log: EventLog) -> None:
        async for seq, _ in log.read(batch=5):
            seen.append(seq)

    async with EventLog.open(path, readonly=readonly) as log:
        with pytest.raises(CorruptEvent) as info:
            await read_into_seen(log)
        assert info.value.seq == 17
        _check_error(info.value, path, "event seq 17 is corrupt: ", "MessagePack data is malformed")
        assert seen == list(range(1, 17))
        ref = event_ref(events[16])
        assert ref is not None
        with pytest.raises(CorruptEvent, match="event seq 17 is corrupt"):
            await log.events_for(ref)
        # Raw reads do not decode, so they still work: a tool can dump the bad row.
        assert [pair async for pair in log.read_raw(from_seq=17, until=17)] == [
            (17, b"\xc1\xc1\xc1")
        ]
    assert digest(path) == before


async def test_a_corrupt_event_propagates_out_of_the_block(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    await make_log(path, ticks(3))
    vandalize(path, "UPDATE events SET body = x'c1c1c1' WHERE seq = 2", rechain=True)
    with pytest.raises(CorruptEvent) as info:
        await _open_and_read_everything(path, readonly=False)
    assert info.value.seq == 2


@pytest.mark.parametrize(
    "bump",
    [
        "PRAGMA user_version = 99",
        "INSERT INTO schema_migrations (version, name, applied_at) VALUES (99, 'future', 0)",
    ],
    ids=["user_version", "schema_migrations"],
)
async def test_a_newer_schema_is_refused(tmp_path: Path, readonly: bool, bump: str) -> None:
    path = tmp_path / "log.db"
    await make_log(path, ticks(3))
    with sqlite(path) as conn:
        conn.execute(bump)
    before = digest(path)
    with pytest.raises(SchemaTooNew) as info:
        await _open_and_read_everything(path, readonly)
    _check_error(
        info.value,
        path,
        f"log schema version 99 is newer than this kbatchd (knows up to {CODE_SCHEMA_VERSION}); "
        "upgrade kbatchd",
    )
    assert digest(path) == before


async def test_a_missing_file_in_read_only(tmp_path: Path) -> None:
    path = tmp_path / "nope.db"
    with pytest.raises(LogError) as info:
        await _open_and_read_everything(path, readonly=True)
    _check_error(info.value, path, "no such log file")
    assert names(tmp_path) == []


def _fifo(tmp: Path) -> Path:
    os.mkfifo(tmp / "log.db")
    return tmp / "log.db"


def _socket(tmp: Path) -> Path:
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(tmp / "log.db"))
    return tmp / "log.db"


@pytest.mark.parametrize(
    ("make_path", "fragment"),
    [
        (lambda tmp: tmp / "no" / "such" / "dir" / "log.db", "does not exist"),
        (lambda tmp: tmp, "is a directory"),
        (_fifo, "is a FIFO, not a log file (a regular file)"),
        (_socket, "is a socket, not a log file (a regular file)"),
        (lambda tmp: Path(os.devnull), "is a device, not a log file (a regular file)"),
    ],
    ids=["missing-directory", "directory", "fifo", "socket", "device"],
)
async def test_unusable_paths(
    tmp_path: Path, readonly: bool, make_path: Callable[[Path], Path], fragment: str
) -> None:
    path = make_path(tmp_path)
    before = names(tmp_path)
    with pytest.raises(LogError) as info:
        await _open_and_read_everything(path, readonly)
    _check_error(info.value, path, fragment)
    assert names(tmp_path) == before


async def test_new_log_is_stamped(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    await make_log(path, ticks(1))
    with sqlite(path, readonly=True) as conn:
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
        assert conn.execute("PRAGMA user_version").fetchone() == (CODE_SCHEMA_VERSION,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
        indexes = conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'"
        ).fetchall()
        assert indexes == []


async def test_a_new_log_has_large_pages_and_an_older_one_keeps_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def page_size(path: Path) -> int:
        with closing(sqlite3.connect(path)) as conn:
            return int(conn.execute("PRAGMA page_size").fetchone()[0])

    async with EventLog.open(tmp_path / "new.db") as log:
        await log.append(sample_events())
    assert page_size(tmp_path / "new.db") == PAGE_SIZE == 65_536

    with monkeypatch.context() as patched:
        patched.setattr("events.store.PAGE_SIZE", 4096)  # as versions before the change made
        async with EventLog.open(tmp_path / "old.db") as log:
            await log.append(sample_events())
    async with EventLog.open(tmp_path / "old.db") as log:
        await log.append(sample_events())
    assert page_size(tmp_path / "old.db") == 4096
    async with EventLog.open(tmp_path / "old.db", readonly=True) as log:
        assert [e for _, e in [pair async for pair in log.read()]] == sample_events() * 2


# ---------------------------------------------------------------------------------------------
# One writer


async def test_a_second_writer_is_refused_naming_the_first_and_readers_are_not(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    async with EventLog.open(path) as first:
        await first.append(ticks(3))
        assert note(path).read_text() == f"{os.getpid()}\n"
        with pytest.raises(LogInUse) as caught:
            async with EventLog.open(path):
                pass
        assert str(caught.value) == f"{path}: in use by another writer (pid {os.getpid()})"
        async with EventLog.open(path, readonly=True) as reader:
            assert reader.last_seq == 3
        await first.append(ticks(1, start=4))  # the refused writer changed nothing
    assert not note(path).exists()  # removed with the log
    async with EventLog.open(path) as again:
        assert again.last_seq == 4


def note(path: Path) -> Path:
    """Where a writer of `path` names itself (``LOG-writer`` beside the real file)."""
    return Path(f"{os.path.realpath(path)}-writer")


def _other_name(tmp_path: Path, path: Path, how: str) -> Path:
    """Another way to reach the log file `path`."""
    if how == "hard-link":
        os.link(path, tmp_path / "link.db")
        return tmp_path / "link.db"
    if how == "symlink":
        (tmp_path / "elsewhere").mkdir()
        (tmp_path / "elsewhere" / "log.db").symlink_to(path)
        return tmp_path / "elsewhere" / "log.db"
    assert how == "deleted-note"
    note(path).unlink()
    return path


@pytest.mark.parametrize(
    ("how", "named"),
    [("hard-link", False), ("symlink", True), ("deleted-note", False)],
)
async def test_every_name_of_the_file_meets_its_lock(tmp_path: Path, how: str, named: bool) -> None:
    path = tmp_path / "log.db"
    async with EventLog.open(path) as first:
        await first.append(ticks(2))
        other = _other_name(tmp_path, path, how)
        with pytest.raises(LogInUse) as caught:
            async with EventLog.open(other):
                pass
        pid = f" (pid {os.getpid()})" if named else ""
        assert str(caught.value) == f"{other}: in use by another writer{pid}"
        # (Not through the hard link: SQLite finds the WAL by the name, so a reader there
        # would miss what the writer has not checkpointed yet.)
        async with EventLog.open(path, readonly=True) as reader:
            assert await reader.count() == 2
        assert await first.append(ticks(1, start=2)) == [3]
    async with EventLog.open(other) as log:  # free again, by any name
        assert log.last_seq == 3


async def test_the_lock_outlasts_sqlite_closing_its_own_descriptors(tmp_path: Path) -> None:
    """SQLite's fcntl locks go when the process closes any descriptor of the file; the
    writer's flock must not: readers opening and closing the file in the writer's process
    leave it held, for another process too."""
    path = tmp_path / "log.db"
    probe = (
        "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDONLY)\n"
        "try: fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
        "except BlockingIOError: sys.exit(3)"
    )

    async def locked_for_another_process() -> bool:
        done = await anyio.run_process([sys.executable, "-c", probe, str(path)], check=False)
        return done.returncode == 3

    async with EventLog.open(path) as log:
        await log.append(ticks(2))
        assert await locked_for_another_process()
        for _ in range(3):
            async with EventLog.open(path, readonly=True) as reader:
                assert await reader.count() == 2
            with sqlite(path) as conn:
                conn.execute("SELECT count(*) FROM events").fetchone()
            os.close(os.open(path, os.O_RDONLY))
        assert await locked_for_another_process()
        with pytest.raises(LogInUse):
            async with EventLog.open(path):
                pass
        assert await log.append(ticks(1, start=2)) == [3]
    assert not await locked_for_another_process()


async def test_a_note_left_by_a_killed_writer_blocks_nothing_and_is_not_believed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    async with EventLog.open(path) as log:
        await log.append(ticks(2))
    note(path).write_text("4194303\n")  # no process holds it
    async with EventLog.open(path) as log:
        assert note(path).read_text() == f"{os.getpid()}\n"
        assert log.last_seq == 2
    note(path).write_text("4194303\n")
    os.link(path, tmp_path / "link.db")
    async with EventLog.open(tmp_path / "link.db"):
        with pytest.raises(LogInUse) as caught:
            async with EventLog.open(path):
                pass
        assert str(caught.value) == f"{path}: in use by another writer"


async def test_a_new_log_is_owner_only_with_its_wal_and_shm_and_an_old_one_keeps_its_mode(
    tmp_path: Path,
) -> None:
    def modes(*paths: Path) -> list[str]:
        return [oct(p.stat().st_mode & 0o777) for p in paths]

    path = tmp_path / "log.db"
    files = [path, tmp_path / "log.db-wal", tmp_path / "log.db-shm", tmp_path / "log.db-writer"]
    umask = os.umask(0o022)
    try:
        async with EventLog.open(path) as log:
            await log.append(ticks(2))
            assert modes(*files) == ["0o600"] * 4
        path.chmod(0o640)
        async with EventLog.open(path) as log:
            await log.append(ticks(1, start=2))
            assert modes(*files[:3]) == ["0o640"] * 3
    finally:
        os.umask(umask)


async def test_a_full_database_fails_an_append_as_storage_and_the_log_goes_on(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    big = [Tick(at=i) for i in range(20_000)]
    async with EventLog.open(path) as log:
        await log.append(ticks(2))
        # What a full disk answers, without one: SQLITE_FULL past the page limit.
        writer = log._writer
        assert writer is not None
        (pages,) = (await writer.execute_fetchall("PRAGMA page_count"))[0]
        await writer.execute(f"PRAGMA max_page_count = {pages}")
        with pytest.raises(LogStorageError) as caught:
            await log.append(big)
        assert str(caught.value) == (
            f"{path}: appending seq 3..20002 failed: database or disk is full"
        )
        await writer.execute("PRAGMA max_page_count = 4294967294")
        assert await log.append(big) == list(range(3, 20_003))
    async with EventLog.open(path, readonly=True) as log:
        assert [s for s, _ in await read_all(log)] == list(range(1, 20_003))


async def test_a_bad_file_gets_no_lock_file_beside_it(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a log\n")
    with pytest.raises(NotALog):
        async with EventLog.open(path):
            pass
    assert names(tmp_path) == ["notes.txt"]
