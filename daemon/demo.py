"""`kbatchd demo` (what `make run` runs until the simulated cluster lands): write a synthetic
GPU-cluster log through the store with a snapshot halfway, then replay it the way a user
debugging the daemon would, and say what each step showed."""

from __future__ import annotations

from itertools import islice
from pathlib import Path

from daemon.synthetic import stream
from events.fold import fold
from events.replay import rebuild, render_summary, summary
from events.schema import Event, Observed
from events.state import empty_state, encode_state
from events.store import EventLog

BATCH = 5_000


def fresh_log_path(var: Path) -> Path:
    """``var/demo.db``, emptied: the demo writes its synthetic stream from seq 1."""
    var.mkdir(parents=True, exist_ok=True)
    path = var / "demo.db"
    for stale in (path, path.with_name("demo.db-wal"), path.with_name("demo.db-shm")):
        stale.unlink(missing_ok=True)
    return path


async def run_demo(path: Path, events: int) -> int:
    half = events // 2
    print(f"writing {events:,} synthetic events of a 2,048-GPU-node cluster to {path}")
    state = empty_state()
    some_pod: str | None = None
    async with EventLog.open(path) as log:
        source = stream(events, nodes=2_048)
        while batch := list(islice(source, BATCH)):
            seqs = await log.append(batch)
            for seq, event in zip(seqs, batch, strict=True):
                fold(state, seq, event)
                if seq == half:
                    await log.save_snapshot(seq, encode_state(state))
                    print(f"  snapshot of the folded state at seq {seq:,}")
            some_pod = some_pod or _first_pod(batch)
    print()
    async with EventLog.open(path, readonly=True) as log:
        midway = await rebuild(log, until=half - 1)
        print(f"$ kbatchd replay {path} --until {half - 1}")
        print(render_summary(summary(midway, str(path))))
        print()
        final = await rebuild(log)
        print(f"$ kbatchd replay {path}")
        print(render_summary(summary(final, str(path))))
        same = final.state == state
        print()
        print(
            "replay from the snapshot reproduces the live fold exactly"
            if same
            else "MISMATCH: replay differs from the live fold"
        )
    if some_pod:
        print(f"try: kbatchd replay {path} --show {some_pod}")
    return 0 if same else 1


def _first_pod(batch: list[Event]) -> str | None:
    for event in batch:
        if isinstance(event, Observed) and event.kind == "Pod":
            return f"Pod/{event.namespace}/{event.name}"
    return None
