"""`events.readahead`: a replay's events read and decoded in a second process give the state
one process gives, and its failures (a corrupt log, a child that dies, a cancelled replay)
end as clear errors with no process left behind."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest

from daemon.tools.synthetic import stream
from events import readahead, replay
from events.readahead import FRAME_EVENTS, read_ahead, send_range
from events.replay import rebuild
from events.schema import Event, PodChange, UndecodableEvent, pod_changes
from events.state import encode_state
from events.store import CorruptLog, EventLog, LogError, read_raw_range
from tests.events.builders import vandalize
from tests.events.replay_story import story, write

# More than two frames, the last one short.
EVENTS = 2 * FRAME_EVENTS + 1_234
READ_FROM = 3_000


@pytest.fixture(scope="module")
def synthetic_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("readahead") / "log.db"
    anyio.run(write, path, list(stream(EVENTS, nodes=200)))
    return path


@pytest.fixture
def log_copy(synthetic_log: Path, tmp_path: Path) -> Path:
    """A copy of the synthetic log to vandalize or add to."""
    path = tmp_path / "log.db"
    path.write_bytes(synthetic_log.read_bytes())
    return path


async def _drain(
    path: Path, last: int, sizes: list[int] | None = None, command: list[str] | None = None
) -> None:
    """Read events 1..`last` ahead to the end, noting in `sizes` how many events each batch
    held."""
    async with read_ahead(str(path), 1, last, command=command) as batches:
        async for _, changes in batches:
            if sizes is not None:
                sizes.append(len(changes))


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("until", "snapshot"),
    [
        pytest.param(None, None, id="whole-log"),
        pytest.param(FRAME_EVENTS, None, id="to-the-end-of-a-frame"),
        pytest.param(FRAME_EVENTS + 1, None, id="one-into-the-next-frame"),
        pytest.param(None, 3_001, id="from-a-snapshot"),
    ],
)
async def test_reading_ahead_gives_the_state_one_process_gives(
    synthetic_log: Path, log_copy: Path, until: int | None, snapshot: int | None
) -> None:
    path = synthetic_log
    if snapshot is not None:
        path = log_copy
        async with EventLog.open(path) as log:
            at = await rebuild(log, until=snapshot, read_ahead=False)
            await log.save_snapshot(snapshot, encode_state(at.state))
    async with EventLog.open(path, readonly=True) as log:
        alone = await rebuild(log, until=until, read_ahead=False)
        ahead = await rebuild(log, until=until, read_ahead=True)
    assert ahead.folded == alone.folded == (until or EVENTS) - (snapshot or 0)
    assert ahead.snapshot == alone.snapshot == snapshot
    assert encode_state(ahead.state) == encode_state(alone.state)


@pytest.mark.anyio
async def test_reading_ahead_folds_decisions_and_outcomes_as_one_process_does(
    tmp_path: Path,
) -> None:
    """The hand-written story: decisions in flight, expectations, a late outcome."""
    events: list[Event] = story().events
    await write(tmp_path / "log.db", events)
    async with EventLog.open(tmp_path / "log.db", readonly=True) as log:
        for until in (None, len(events) // 2):
            alone = await rebuild(log, until=until, read_ahead=False)
            ahead = await rebuild(log, until=until, read_ahead=True)
            assert encode_state(ahead.state) == encode_state(alone.state)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("until", "started"), [(None, True), (READ_FROM - 1, False), (READ_FROM, True)]
)
async def test_rebuild_reads_ahead_from_so_many_events(
    synthetic_log: Path, monkeypatch: pytest.MonkeyPatch, until: int | None, started: bool
) -> None:
    """Unless told, `rebuild` reads ahead when it has `READ_AHEAD_FROM` events or more to
    fold: for fewer, starting a process costs more than it saves."""
    calls: list[tuple[int, int]] = []
    real = readahead.read_ahead

    def spy(path: str, first: int, last: int) -> Any:
        calls.append((first, last))
        return real(path, first, last)

    monkeypatch.setattr(replay, "READ_AHEAD_FROM", READ_FROM)
    monkeypatch.setattr(readahead, "read_ahead", spy)
    async with EventLog.open(synthetic_log, readonly=True) as log:
        replayed = await rebuild(log, until=until)
    assert calls == ([(1, replayed.last_seq)] if started else [])


Frame = readahead._Batch | readahead._Failed


def _frames(data: bytes) -> list[Frame]:
    decoder = msgspec.msgpack.Decoder(Frame)
    frames: list[Frame] = []
    view = memoryview(data)
    while view:
        size = int.from_bytes(view[:4], "little")
        frames.append(decoder.decode(view[4 : 4 + size]))
        view = view[4 + size :]
    return frames


def test_the_child_sends_what_pod_changes_makes_of_each_batch(synthetic_log: Path) -> None:
    out = io.BytesIO()
    send_range(str(synthetic_log), 2, EVENTS, out)
    frames = _frames(out.getvalue())
    expected = [
        readahead._Batch(low, pod_changes(low, rows))
        for low, rows in read_raw_range(str(synthetic_log), 2, EVENTS, FRAME_EVENTS)
    ]
    assert frames == expected
    assert [type(c) for c in expected[0].changes[:3]] == [bytes, bytes, bytes]  # nodes
    assert any(type(c) is PodChange for c in expected[-1].changes)


def test_the_child_sends_the_events_before_a_corrupt_one_then_its_seq(log_copy: Path) -> None:
    path = log_copy
    bad = FRAME_EVENTS + 10
    vandalize(path, "UPDATE events SET body = ? WHERE seq = ?", b"\xc1", bad)
    out = io.BytesIO()
    send_range(str(path), 1, EVENTS, out)
    *batches, failed = _frames(out.getvalue())
    sizes = [(b.first, len(b.changes)) for b in batches if isinstance(b, readahead._Batch)]
    assert sizes == [(1, FRAME_EVENTS), (FRAME_EVENTS + 1, 9)]
    assert len(batches) == 2
    assert isinstance(failed, readahead._Failed)
    assert isinstance(failed.error(), UndecodableEvent)
    assert (failed.what, failed.seq) == ("event", bad)


@pytest.mark.anyio
async def test_events_missing_from_the_log_are_a_corrupt_log(log_copy: Path) -> None:
    vandalize(log_copy, "DELETE FROM events WHERE seq = ?", FRAME_EVENTS + 5)
    with pytest.raises(CorruptLog, match=r"events missing in seq 5001\.\.10000 \(4999 of 5000"):
        await _drain(log_copy, EVENTS - 1)


CHILD_DIES = """
import os, signal, sys
from events.readahead import FRAME_EVENTS, send_range
path, pid_file = sys.argv[1], sys.argv[2]
open(pid_file, "w").write(str(os.getpid()))
send_range(path, 1, FRAME_EVENTS, sys.stdout.buffer)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.anyio
async def test_a_child_killed_mid_replay_is_a_clear_error(
    synthetic_log: Path, tmp_path: Path
) -> None:
    pid_file = tmp_path / "pid"
    command = [sys.executable, "-c", CHILD_DIES, str(synthetic_log), str(pid_file)]
    sent: list[int] = []
    with pytest.raises(LogError) as info:
        await _drain(synthetic_log, EVENTS, sent, command)
    assert sent == [FRAME_EVENTS]  # what it sent before it died is folded first
    assert str(info.value) == (
        f"{synthetic_log}: the process reading it ahead was killed by signal 9 before "
        f"sending event seq {FRAME_EVENTS + 1}"
    )


@pytest.mark.anyio
async def test_a_child_that_fails_says_why(synthetic_log: Path) -> None:
    command = [sys.executable, "-c", "raise SystemExit('no module named kbatchd_missing')"]
    with pytest.raises(LogError) as info:
        await _drain(synthetic_log, EVENTS, command=command)
    assert str(info.value) == (
        f"{synthetic_log}: the process reading it ahead exited with code 1 before sending "
        "event seq 1 (no module named kbatchd_missing)"
    )


CHILD_RECORDS_PID = """
import os, sys
from events.readahead import main
open(sys.argv[1], "w").write(str(os.getpid()))
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.anyio
@pytest.mark.parametrize("how", ["stops-reading", "cancelled"])
async def test_leaving_early_kills_the_child(synthetic_log: Path, tmp_path: Path, how: str) -> None:
    pid_file = tmp_path / "pid"
    command = [
        sys.executable,
        "-c",
        CHILD_RECORDS_PID,
        str(pid_file),
        str(synthetic_log),
        "1",
        str(EVENTS),
    ]
    with anyio.CancelScope() as scope:
        async with read_ahead(str(synthetic_log), 1, EVENTS, command=command) as batches:
            async for _ in batches:
                if how == "cancelled":
                    scope.cancel()
                    await anyio.lowlevel.checkpoint()  # the cancellation lands here
                break
    assert scope.cancel_called == (how == "cancelled")
    pid = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # killed and reaped: no such process


def test_the_child_runs_the_kbatchd_of_its_parent() -> None:
    """The child is started with the directory `events` came from first on its path, so a
    replay from a source tree does not read ahead with an installed kbatchd, or none."""
    env = readahead._child_environment()
    root = os.path.dirname(os.path.dirname(os.path.realpath(readahead.__file__)))
    assert env["PYTHONPATH"].split(os.pathsep)[0] == str(root)


CHILD_COMPLAINS = """
import sys
from events.readahead import main
sys.stderr.write("warning: something to say\\n" * 20_000)  # far more than a pipe holds
sys.stderr.flush()
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.anyio
async def test_a_child_writing_much_to_its_standard_error_is_not_stopped_by_it(
    synthetic_log: Path,
) -> None:
    command = [sys.executable, "-c", CHILD_COMPLAINS, str(synthetic_log), "1", str(EVENTS)]
    sent: list[int] = []
    with anyio.fail_after(60):
        await _drain(synthetic_log, EVENTS, sent, command)
    assert sum(sent) == EVENTS
