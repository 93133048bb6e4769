"""Rebuilding state from the log: from the newest snapshot at or before a point, folding the
tail, and the summaries `kbatchd replay` prints."""

from __future__ import annotations

import gc
import os
import re
import sqlite3
import tempfile
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import msgspec

from events import migrate
from events.fold import fold, restored
from events.migrate import Migration
from events.quantity import format_units
from events.schema import DECODE_ERRORS, Decided, Event, Observed, Outcome, Resynced, Started, Tick
from events.state import State, decode_state, empty_state
from events.store import EventLog, LogError, SchemaTooOld
from events.topology import DEFAULT_LEVELS, Topology

Progress = Callable[[int, int], None]
PROGRESS_EVERY = 1 << 16


@asynccontextmanager
async def open_for_replay(
    path: str | os.PathLike[str],
    *,
    migrations: Sequence[Migration] | None = None,
    note: Callable[[str], None] | None = None,
) -> AsyncIterator[EventLog]:
    """The log at `path`, open read-only. A log of an older schema is replayed from a migrated
    copy (in the temporary directory, ``$TMPDIR``): a replay never writes to the user's log.
    A log of a newer schema is refused (`SchemaTooNew`, from the store)."""
    known = migrate.MIGRATIONS if migrations is None else migrations
    async with AsyncExitStack() as stack:
        try:
            log = await stack.enter_async_context(
                EventLog.open(path, readonly=True, migrations=known)
            )
        except SchemaTooOld:
            tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="kbatchd-replay-"))
            copy = Path(tmp) / Path(path).name
            old = await anyio.to_thread.run_sync(_copy_log, os.fspath(path), os.fspath(copy))
            async with EventLog.open(copy, migrations=known):
                pass  # opening read-write is what migrates
            if note is not None:
                note(
                    f"{os.fspath(path)}: log schema version {old} is older than this "
                    f"kbatchd's; replaying a copy migrated to schema version "
                    f"{known[-1].version} (the log itself is not changed)"
                )
            log = await stack.enter_async_context(
                EventLog.open(copy, readonly=True, migrations=known)
            )
        yield log


def _copy_log(source: str, target: str) -> int:
    """A consistent copy of a log (its WAL included), read through a read-only connection;
    returns the source's schema version."""
    uri = Path(source).absolute().as_uri() + "?mode=ro"
    try:
        with (
            closing(sqlite3.connect(uri, uri=True)) as src,
            closing(sqlite3.connect(target)) as dst,
        ):
            src.backup(dst)
            return migrate.schema_version(src)
    except sqlite3.Error as exc:
        raise LogError(f"{source}: copying the log to migrate it failed: {exc}") from exc


@contextmanager
def paused_gc() -> Iterator[None]:
    """The cyclic garbage collector off for a long fold, then back as it was.

    Folding makes no reference cycles (state is dicts, sets and frozen structs; events are
    structs), so every object it frees goes by reference counting; the collector's passes over
    a growing state cost a 1M-event replay 2-7 % (three A/B runs), for nothing."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class SkippedSnapshot(msgspec.Struct, frozen=True):
    """A snapshot a replay could not start from, and why."""

    seq: int
    reason: str

    def describe(self, path: str) -> str:
        return f"{path}: snapshot seq {self.seq} does not decode ({self.reason}); folded past it"


async def snapshot_state(
    log: EventLog, at_or_before: int
) -> tuple[tuple[int, State] | None, list[SkippedSnapshot]]:
    """The newest snapshot covering no event after `at_or_before` that decodes, as its seq and
    state (None: fold from the first event), and the newer ones that did not. Snapshots are derived
    from the events, so a damaged one, or one written by a kbatchd whose state this one cannot
    read, costs only the time of folding from an older one."""
    skipped: list[SkippedSnapshot] = []
    bound = at_or_before
    while bound >= 1:
        found = await log.latest_snapshot(at_or_before=bound)
        if found is None:
            break
        seq, body = found
        try:
            return (seq, restored(decode_state(body))), skipped
        except DECODE_ERRORS as exc:
            skipped.append(SkippedSnapshot(seq, str(exc)))
            bound = seq - 1
    return None, skipped


class Replayed(msgspec.Struct):
    state: State
    snapshot: int | None
    folded: int
    last_seq: int
    # Newer snapshots than `snapshot` that did not decode (`snapshot_state`).
    skipped: list[SkippedSnapshot] = []


async def rebuild(
    log: EventLog,
    *,
    until: int | None = None,
    levels: tuple[str, ...] = DEFAULT_LEVELS,
    progress: Progress | None = None,
) -> Replayed:
    """State as of `until` (the whole log when None), from the newest usable snapshot, once
    the digest chain from it to `until` is whole (`EventLog.check_chain`: `BrokenChain`
    names where it breaks)."""
    last = log.last_seq if until is None else min(until, log.last_seq)
    found, skipped = await snapshot_state(log, last)
    await log.check_chain(after=found[0] if found is not None else 0, until=last)
    snapshot: int | None = None
    state = empty_state(levels)
    if found is not None:
        snapshot, state = found
        if state.topology.levels != levels:
            state.topology = rebuilt_topology(state, levels)
    folded = reported = 0
    with paused_gc():
        async for batch in log.read_batches(from_seq=state.seq + 1, until=last):
            for seq, event in batch:
                fold(state, seq, event)
            folded += len(batch)
            if progress is not None and folded - reported >= PROGRESS_EVERY:
                reported = folded
                progress(state.seq, last)
    if progress is not None:
        progress(last, last)
    return Replayed(state=state, snapshot=snapshot, folded=folded, last_seq=last, skipped=skipped)


def rebuilt_topology(state: State, levels: tuple[str, ...]) -> Topology:
    """The topology tree for other levels than the one a snapshot was folded with."""
    topology = Topology(levels=levels)
    for key, node in state.nodes.items():
        topology.set_node(key.split("/", 1)[0], key, node)
    for key, pod in state.pods.items():
        topology.charge_pod(key.split("/", 1)[0], key, None, pod)
    return topology


# ---------------------------------------------------------------------------------------------
# Summaries

SHOWN_RESOURCES = ("nvidia.com/gpu", "cpu", "memory", "pods")


def occupancy(topology: Topology, depth: int) -> dict[str, dict[str, dict[str, int]]]:
    """Capacity and usage of every domain down to `depth` levels (1 = widest level only)."""
    # Filtered before sorting: the hosts, left out, are most of the domains (10,000 of 10,704
    # in the benchmark's cluster), and sorting them by `natural_key` cost a replay 0.2 s.
    shown = [domain for domain in topology.capacity if domain.count(",") < depth]
    return {
        domain: {"capacity": dict(topology.capacity[domain]), "used": topology.used_of(domain)}
        for domain in sorted(shown, key=natural_key)
    }


def natural_key(text: str) -> list[int | str]:
    """Sort key putting ``b2`` before ``b10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def summary(
    replayed: Replayed, log_path: str, starts: Sequence[tuple[int, Event]] = ()
) -> dict[str, Any]:
    """What `kbatchd replay LOG` prints; `starts`: the log's `Started` events up to the point
    (`STARTED_REF`), which say which kbatchd wrote the state."""
    state = replayed.state
    depth = max(1, len(state.topology.levels) - 1)
    return {
        "log": log_path,
        "seq": state.seq,
        "snapshot": replayed.snapshot,
        "folded": replayed.folded,
        "now": iso_time(state.now),
        "counts": state.counts(),
        "inflight": len(state.inflight),
        "starts": [
            {"seq": seq, "at": iso_time(e.at), "version": e.version, "rules": e.rules}
            for seq, e in starts
            if isinstance(e, Started) and seq <= state.seq
        ],
        "levels": list(state.topology.levels),
        "occupancy": occupancy(state.topology, depth),
    }


def render_summary(data: dict[str, Any]) -> str:
    lines = [
        f"log {data['log']}: state at seq {data['seq']:,}"
        + (
            f" (snapshot {data['snapshot']:,} + {data['folded']:,} events folded)"
            if data["snapshot"]
            else f" ({data['folded']:,} events folded)"
        ),
        f"time {data['now']}",
        "objects  " + "  ".join(f"{kind} {n:,}" for kind, n in data["counts"].items() if n),
        f"decisions in flight  {data['inflight']}",
    ]
    starts = data["starts"]
    if starts:
        newest = starts[-1]
        lines.append(
            f"daemon starts  {len(starts)}, the newest at seq {newest['seq']:,} ({newest['at']}): "
            + started_text(newest["version"], newest["rules"])
        )
    occ: dict[str, dict[str, dict[str, int]]] = data["occupancy"]
    if occ:
        lines.append("topology  " + " → ".join(data["levels"]))
        widest = [d for d in occ if "," not in d]
        shown = occ if len(occ) <= 40 else {d: occ[d] for d in widest}
        for domain, amounts in shown.items():
            indent = "  " * (domain.count(",") + 1)
            lines.append(f"{indent}{domain:<24} {_usage(amounts)}")
        if len(shown) < len(occ):
            lines.append(f"  ({len(occ) - len(shown)} narrower domains: --json lists them)")
    return "\n".join(lines)


def _usage(amounts: dict[str, dict[str, int]]) -> str:
    parts = []
    for resource in SHOWN_RESOURCES:
        capacity = amounts["capacity"].get(resource)
        if capacity is None:
            continue
        used = amounts["used"].get(resource, 0)
        short = resource.rsplit("/", 1)[-1]
        parts.append(f"{short} {format_units(resource, used)}/{format_units(resource, capacity)}")
    return "  ".join(parts)


def plain(value: Any) -> Any:
    """A struct as plain data with field names (the log's array-like encoding has none)."""
    if isinstance(value, msgspec.Struct):
        data: dict[str, Any] = {}
        tag = value.__struct_config__.tag
        if isinstance(tag, str):
            data[value.__struct_config__.tag_field or "type"] = tag
        for name in value.__struct_fields__:
            data[name] = plain(getattr(value, name))
        return data
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def iso_time(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def started_text(version: str, rules: str) -> str:
    """How a daemon start reads in a history (`describe`, `--explain`)."""
    return f"kbatchd {version} started (decision rules {rules})"


def describe(event: Event) -> str:
    """One line about one event, for object histories."""
    if isinstance(event, Observed):
        obj = event.obj
        extra = ""
        phase = getattr(obj, "phase", None)
        if phase is not None:
            node = getattr(obj, "node_name", "")
            extra = f" phase={phase}" + (f" node={node}" if node else "")
        if obj.deletion_ts is not None:
            extra += " deleting"
        return f"observed {event.change} rv={obj.rv}{extra}"
    if isinstance(event, Decided):
        ops = ", ".join(f"{i.__struct_config__.tag} {i.ref}" for i in event.intents)
        return f"decided by {event.reconciler}: {event.reason}" + (f" → {ops}" if ops else "")
    if isinstance(event, Outcome):
        verdict = "ok" if event.ok else f"failed {event.code} {event.message}"
        return f"outcome of decision {event.decision} intent {event.index}: {verdict}"
    if isinstance(event, Resynced):
        return f"resynced {event.cluster}/{event.kind} at rv {event.resource_version}"
    if isinstance(event, Tick):
        return "tick"
    if isinstance(event, Started):
        return started_text(event.version, event.rules)
    raise TypeError(f"unknown event {event!r}")  # pragma: no cover
