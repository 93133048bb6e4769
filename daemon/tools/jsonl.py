"""A log as JSON lines, for sharing it as text: `kbatchd replay LOG --export-jsonl FILE`, and
back into a new log with ``--import-jsonl FILE``.

The first line is a header, ``{"format":"kbatchd-events","version":1,"events":N}``; then one
line per event, ``{"seq":1,"event":{"type":"observed","at":...,"obj":{"kind":"Node",...}}}``,
with field names (the log's own encoding is positional) and fields at their default left
out. The JSON is read and written through *mirror* structs built from the event schema
itself, so a field added to an event is exported and imported without a change here, and an
imported line is checked field by field (a wrong type, an unknown field, a missing one).

Import writes a new log only: it refuses an existing file, writes into a hidden file beside
the target, and moves it into place only when every line was valid and the seqs ran 1, 2, 3
... to the count the header promised; on any error nothing is left behind.
"""

from __future__ import annotations

import os
import sys
import types
import typing
from collections.abc import Callable, Iterator
from contextlib import suppress
from functools import reduce
from operator import or_
from pathlib import Path
from typing import Any, Final, TextIO

import anyio
import msgspec

from events.schema import Event, Observed
from events.store import EventLog

FORMAT: Final = "kbatchd-events"
VERSION: Final = 1
_BATCH: Final = 10_000
_PROGRESS_EVERY: Final = 1 << 16

Progress = Callable[[int, int], None]


class JsonlError(Exception):
    """A file that cannot be imported (``file:line: what is wrong``) or written."""


# ---------------------------------------------------------------------------------------------
# Mirrors: the event structs again, keyed by field name instead of position.

_MIRRORS: dict[type[Any], type[msgspec.Struct]] = {}
_REAL: dict[type[Any], type[msgspec.Struct]] = {}


def _mirror_struct(cls: type[msgspec.Struct]) -> type[msgspec.Struct]:
    found = _MIRRORS.get(cls)
    if found is not None:
        return found
    config = cls.__struct_config__
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for field in msgspec.structs.fields(cls):
        kind = _mirror_type(field.type)
        if field.default is not msgspec.NODEFAULT:
            fields.append((field.name, kind, field.default))
        elif field.default_factory is not msgspec.NODEFAULT:
            fields.append((field.name, kind, msgspec.field(default_factory=field.default_factory)))
        else:
            fields.append((field.name, kind))
    # Events are tagged "t" in the log, where every byte counts; "type" reads better here.
    tag_field = "type" if config.tag_field == "t" else config.tag_field
    mirror = msgspec.defstruct(
        cls.__name__,
        fields,
        tag=config.tag,
        tag_field=tag_field,
        omit_defaults=True,
        forbid_unknown_fields=True,
        kw_only=True,
    )
    _MIRRORS[cls] = mirror
    _REAL[mirror] = cls
    return mirror


def _mirror_type(kind: Any) -> Any:
    """`kind` with every struct type in it replaced by its mirror."""
    if isinstance(kind, type) and issubclass(kind, msgspec.Struct):
        return _mirror_struct(kind)
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if origin in (typing.Union, types.UnionType):
        return reduce(or_, [_mirror_type(arg) for arg in args])
    # Subscripted at run time: the arguments are values here, which mypy cannot check.
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple.__class_getitem__((_mirror_type(args[0]), ...))
        return tuple.__class_getitem__(tuple(_mirror_type(arg) for arg in args))
    if origin is list:
        return list.__class_getitem__(_mirror_type(args[0]))
    if origin is dict:
        return dict.__class_getitem__((args[0], _mirror_type(args[1])))
    return kind


def _to_mirror(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        mirror = _MIRRORS[type(value)]
        return mirror(
            **{name: _to_mirror(getattr(value, name)) for name in value.__struct_fields__}
        )
    if isinstance(value, tuple):
        return tuple(_to_mirror(item) for item in value)
    return value  # maps and lists inside events hold plain JSON data, never structs


def _to_real(value: Any) -> Any:
    if isinstance(value, msgspec.Struct):
        real = _REAL[type(value)]
        return real(**{name: _to_real(getattr(value, name)) for name in value.__struct_fields__})
    if isinstance(value, tuple):
        return tuple(_to_real(item) for item in value)
    return value


_EVENT_MIRROR: Final = _mirror_type(Event)


class Header(msgspec.Struct, forbid_unknown_fields=True):
    format: str
    version: int
    events: int


Line = msgspec.defstruct(
    "Line", [("seq", int), ("event", _EVENT_MIRROR)], forbid_unknown_fields=True
)
_LINE_DECODER: Final = msgspec.json.Decoder(Line)
_HEADER_DECODER: Final = msgspec.json.Decoder(Header)
_ENCODER: Final = msgspec.json.Encoder()


def encode_line(seq: int, event: Event) -> bytes:
    """One event as its JSON line (without the newline)."""
    return _ENCODER.encode(Line(seq=seq, event=_to_mirror(event)))


def decode_line(text: bytes | str) -> tuple[int, Event]:
    """One JSON line back into ``(seq, event)``; raises `msgspec.ValidationError` or
    `msgspec.DecodeError` naming what is wrong."""
    line = _LINE_DECODER.decode(text)
    return line.seq, _to_real(line.event)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# Export


async def export(
    log: EventLog, target: Path, *, until: int | None = None, progress: Progress | None = None
) -> int:
    """Write events 1..`until` (default: all) to `target` (``-``: stdout), which must not
    exist, once their digest chain is whole (a copy made of a damaged log would carry a new,
    whole chain). Returns how many were written."""
    last = log.last_seq if until is None else min(until, log.last_seq)
    await log.check_chain(until=last)
    if str(target) == "-":
        return await _export_to(log, sys.stdout, last, progress)
    try:
        out = await anyio.to_thread.run_sync(_create, target)
    except FileExistsError:
        raise JsonlError(f"{target}: already exists; not overwritten") from None
    except OSError as exc:
        raise JsonlError(f"{target}: cannot create: {exc.strerror or exc}") from None
    try:
        return await _export_to(log, out, last, progress)
    except BaseException:
        out.close()
        await anyio.to_thread.run_sync(_remove, target)
        raise
    finally:
        out.close()


def _create(target: Path) -> TextIO:
    return target.open("x", encoding="utf-8")


async def _export_to(log: EventLog, out: TextIO, last: int, progress: Progress | None) -> int:
    header = _ENCODER.encode(Header(FORMAT, VERSION, last)).decode()
    await anyio.to_thread.run_sync(out.write, header + "\n")
    written = 0
    async for batch in log.read_batches(from_seq=1, until=last):
        chunk = "".join(encode_line(seq, event).decode() + "\n" for seq, event in batch)
        await anyio.to_thread.run_sync(out.write, chunk)
        written += len(batch)
        if progress is not None and written % _PROGRESS_EVERY < len(batch):
            progress(written, last)
    await anyio.to_thread.run_sync(out.flush)
    if progress is not None:
        progress(last, last)
    return written


# ---------------------------------------------------------------------------------------------
# Import


async def import_file(source: Path, target: Path, *, progress: Progress | None = None) -> int:
    """Create the log `target` from the export `source`; returns how many events it holds."""
    await anyio.to_thread.run_sync(_check_target, target)
    partial = target.with_name(f".{target.name}.importing-{os.getpid()}")
    await anyio.to_thread.run_sync(_remove, partial)
    try:
        count = await _import_into(source, partial, progress)
        await anyio.to_thread.run_sync(_place, partial, target)
    except BaseException:
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_remove, partial)
        raise
    return count


def _check_target(target: Path) -> None:
    if target.exists() or Path(f"{target}-wal").exists():
        raise JsonlError(f"{target}: already exists; --import-jsonl only creates a new log")
    if not target.parent.is_dir():
        raise JsonlError(f"{target}: directory {target.parent} does not exist")


async def _import_into(source: Path, partial: Path, progress: Progress | None) -> int:
    lines = _batches(source)
    try:
        expected = await anyio.to_thread.run_sync(next, lines)
    except OSError as exc:
        raise JsonlError(f"{source}: cannot read: {exc.strerror or exc}") from None
    count = 0
    async with EventLog.open(partial) as log:
        while True:
            try:
                batch = await anyio.to_thread.run_sync(next, lines, None)
            except OSError as exc:
                raise JsonlError(f"{source}: cannot read: {exc.strerror or exc}") from None
            if batch is None:
                break
            await log.append(batch)
            count += len(batch)
            if progress is not None and count % _PROGRESS_EVERY < len(batch):
                progress(count, expected)
    if count != expected:
        raise JsonlError(
            f"{source}: the header promises {expected:,} event(s) but the file holds "
            f"{count:,} (truncated?)"
        )
    if progress is not None:
        progress(count, expected)
    return count


def _batches(source: Path) -> Iterator[Any]:
    """First the header's event count, then lists of events, checked line by line."""
    with source.open("rb") as file:
        header = file.readline()
        try:
            head = _HEADER_DECODER.decode(header)
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise JsonlError(
                f"{source}:1: not a kbatchd event export (expected the header "
                f'{{"format":"{FORMAT}","version":{VERSION},"events":N}}): {exc}'
            ) from None
        if head.format != FORMAT or head.version != VERSION:
            raise JsonlError(
                f"{source}:1: format {head.format!r} version {head.version} is not "
                f"{FORMAT!r} version {VERSION}"
            )
        yield head.events
        batch: list[Event] = []
        wanted = 1
        for number, text in enumerate(file, start=2):
            if not text.strip():
                continue
            try:
                seq, event = decode_line(text)
            except (msgspec.ValidationError, msgspec.DecodeError) as exc:
                raise JsonlError(f"{source}:{number}: {exc}") from None
            if seq != wanted:
                raise JsonlError(
                    f"{source}:{number}: seq {seq}, expected {wanted} (seqs run 1, 2, 3, ... "
                    "one per line)"
                )
            if isinstance(event, Observed) and not event.obj.name:
                raise JsonlError(f"{source}:{number}: the observed object has no name")
            batch.append(event)
            wanted += 1
            if len(batch) >= _BATCH:
                yield batch
                batch = []
        if batch:
            yield batch


def _place(partial: Path, target: Path) -> None:
    """Move the finished log into place, never over a file that appeared meanwhile."""
    try:
        os.link(partial, target)
    except FileExistsError:
        raise JsonlError(
            f"{target}: already exists; --import-jsonl only creates a new log"
        ) from None
    except OSError:  # a file system without hard links
        if target.exists():
            raise JsonlError(f"{target}: already exists") from None
        os.replace(partial, target)
        return
    partial.unlink()


def _remove(partial: Path) -> None:
    """A file and the WAL companions SQLite may have left beside it."""
    for path in (partial, Path(f"{partial}-wal"), Path(f"{partial}-shm")):
        with suppress(FileNotFoundError):
            path.unlink()
