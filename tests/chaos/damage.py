"""Damage done to a stopped daemon's log, chosen from a seed: each kind is one a start must
refuse (exit 2, one line naming the file) without writing to it."""

from __future__ import annotations

import random
import sqlite3
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Final

from tests.events.builders import vandalize

PAGE: Final = 4096


def _newest_snapshot(path: Path) -> int:
    with closing(sqlite3.connect(path)) as db:
        row = db.execute("SELECT COALESCE(MAX(seq), 0) FROM snapshots").fetchone()
        return int(row[0])


def _event_after_snapshot(path: Path, rng: random.Random, *, last: bool = True) -> int:
    """A seq a start reads: past the newest snapshot, which a start folds from (the last
    event too, with `last`)."""
    with closing(sqlite3.connect(path)) as db:
        (newest,) = db.execute("SELECT MAX(seq) FROM events").fetchone()
    return rng.randint(_newest_snapshot(path) + 1, int(newest) - (0 if last else 1))


def truncated(path: Path, rng: random.Random) -> str:
    """Cut at a page boundary between a tenth and nine tenths of the file."""
    data = path.read_bytes()
    pages = len(data) // PAGE
    keep = rng.randint(max(1, pages // 10), max(1, pages * 9 // 10)) * PAGE
    path.write_bytes(data[:keep])
    return f"truncated to {keep} of {len(data)} bytes"


def body_garbled(path: Path, rng: random.Random) -> str:
    seq = _event_after_snapshot(path, rng)
    vandalize(path, "UPDATE events SET body = x'c1c1c1' WHERE seq = ?", seq)
    return f"event {seq}'s body garbled"


def time_changed(path: Path, rng: random.Random) -> str:
    """A change that still decodes: only the digest chain tells."""
    seq = _event_after_snapshot(path, rng)
    vandalize(path, "UPDATE events SET at = at + 1 WHERE seq = ?", seq)
    return f"event {seq}'s time changed"


def event_removed(path: Path, rng: random.Random) -> str:
    # Not the last: a log that merely ends earlier is a whole log.
    seq = _event_after_snapshot(path, rng, last=False)
    vandalize(path, "DELETE FROM events WHERE seq = ?", seq)
    return f"event {seq} removed"


KINDS: Final[tuple[Callable[[Path, random.Random], str], ...]] = (
    truncated,
    body_garbled,
    time_changed,
    event_removed,
)


def damage(path: Path, rng: random.Random) -> tuple[str, str]:
    """Damage the log at `path` one way, drawn from `rng`: the way's name, and what was done."""
    kind = rng.choice(KINDS)
    return kind.__name__.replace("_", "-"), kind(path, rng)
