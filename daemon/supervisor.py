"""The running daemon: ingest, log writer, fold, reconcilers, actuator and the clock, in one
anyio task group.

One task (the pump) appends every event, folds it and runs the reconcilers over the keys it
made dirty, so the state always equals the fold of the log up to its `seq` and every decision
is in the log before the actuator sees it.
"""

from __future__ import annotations

import heapq
import signal
from collections.abc import Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Final

import anyio
import msgspec
import structlog
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from daemon.config import Settings
from daemon.kube.actuator import Actuator
from daemon.kube.api import KubeApi
from daemon.kube.ingest import Informer, now_ms
from daemon.kube.resources import RESOURCES
from daemon.reconcilers.base import Reconciler
from daemon.reconcilers.runner import decide_all
from events.fold import fold
from events.replay import rebuild
from events.schema import Decided, Event, Outcome, Tick
from events.state import State, encode_state
from events.store import EventLog

log = structlog.get_logger("kbatchd")

CHANNEL: Final = 4096
BATCH: Final = 5000
FAILURE_BACKOFF_MS: Final = (1_000, 60_000)


class _Flush(msgspec.Struct):
    """Through the channel behind everything queued before it: set once all that is folded."""

    done: anyio.Event


Item = list[Event] | _Flush


class Daemon:
    """Construct inside a running event loop (it creates anyio primitives)."""

    def __init__(self, settings: Settings, reconcilers: Sequence[Reconciler]) -> None:
        self.settings = settings
        self.reconcilers = list(reconcilers)
        self.state = State()
        self.synced = anyio.Event()
        self.stopping = False
        self._tx: MemoryObjectSendStream[Item]
        self._rx: MemoryObjectReceiveStream[Item]
        self._tx, self._rx = anyio.create_memory_object_stream[Item](CHANNEL)
        self._actions: MemoryObjectSendStream[tuple[int, Decided]]
        self._action_rx: MemoryObjectReceiveStream[tuple[int, Decided]]
        self._actions, self._action_rx = anyio.create_memory_object_stream[tuple[int, Decided]](
            CHANNEL
        )
        self._requeue: list[tuple[int, str]] = []
        self._failures: dict[str, int] = {}
        self._since_snapshot = 0
        self._unsynced: set[str] = set()
        self._started_at = 0
        self._stopped = anyio.Event()
        self.actuator: Actuator | None = None

    async def send(self, events: list[Event]) -> None:
        await self._tx.send(events)

    async def run(self, *, handle_signals: bool = True) -> int:
        settings = self.settings
        async with AsyncExitStack() as stack:
            event_log = await stack.enter_async_context(EventLog.open(Path(settings.log)))
            replayed = await rebuild(event_log, levels=tuple(settings.topology.levels))
            self.state = replayed.state
            self._started_at = self.state.seq
            self._unsynced = {f"{c.name}/{kind}" for c in settings.clusters for kind in RESOURCES}
            log.info("log replayed", log=settings.log, seq=self.state.seq, folded=replayed.folded)
            apis = {
                c.name: await stack.enter_async_context(
                    KubeApi.connect(c.name, c.kubeconfig or None, c.context or None)
                )
                for c in settings.clusters
            }
            self.actuator = Actuator(apis, self.send, concurrency=settings.daemon.concurrency)
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, event_log)
                tg.start_soon(self._act, self.actuator)
                sources = anyio.CancelScope()
                tg.start_soon(self._sources, sources, apis)
                if handle_signals:
                    tg.start_soon(self._signals, sources)
                await self._stopped.wait()
                await self._drain(sources, tg)
        log.info("stopped", seq=self.state.seq)
        return 0

    # -- sources ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopped.set()

    async def _sources(self, scope: anyio.CancelScope, apis: dict[str, KubeApi]) -> None:
        daemon = self.settings.daemon
        with scope:
            async with anyio.create_task_group() as tg:
                for cluster, api in apis.items():
                    for kind, resource in RESOURCES.items():
                        prefix = f"{cluster}/"
                        known = {
                            key[len(prefix) :]: obj
                            for key, obj in self.state.table(kind).items()
                            if key.startswith(prefix)
                        }
                        informer = Informer(
                            api,
                            resource,
                            self.send,
                            known,  # type: ignore[arg-type]
                            watch_timeout=daemon.watch_timeout_seconds,
                            read_timeout=daemon.watch_inactivity_seconds,
                        )
                        tg.start_soon(informer.run)
                tg.start_soon(self._clock)

    async def _clock(self) -> None:
        period = self.settings.daemon.tick_seconds
        while True:
            await anyio.sleep(period)
            await self.send([Tick(at=now_ms())])

    async def _signals(self, sources: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("signal received, draining", signal=signal.Signals(signum).name)
                self.stop()
                return

    async def _drain(self, sources: anyio.CancelScope, tg: TaskGroup) -> None:
        """Stop watching, let the actuator finish what it started (bounded), fold every
        outcome, flush the log."""
        sources.cancel()
        self.stopping = True
        with anyio.move_on_after(self.settings.daemon.drain_seconds):
            if self.actuator is not None:
                await self.actuator.wait_idle()
        flushed = _Flush(anyio.Event())
        await self._tx.send(flushed)
        await flushed.done.wait()
        tg.cancel_scope.cancel()

    # -- the pump: append, fold, decide ------------------------------------------------------

    async def _pump(self, event_log: EventLog) -> None:
        synced_logged = False
        async for item in self._rx:
            batch = [] if isinstance(item, _Flush) else list(item)
            flushes = [item] if isinstance(item, _Flush) else []
            while len(batch) < BATCH:
                try:
                    more = self._rx.receive_nowait()
                except anyio.WouldBlock:
                    break
                if isinstance(more, _Flush):
                    flushes.append(more)
                else:
                    batch.extend(more)
            if batch:
                dirty = await self._append(event_log, batch)
                if not self.synced.is_set() and self._listed_everything():
                    self.synced.set()
                if not synced_logged and self.synced.is_set():
                    synced_logged = True
                    log.info("synced", seq=self.state.seq)
                    dirty |= self._startup_keys()
                    await self._append(event_log, self._unconfirmed())
                await self._reconcile(event_log, dirty)
                await self._maybe_snapshot(event_log, len(batch))
            for flush in flushes:
                flush.done.set()

    def _listed_everything(self) -> bool:
        """Whether this run's first list of every kind on every cluster is in the log."""
        synced = self.state.synced
        return all(synced.get(mark, 0) > self._started_at for mark in self._unsynced)

    async def _append(self, event_log: EventLog, events: list[Event]) -> set[str]:
        dirty: set[str] = set()
        if not events:
            return dirty
        seqs = await event_log.append(events)
        state = self.state
        for seq, event in zip(seqs, events, strict=True):
            fold(state, seq, event, dirty)
            if isinstance(event, Outcome):
                self._note_outcome(event)
        return dirty

    def _note_outcome(self, outcome: Outcome) -> None:
        """A failed intent puts its key on an exponential back-off, so a decision that keeps
        failing is retried at a bounded rate instead of in a loop."""
        flight = self.state.inflight.get(outcome.decision)
        key = flight.decision.key if flight else None
        if key is None:
            return
        if outcome.ok:
            self._failures.pop(key, None)
            return
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        low, high = FAILURE_BACKOFF_MS
        heapq.heappush(self._requeue, (self.state.now + min(high, low * 2 ** (failures - 1)), key))

    def _startup_keys(self) -> set[str]:
        """Once synced, everything a reconciler owns is decided afresh (timers are not in the
        log, and the world may have moved while we were down)."""
        kinds = {kind for r in self.reconcilers for kind in r.kinds}
        keys: set[str] = set()
        for kind in kinds:
            if kind in RESOURCES:
                keys.update(f"{kind}/{key}" for key in self.state.table(kind))
        return keys

    def _unconfirmed(self) -> list[Event]:
        """Intents of an earlier run with no outcome: they are not repeated blindly. They are
        marked unconfirmed, which lets their keys decide again from the relisted truth (a
        create that did happen shows up by its deterministic name)."""
        at = self.state.now
        return [
            Outcome(
                at=at,
                decision=seq,
                index=index,
                ok=False,
                message="unconfirmed when the daemon restarted; deciding again",
            )
            for seq, flight in sorted(self.state.inflight.items())
            for index in flight.pending
        ]

    async def _reconcile(self, event_log: EventLog, dirty: set[str]) -> None:
        if self.stopping or not self.synced.is_set():
            return
        now = self.state.now
        while self._requeue and self._requeue[0][0] <= now:
            dirty.add(heapq.heappop(self._requeue)[1])
        backing_off = {key for _, key in self._requeue if key in self._failures}
        keys = {key for key in dirty if key not in backing_off}
        verdicts = decide_all(self.state, self.reconcilers, keys)
        for verdict in verdicts:
            if verdict.decision.requeue_at is not None:
                heapq.heappush(self._requeue, (verdict.decision.requeue_at, verdict.key))
        decisions = [v.event for v in verdicts if v.event is not None]
        if not decisions:
            return
        seqs = await event_log.append(decisions)
        for seq, event in zip(seqs, decisions, strict=True):
            fold(self.state, seq, event)
            if event.intents:
                await self._actions.send((seq, event))

    async def _maybe_snapshot(self, event_log: EventLog, appended: int) -> None:
        self._since_snapshot += appended
        if self._since_snapshot >= self.settings.daemon.snapshot_every:
            self._since_snapshot = 0
            await event_log.save_snapshot(self.state.seq, encode_state(self.state))

    async def _act(self, actuator: Actuator) -> None:
        async with anyio.create_task_group() as tg:
            async for seq, decision in self._action_rx:
                tg.start_soon(actuator.execute, seq, decision)
