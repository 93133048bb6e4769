"""Reading a long replay's events ahead of its fold, in a second process.

A replay in one process reads each stored event (SQLite), decodes it and folds it, one after
the other, on one core. For a long replay `events.replay.rebuild` starts a child process
(`main`, given the log's path and the first and last seq) that reads the range, decodes each
pod change as far as the fold reads it (`events.schema.pod_changes`) and sends the events in
batches down its standard output, while the parent folds the batches before
(`events.fold.BulkFold.fold_changes`). Reading and decoding then run on another core.

The child sends frames, each a 4-byte little-endian length and a MessagePack `_Batch` or
`_Failed`; a `_Failed` is its last. It never writes to the log, and it exits when the parent
stops reading (a broken pipe).
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import IO, Final, Literal

import anyio
import msgspec

from events.schema import PodChange, UndecodableEvent, pod_changes
from events.store import CorruptLog, LogError, read_raw_range

# Events a replay must fold for a reading-ahead process to pay: starting one (an
# interpreter importing msgspec, SQLite and the store) costs about 0.2 s. Measured on the
# 1M-event log: 100,000 events 1.53 s in one process, 1.42 s reading ahead; 50,000 1.00 s
# and 1.09 s; 200,000 2.56 s and 2.19 s.
READ_AHEAD_FROM: Final = 100_000

# Events to a frame. The 1M-event replay measured 8.8-8.9 s with 5,000, 9.2-9.8 s with
# 1,000 (more hand-overs to the thread that reads the pipe).
FRAME_EVENTS: Final = 5_000

# The pipe's capacity asked for (Linux's default limit for an unprivileged process): the
# 1M-event replay measured 8.2-8.4 s with it, 8.6-9.0 s with the default 64 KiB.
_PIPE_BYTES: Final = 1 << 20
_LENGTH_BYTES: Final = 4


class _Batch(msgspec.Struct, frozen=True, array_like=True, tag="batch"):
    first: int
    changes: list[PodChange | bytes]


class _Failed(msgspec.Struct, frozen=True, array_like=True, tag="failed"):
    """Why the child stopped before the end: an event that does not decode to its head
    (`seq`, and msgspec's reason), or the log (`reason`: the one-line message)."""

    what: Literal["event", "corrupt", "log"]
    seq: int
    reason: str

    def error(self) -> Exception:
        if self.what == "event":
            return UndecodableEvent(self.seq, self.reason)
        if self.what == "corrupt":
            return CorruptLog(self.reason)
        return LogError(self.reason)


_FRAMES: Final = msgspec.msgpack.Decoder(_Batch | _Failed)


# ---------------------------------------------------------------------------------------------
# The child


def send_range(path: str, first: int, last: int, out: IO[bytes]) -> None:
    """Write the frames of stored events `first..last` of the log at `path` to `out`."""
    encoder = msgspec.msgpack.Encoder()

    def send(frame: _Batch | _Failed) -> None:
        body = encoder.encode(frame)
        out.write(len(body).to_bytes(_LENGTH_BYTES, "little"))
        out.write(body)

    try:
        for low, rows in read_raw_range(path, first, last, FRAME_EVENTS):
            try:
                changes = pod_changes(low, rows)
            except UndecodableEvent as exc:
                # The events before it are folded first, as in one process.
                send(_Batch(low, pod_changes(low, rows[: exc.seq - low])))
                send(_Failed("event", exc.seq, exc.reason))
                return
            send(_Batch(low, changes))
    except CorruptLog as exc:
        send(_Failed("corrupt", 0, str(exc)))
    except LogError as exc:
        send(_Failed("log", 0, str(exc)))
    finally:
        out.flush()


# The child's program. Not ``-m events.readahead``: run as ``__main__``, this module would
# define a second copy of its frame types there.
_CHILD: Final = "import sys; from events.readahead import main; sys.exit(main(sys.argv[1:]))"


def main(argv: Sequence[str]) -> int:
    """The child: ``LOG FIRST LAST``."""
    path, first, last = argv
    with contextlib.suppress(OSError):  # a smaller pipe is slower, not wrong
        fcntl.fcntl(sys.stdout.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    try:
        send_range(path, int(first), int(last), sys.stdout.buffer)
    except BrokenPipeError:
        # The parent stopped reading (its replay failed or was cancelled). Point stdout at
        # /dev/null so that the interpreter's own flush at exit has nothing to complain of.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 0


# ---------------------------------------------------------------------------------------------
# The parent

Batches = AsyncIterator[tuple[int, list[PodChange | bytes]]]


@contextlib.asynccontextmanager
async def read_ahead(
    path: str, first: int, last: int, *, command: Sequence[str] | None = None
) -> AsyncIterator[Batches]:
    """Stored events `first..last` of the log at `path` (all in it), read and decoded by a
    child process: batches of the seq of their first event and the events
    (`events.schema.pod_changes`). Iterating raises `UndecodableEvent` for an event that
    does not decode to its head, after the batch of those before it, and `LogError` (naming
    the file) when the log cannot be read or the child stops early. The child is killed
    on leaving. `command` replaces the child's command line (tests)."""
    argv = (
        list(command)
        if command is not None
        else [sys.executable, "-c", _CHILD, path, str(first), str(last)]
    )
    # The child's standard error goes to a file, read only if it fails: a pipe that nobody
    # reads while the replay runs would stop the child once full.
    with tempfile.TemporaryFile() as errors:
        child = await anyio.to_thread.run_sync(_start, argv, errors)
        try:
            yield _batches(child, errors, path, first, last)
        finally:
            with anyio.CancelScope(shield=True):
                if child.poll() is None:
                    child.kill()
                await anyio.to_thread.run_sync(_reap, child)


def _start(argv: list[str], errors: IO[bytes]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=errors,
        env=_child_environment(),
    )


def _reap(child: subprocess.Popen[bytes]) -> None:
    child.wait()
    if child.stdout is not None:
        child.stdout.close()


def _child_environment() -> dict[str, str]:
    """This environment, with the directory this package was imported from first on the
    child's path: the child must import the same kbatchd, installed or not."""
    root = str(Path(__file__).resolve().parent.parent)
    inherited = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not inherited else f"{root}{os.pathsep}{inherited}"}


async def _batches(
    child: subprocess.Popen[bytes], errors: IO[bytes], path: str, first: int, last: int
) -> Batches:
    assert child.stdout is not None
    due = first
    while due <= last:
        # Read in a thread: the pipe's bytes are copied once, without the GIL, straight
        # into the frame (through the event loop's streams they were copied four times).
        body = await anyio.to_thread.run_sync(_frame, child.stdout, abandon_on_cancel=True)
        try:
            frame = _FRAMES.decode(body) if body is not None else None
        except msgspec.DecodeError:
            frame = None
        if frame is None:
            raise LogError(await _stopped(child, errors, path, due))
        if isinstance(frame, _Failed):
            raise frame.error()
        if frame.first != due:
            raise LogError(
                f"{path}: the process reading ahead sent seq {frame.first} where {due} was due"
            )
        if frame.changes:
            yield frame.first, frame.changes
        due += len(frame.changes)


def _frame(stdout: IO[bytes]) -> bytes | None:
    """The next frame's body, None if the child's output ends before it does."""
    header = stdout.read(_LENGTH_BYTES)
    if len(header) < _LENGTH_BYTES:
        return None
    size = int.from_bytes(header, "little")
    body = stdout.read(size)
    return body if len(body) == size else None


async def _stopped(child: subprocess.Popen[bytes], errors: IO[bytes], path: str, due: int) -> str:
    """What to say of a child that stopped sending before the end: how it ended, and the
    last line it wrote to its standard error (a traceback's names the exception)."""
    try:
        code: int | None = await anyio.to_thread.run_sync(functools.partial(child.wait, 5))
    except subprocess.TimeoutExpired:
        code = None
    how = (
        "is still running"
        if code is None
        else f"was killed by signal {-code}"
        if code < 0
        else f"exited with code {code}"
    )
    errors.seek(0)
    lines = errors.read().decode(errors="replace").strip().splitlines()
    said = f" ({lines[-1].strip()})" if lines else ""
    return f"{path}: the process reading it ahead {how} before sending event seq {due}{said}"
