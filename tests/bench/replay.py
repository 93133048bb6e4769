"""Replay tool benchmarks on a 1,000,000-event log: `--verify` over all of it against a plain
fold of the same log (the ratio is the target: checking decisions may cost a little more than
folding, not a multiple), `--verify` of the last events only (it starts from the newest
snapshot before them, so it must cost a fraction of the whole), and how long `--explain` and
`--timeline` take there.

The log is what the daemon would write for the synthetic cluster of `daemon.tools.synthetic`: the
events in batches, after each batch the Job reconciler's decisions about a few of the Jobs the
batch touched (their pods are orphans with kbatchd's finalizer: it decides to release them),
the decisions' outcomes, and snapshots when the daemon's rule has one due (`snapshot_due` at
the default `snapshot_every`, 50,000, and two events per object of the state).
"""

from __future__ import annotations

import tempfile
import time
from itertools import islice
from pathlib import Path
from typing import Final

from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.runner import decide
from daemon.runtime import eventloop
from daemon.tools.explain import explain
from daemon.tools.synthetic import stream
from daemon.tools.timeline import timeline
from daemon.tools.verify import verify
from events.fold import fold
from events.schema import Event, Outcome
from events.state import State, empty_state, encode_state, snapshot_due
from events.store import EventLog
from tests.bench.table import Table

EVENTS: Final = 1_000_000
BATCH: Final = 1_000
# Jobs decided about per batch: a few thousand decisions in the whole log.
DECIDED_PER_BATCH: Final = 3
# The daemon's `snapshot_every` default.
SNAPSHOT_EVERY: Final = 50_000
TAIL: Final = 10_000


async def build(path: Path, events: int = EVENTS) -> int:
    """Write the benchmark log; returns how many decisions it holds."""
    reconciler = JobReconciler()
    state = empty_state()
    source = stream(events, nodes=10_000)
    written = decisions = 0
    since_snapshot = 0
    async with EventLog.open(path) as log:
        while written < events:
            batch: list[Event] = list(islice(source, min(BATCH, events - written)))
            if not batch:
                break
            dirty: set[str] = set()
            for seq, event in zip(await log.append(batch), batch, strict=True):
                fold(state, seq, event, dirty)
            written += len(batch)
            since_snapshot += len(batch)
            jobs = sorted(key for key in dirty if key.startswith("Job/"))[:DECIDED_PER_BATCH]
            made = [d for d in (decide(state, reconciler, key)[0] for key in jobs) if d]
            room = events - written
            made = made[: max(room // 2, 0)]
            if made:
                seqs = await log.append(made)
                for seq, decided in zip(seqs, made, strict=True):
                    fold(state, seq, decided)
                outcomes: list[Event] = [
                    Outcome(at=d.at, decision=seq, index=0, ok=True)
                    for seq, d in zip(seqs, made, strict=True)
                    if d.intents
                ]
                del outcomes[max(events - written - len(made), 0) :]
                for seq, event in zip(await log.append(outcomes), outcomes, strict=True):
                    fold(state, seq, event)
                written += len(made) + len(outcomes)
                since_snapshot += len(made) + len(outcomes)
                decisions += len(made)
            if snapshot_due(state, since_snapshot, SNAPSHOT_EVERY):
                await log.save_snapshot(state.seq, encode_state(state))
                since_snapshot = 0
    return decisions


async def fold_all(log: EventLog) -> State:
    """Every event folded from empty, as `verify` from seq 1 must (no snapshot helps)."""
    state = empty_state()
    async for batch in log.read_batches():
        for seq, event in batch:
            fold(state, seq, event)
    return state


async def run(table: Table) -> None:
    print(f"replay tools: writing a {EVENTS:,}-event log with decisions", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "log.db"
        decisions = await build(path)
        reconcilers = [JobReconciler()]
        async with EventLog.open(path, readonly=True) as log:
            start = time.perf_counter()
            state = await fold_all(log)
            folding = time.perf_counter() - start
            start = time.perf_counter()
            result = await verify(log, reconcilers)
            checking = time.perf_counter() - start
            assert result.divergence is None, result.divergence
            start = time.perf_counter()
            tail = await verify(log, reconcilers, from_seq=log.last_seq - TAIL)
            tail_time = time.perf_counter() - start
            # The Job with the most pods now: the longest story to tell.
            job = max(sorted(state.children), key=lambda ref: len(state.children[ref]))
            _, _, namespace, name = job.split("/", 3)
            start = time.perf_counter()
            await explain(log, "Job", namespace, name)
            explaining = time.perf_counter() - start
            start = time.perf_counter()
            await timeline(log)
            drawing = time.perf_counter() - start
    table.add("replay tools: decisions in the 1M-event log", f"{decisions:,}")
    table.add("replay tools: fold all 1M events", f"{folding:.1f} s")
    table.add(
        "replay tools: --verify, all 1M events",
        f"{checking:.1f} s, {result.checked:,} decisions",
        "< 20 s",
        checking < 20,
    )
    ratio = checking / folding
    table.add("replay tools: --verify / fold", f"{ratio:.2f}", "≤ 1.50", ratio <= 1.5)
    table.add(
        f"replay tools: --verify, last {TAIL:,} events (from a snapshot)",
        f"{tail_time:.2f} s, {tail.checked:,} decisions",
        "< 15% of all",
        tail_time < checking * 0.15,
    )
    table.add("replay tools: --explain one Job", f"{explaining:.1f} s", "< 10 s", explaining < 10)
    table.add("replay tools: --timeline, 1M events", f"{drawing:.1f} s", "< 30 s", drawing < 30)


async def main() -> None:
    """`python -m tests.bench.replay`: this benchmark alone."""
    table = Table()
    await run(table)
    print(table.render())


if __name__ == "__main__":
    eventloop.run(main)
