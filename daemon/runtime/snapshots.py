"""Saving the folded state: when a snapshot is due (`events.state.snapshot_due`, from the
``[daemon] snapshot_every`` setting) and which are kept (``keep_snapshots``). A start and a
replay fold from the newest snapshot at or before where they begin."""

from __future__ import annotations

import structlog

from events.state import State, encode_state, snapshot_due
from events.store import EventLog, LogStorageError

log = structlog.get_logger("kbatchd")


class Snapshots:
    """The snapshot policy of one writer of the log."""

    def __init__(self, every: int, keep: int) -> None:
        self.every = every
        self.keep = keep
        # Events appended since the newest snapshot.
        self.since = 0

    async def appended(self, event_log: EventLog, state: State, count: int) -> None:
        """`count` more events are in the log (and folded into `state`): save a snapshot of it
        if one is due."""
        self.since += count
        if not snapshot_due(state, self.since, self.every):
            return
        self.since = 0
        seq, body = state.seq, encode_state(state)
        try:
            removed = await event_log.save_snapshot(seq, body, keep=self.keep)
        except LogStorageError as exc:
            # A snapshot only saves folding: the next one is due `snapshot_every` on.
            log.warning("snapshot not saved", seq=seq, error=str(exc))
            return
        log.info("snapshot saved", seq=seq, bytes=len(body), removed=removed)
