"""The running daemon: ingest, log writer, fold, reconcilers, actuator and the clock, in one
anyio task group.

One task (the pump) appends every event, folds it and runs the reconcilers over the keys it
made dirty, so the state always equals the fold of the log up to its `seq` and every decision
is in the log before the actuator sees it.

With leader election on, a daemon acts only while it holds the Lease. A standby ingests,
appends and folds like the leader (its log stays complete) but decides nothing and calls no
API but lists, watches and the Lease. Each stretch of leadership is a *term*: when it begins,
intents of earlier terms with no outcome are marked unconfirmed and every owned key is
decided afresh; when it ends, in-flight API calls are cancelled at once and what they leave
without an outcome is marked unconfirmed (the next term decides again from the relisted
truth, never repeating blindly).

Acting begins once every cluster has listed, or after `cluster_sync_wait_seconds` with the
clusters that have: one unreachable cluster does not hold up the others. Until a cluster has
listed in this run its keys are not decided; when it does, it joins and they all are.

An append the storage refuses (a full disk, an I/O error) does not end the daemon: the pump
appends the same events again, with back-off, until they commit. Meanwhile it folds and
decides nothing, no decision is carried out, the daemon is not ready (`log_error`), and what
arrives waits: in the pump's channel, then in the watches (an API server that no longer has
the history a watch would resume from answers 410, and the informer lists again).
"""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import msgspec
import structlog
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream
from opentelemetry.context import Context

from daemon.controllers.base import Reconciler
from daemon.controllers.runner import decide_all
from daemon.kube.actuator import Actuator
from daemon.kube.api import KubeApi
from daemon.kube.ingest import (
    Backoff,
    now_ms,
)
from daemon.kube.notes import notes_for
from daemon.kube.recorder import Recorder
from daemon.kube.resources import CANDIDATES
from daemon.runtime.batches import Batches, windows
from daemon.runtime.clusters import Clusters
from daemon.runtime.leader import Elector, default_identity
from daemon.runtime.requeue import Requeues
from daemon.runtime.snapshots import Snapshots
from daemon.runtime.sources import Sources
from events.fold import fold
from events.replay import rebuild
from events.schema import Decided, Event, Observed, Outcome, Started
from events.state import State
from events.store import EventLog, LogStorageError

if TYPE_CHECKING:  # handed in by the service that builds the daemon (`daemon.service.run`)
    from daemon.service.config import Settings
    from daemon.service.metrics import Metrics
    from daemon.service.telemetry import BatchTrace, Tracing

log = structlog.get_logger("kbatchd")

# Items waiting for the pump. A watch item holds up to `EVENTS_PER_SEND` (16) events, so a
# slow pump leaves at most 65,536 watch events waiting before the informers wait too (and the
# API server holds the rest); an outcome or a tick is an item of one event. A channel of 256
# items (the same 4,096 watch events as one event an item) cost about 5 % more CPU in the
# gang benchmark: producers blocked, and woke, far more often.
CHANNEL: Final = 4096
BATCH: Final = 5000
# Seconds between attempts at an append the storage refused. The cap stays below the health
# endpoint's staleness (10 s): the pump waits on purpose and is still alive.
LOG_RETRY: Final = (0.5, 5.0)

Role = Literal["starting", "leader", "standby"]
# What the actuator gets: the term it was decided in, the decision's seq, the decision, and
# its trace context.
Action = tuple[int, int, Decided, Context | None]


class _Flush(msgspec.Struct):
    """Through the channel behind everything queued before it: set once all that is folded."""

    done: anyio.Event


Item = list[Event] | _Flush


class Daemon:
    """Construct inside a running event loop (it creates anyio primitives)."""

    def __init__(
        self,
        settings: Settings,
        reconcilers: Sequence[Reconciler],
        *,
        tracing: Tracing,
        metrics: Metrics,
        started: Callable[[int], Started],
        identity: str = "",
    ) -> None:
        self.settings = settings
        self.reconcilers = list(reconcilers)
        self.tracing = tracing
        self.metrics = metrics
        # The `Started` record appended at each start, at the given time (ms).
        self._started_record = started
        self.identity = identity or settings.leader_election.identity or default_identity()
        self.state = State()
        self.synced = anyio.Event()
        self.stopping = False
        self._tx: MemoryObjectSendStream[Item]
        self._rx: MemoryObjectReceiveStream[Item]
        self._tx, self._rx = anyio.create_memory_object_stream[Item](CHANNEL)
        self._actions: MemoryObjectSendStream[Action]
        self._action_rx: MemoryObjectReceiveStream[Action]
        # Unbounded: the pump must never wait on the actuator's workers, which wait on the pump
        # to take their outcomes (a bounded queue both ways could stall both).
        self._actions, self._action_rx = anyio.create_memory_object_stream[Action](math.inf)
        first, cap = (int(s * 1000) for s in settings.daemon.retry_backoff_seconds)
        self._requeues = Requeues(first, cap)
        self._batches = Batches(windows(self.reconcilers))
        # What the reconcilers that run a scheduling cycle keep between passes (`decide_all`).
        self._memos: dict[str, Any] = {}
        self._snapshots = Snapshots(settings.daemon.snapshot_every, settings.daemon.keep_snapshots)
        self.clusters = Clusters(
            (c.name for c in settings.clusters), settings.daemon.api_retry_seconds
        )
        self.metrics.seed(
            [r.name for r in self.reconcilers],
            self.clusters.names,
            sorted({kind for r in self.reconcilers for kind in r.kinds}),
        )
        self.sources = Sources(
            settings.daemon,
            job_manager=settings.reconcilers.job.managed_by,
            clusters=self.clusters,
            reconcilers=self.reconcilers,
            metrics=self.metrics,
            send=self.send,
            state=lambda: self.state,
        )
        # The oldest watch event (its `at`, ms) of the batch being passed: what the pass's
        # decisions' reconcile latency is measured from (0: the batch had none).
        self._woken_at = 0
        self._started_at = 0
        self._began = time.monotonic()
        # Queue key -> the last error of releasing from it that was logged.
        self._queue_errors: dict[str, str] = {}
        self._stopped = anyio.Event()
        self.actuator: Actuator | None = None
        self.recorder: Recorder | None = None
        # Leadership. `leading` flips the moment the elector says so; `_term` counts the
        # stretches of leadership; `_acting_term` is the term the pump has begun acting in
        # (0: none), so both ends of a term are handled in order with the events.
        self._elector: Elector | None = None
        self.leading = False
        self._term = 0
        self._acting_term = 0
        self._term_began = anyio.Event()
        self._term_scope: anyio.CancelScope | None = None
        # Liveness, on the monotonic clock: when the pump last turned and last appended.
        self.pumped_at = time.monotonic()
        self.appended_at = 0.0
        # Why the log takes no append ("" while it does), and an event set while it does:
        # decisions are carried out only then, so that their outcomes can be logged.
        self.log_error = ""
        self._log_writable = anyio.Event()
        self._log_writable.set()
        self.metrics.gauge("kbatchd.queue.depth", "Items waiting, by queue", self._depths)
        self.metrics.observed_counter(
            "kbatchd.kube_events",
            "Kubernetes Events written (created or aggregated) and dropped (refused, queue full)",
            self._kube_events,
            "{event}",
        )
        self.metrics.gauge(
            "kbatchd.leader",
            "1 while this daemon holds the Lease (or election is off)",
            lambda: [(1.0 if self.leading else 0.0, {})],
        )

    def _kube_events(self) -> list[tuple[float, dict[str, str]]]:
        recorder = self.recorder
        written, dropped = (recorder.written, recorder.dropped) if recorder else (0, 0)
        return [(written, {"outcome": "written"}), (dropped, {"outcome": "dropped"})]

    async def send(self, events: list[Event]) -> None:
        # Waiting (and its checkpoint) only when the channel is full: a send per outcome and
        # per watch event went through anyio's backend lookup every time.
        try:
            self._tx.send_nowait(events)
        except anyio.WouldBlock:
            await self._tx.send(events)

    def is_synced(self) -> bool:
        return self.synced.is_set()

    async def run(self, *, handle_signals: bool = True) -> int:
        settings = self.settings
        async with AsyncExitStack() as stack:
            event_log = await stack.enter_async_context(EventLog.open(Path(settings.log)))
            replayed = await rebuild(event_log, levels=tuple(settings.topology.levels))
            for skipped in replayed.skipped:
                log.warning("snapshot unusable", seq=skipped.seq, error=skipped.reason)
            self.state = replayed.state
            self._started_at = self.state.seq
            self._began = time.monotonic()
            # The events since the newest snapshot count towards the next one: a daemon
            # restarted before each run reached the interval would otherwise never save one,
            # and every start would fold a longer tail.
            self._snapshots.since = replayed.folded
            log.info("log replayed", log=settings.log, seq=self.state.seq, folded=replayed.folded)
            # Which kbatchd decides from here on, with which rules and settings (`--verify`).
            await self._append(event_log, [self._started_record(now_ms())])
            apis = {
                c.name: await stack.enter_async_context(
                    KubeApi.connect(c.name, c.kubeconfig_path(), c.context or None)
                )
                for c in settings.clusters
            }
            # Kubernetes Events are written beside acting, never in its way (`Recorder`).
            self.recorder = Recorder(
                apis, {}, write=settings.daemon.kube_events, instance=self.identity
            )
            self.actuator = Actuator(
                apis,
                self.send,
                concurrency=settings.daemon.concurrency,
                retry_backoff=settings.daemon.act_retry_seconds,
                tracer=self.tracing.tracer,
                on_error=lambda cluster, code: self.metrics.api_error(cluster, "actuator", code),
                on_done=self.metrics.act_duration.record,
                on_result=self.recorder.result,
            )
            self.actuator.resources = self.sources.served
            self.recorder.resources = self.sources.served
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._pump, event_log)
                tg.start_soon(self._act, self.actuator)
                tg.start_soon(self.recorder.run)
                sources = anyio.CancelScope()
                tg.start_soon(self.sources.run, sources, apis)
                if handle_signals:
                    tg.start_soon(self._signals, sources)
                if settings.leader_election.enabled:
                    tg.start_soon(self._elect, apis)
                else:
                    await self._leadership(True)
                await self._stopped.wait()
                await self._drain(sources, tg)
        log.info("stopped", seq=self.state.seq)
        return 0

    @property
    def refused_job_clusters(self) -> set[str]:
        """Clusters where kbatchd does not manage Jobs (their API server drops managedBy)."""
        return self.clusters.refusing_jobs

    def unsynced_clusters(self) -> list[str]:
        """Clusters whose keys are not decided yet: not listed in this run, or not answering."""
        return self.clusters.unsynced()

    # -- leadership ------------------------------------------------------------------------

    async def _elect(self, apis: Mapping[str, KubeApi]) -> None:
        election = self.settings.leader_election
        cluster = election.cluster or self.settings.clusters[0].name
        elector = Elector(
            apis[cluster],
            namespace=election.namespace,
            name=election.name,
            identity=self.identity,
            lease_duration=election.lease_duration_seconds,
            renew_deadline=election.renew_deadline_seconds,
            retry_period=election.retry_period_seconds,
            on_error=lambda name, code: self.metrics.api_error(name, "leader", code),
        )
        self._elector = elector
        await elector.run(self._leadership)

    @property
    def role(self) -> Role:
        """leader (or election off), standby (another holds the Lease, or it could not be
        reached), or starting (no attempt made yet)."""
        if self.leading:
            return "leader"
        if self._elector is None or not self._elector.attempts:
            return "starting"
        return "standby"

    async def _leadership(self, leading: bool) -> None:
        """The elector's verdict. Losing stops the acting before anything else happens: no
        new decision is handed out, and the calls in flight are cancelled."""
        self.leading = leading
        if leading:
            self._term += 1
            self._term_began.set()
        else:
            self._term_began = anyio.Event()
            if self._term_scope is not None:
                self._term_scope.cancel()
            if self.recorder is not None:
                self.recorder.forget()
        # Wake the pump: it marks the term's beginning or end in the log.
        await self._tx.send([])

    def _depths(self) -> Iterable[tuple[float, Mapping[str, str]]]:
        actuator = self.actuator
        return [
            (float(self._rx.statistics().current_buffer_used), {"queue": "ingest"}),
            (float(self._action_rx.statistics().current_buffer_used), {"queue": "actions"}),
            (float(actuator.in_flight if actuator else 0), {"queue": "in_flight"}),
        ]

    # -- sources ---------------------------------------------------------------------------

    def stop(self) -> None:
        self._stopped.set()

    async def _signals(self, sources: anyio.CancelScope) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async for signum in signals:
                log.info("signal received, draining", signal=signal.Signals(signum).name)
                self.stop()
                return

    async def _drain(self, sources: anyio.CancelScope, tg: TaskGroup) -> None:
        """Stop watching, let the actuator finish what it started and the recorder write the
        Events it holds (bounded), fold every outcome, flush the log."""
        sources.cancel()
        self.stopping = True
        with anyio.move_on_after(self.settings.daemon.drain_seconds):
            if self.actuator is not None:
                await self.actuator.wait_idle()
            if self.recorder is not None:
                await self.recorder.written_all()  # the Events of what was just done
        flushed = _Flush(anyio.Event())
        await self._tx.send(flushed)
        await flushed.done.wait()
        tg.cancel_scope.cancel()

    # -- the pump: append, fold, decide ------------------------------------------------------

    async def _pump(self, event_log: EventLog) -> None:
        synced_logged = False
        interval = self.settings.daemon.pass_interval_seconds
        last_pass = 0.0
        async for item in self._rx:
            if interval and not isinstance(item, _Flush):
                # Let a burst gather: each pass has a fixed cost (placement views, sorting
                # keys) that a pass per watch event would pay thousands of times a second.
                linger = last_pass + interval - time.monotonic()
                if linger > 0:
                    await anyio.sleep(linger)
            last_pass = time.monotonic()
            self.pumped_at = time.monotonic()
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
            trace = self.tracing.batch(time.time_ns()) if batch else None
            self._woken_at = 0
            dirty = await self._append(event_log, batch, trace)
            if not self.synced.is_set() and self._may_begin():
                self.synced.set()
            if not synced_logged and self.synced.is_set():
                synced_logged = True
                log.info("synced", seq=self.state.seq)
            dirty |= self._join_clusters()
            dirty |= await self._mark_terms(event_log)
            if batch or dirty:
                await self._reconcile(event_log, dirty, trace)
                await self._snapshots.appended(event_log, self.state, len(batch))
            # Only while acting: a timer falls due only in a pass that decides.
            self.sources.clock.arm(self._requeues.next_at() if self.acting else None)
            for flush in flushes:
                flush.done.set()

    async def _mark_terms(self, event_log: EventLog) -> set[str]:
        """The beginning or end of a term, in the log's order. Returns the keys to decide."""
        if self.leading and self.synced.is_set() and self._acting_term != self._term:
            self._acting_term = self._term
            reason = "unconfirmed when this daemon began acting; deciding again"
            if self._term > 1:
                log.info("acting", term=self._term, seq=self.state.seq)
            await self._append(event_log, self._unconfirmed(reason))
            # Everything a reconciler owns is decided afresh: timers are not in the log, and
            # the world may have moved while we were down or standing by.
            return self._startup_keys()
        if not self.leading and self._acting_term:
            self._acting_term = 0
            self._requeues.clear()
            self._batches.clear()
            reason = "unconfirmed: the lease was lost while it was carried out"
            await self._append(event_log, self._unconfirmed(reason))
        return set()

    @property
    def acting(self) -> bool:
        return self.leading and not self.stopping and self._acting_term == self._term > 0

    def _may_begin(self) -> bool:
        """Every cluster synced; or some, once `cluster_sync_wait_seconds` have passed."""
        waited = time.monotonic() - self._began
        wait = self.settings.daemon.cluster_sync_wait_seconds
        return self.clusters.may_begin(self.state, self._started_at, waited, wait)

    def _join_clusters(self) -> set[str]:
        """Clusters synced since the last turn join the acting. Returns the keys to decide:
        none for the first (the term's beginning decides every key), every key of a
        cluster joining later (its objects were not decided while it could not be read)."""
        if not self.synced.is_set():
            return set()
        joining, first = self.clusters.join(self.state, self._started_at)
        if not joining:
            return set()
        if first:
            missing = self.unsynced_clusters()
            if missing:
                log.warning(
                    "acting without the clusters not synced yet; each joins when it syncs",
                    clusters=missing,
                    waited_seconds=round(time.monotonic() - self._began, 1),
                )
            return set()
        for cluster in sorted(joining):
            log.info("cluster synced", cluster=cluster, seq=self.state.seq)
        return {key for key in self._startup_keys() if key.split("/", 2)[1] in joining}

    async def _append(
        self, event_log: EventLog, events: list[Event], trace: BatchTrace | None = None
    ) -> set[str]:
        """Log and fold `events`. Returns the keys to decide now; owners marked only by their
        objects' changes and still inside their batch window are put off (`Batches`)."""
        dirty: set[str] = set()
        if not events:
            return dirty
        owners: set[str] = set()
        began = time.time_ns() if trace is not None else 0
        seqs = await self._logged(event_log, events)
        state = self.state
        if trace is None:
            for seq, event in zip(seqs, events, strict=True):
                fold(state, seq, event, dirty, owners)
                if isinstance(event, Outcome):
                    self._note_outcome(event)
        else:
            appended = (began, time.time_ns())
            for seq, event in zip(seqs, events, strict=True):
                # Each event's own dirty keys tell which journey a decision belongs to.
                mine: set[str] = set()
                theirs: set[str] = set()
                fold_began = time.time_ns()
                fold(state, seq, event, mine, theirs)
                folded = (fold_began, time.time_ns())
                trace.event(seq, event, appended, folded, mine | theirs)
                dirty |= mine
                owners |= theirs
                if isinstance(event, Outcome):
                    self._note_outcome(event)
        self._measure(events)
        owners -= dirty
        held = self._batches.held(owners, state.now)
        for key, at in held.items():
            self._requeues.schedule(at, key)
            owners.discard(key)
        self.metrics.count_keys(self.metrics.keys_held, held)
        return dirty | owners

    async def _logged(self, event_log: EventLog, events: Sequence[Event]) -> list[int]:
        """Append `events` and return their seqs once committed. An append the storage
        refuses is made again, with back-off, until it commits (see the module's doc); only
        a stop gives up, with the error."""
        backoff: Backoff | None = None
        while True:
            try:
                seqs = await event_log.append(events)
            except LogStorageError as exc:
                if self.stopping:
                    raise
                if backoff is None:
                    backoff = Backoff(*LOG_RETRY)
                    self._log_writable = anyio.Event()
                self.log_error = str(exc)
                delay = backoff.next_delay()
                log.error(
                    "cannot append to the log; not acting until it takes the events",
                    error=self.log_error,
                    retry_in=round(delay, 2),
                )
                self.pumped_at = time.monotonic()
                await anyio.sleep(delay)
                self.pumped_at = time.monotonic()
                continue
            self.appended_at = time.monotonic()
            if backoff is not None:
                self.log_error = ""
                self._log_writable.set()
                log.info("log writable again; acting", seq=seqs[-1])
            return seqs

    def _measure(self, events: list[Event]) -> None:
        counts: dict[str, int] = {}
        oldest = 0
        for event in events:
            name = type(event).__name__
            counts[name] = counts.get(name, 0) + 1
            if isinstance(event, Observed) and (not oldest or event.at < oldest):
                oldest = event.at
        for name, count in counts.items():
            self.metrics.events_appended.add(count, {"type": name})
        if oldest:
            self.metrics.fold_lag.record(max(0.0, (now_ms() - oldest) / 1000))
            self._woken_at = min(self._woken_at or oldest, oldest)

    def _note_outcome(self, outcome: Outcome) -> None:
        """A failed intent puts its key on an exponential back-off, so a decision that keeps
        failing is retried at a bounded rate instead of in a loop. An unconfirmed one is no
        failure: a burst cut by a crash would otherwise hold its key back for the whole
        back-off (one doubling per cut call, 60 s at the cap)."""
        flight = self.state.inflight.get(outcome.decision)
        key = flight.decision.key if flight else None
        if key is None or outcome.unconfirmed:
            return
        if outcome.ok:
            self._requeues.succeeded(key)
        else:
            self._requeues.failed(key, self.state.now)

    def _startup_keys(self) -> set[str]:
        kinds = {kind for r in self.reconcilers for kind in r.kinds}
        keys: set[str] = set()
        for kind in kinds:
            if kind in CANDIDATES:
                keys.update(f"{kind}/{key}" for key in self.state.table(kind))
        return keys

    def _unconfirmed(self, message: str) -> list[Event]:
        """Intents with no outcome: they are not repeated blindly. They are marked
        unconfirmed, which lets their keys decide again from the relisted truth (a create
        that did happen shows up by its deterministic name)."""
        at = self.state.now
        return [
            Outcome(at=at, decision=seq, index=index, ok=False, message=message, unconfirmed=True)
            for seq, flight in sorted(self.state.inflight.items())
            for index in flight.pending
        ]

    async def _reconcile(
        self, event_log: EventLog, dirty: set[str], trace: BatchTrace | None = None
    ) -> None:
        if not self.acting:
            return
        term = self._term
        now = self.state.now
        dirty.update(self._requeues.due(now))
        ready = self._requeues.ready(dirty, now)
        # Of the keys a queue releases in the pass, those still backing off wait too.
        waiting = self._requeues.backing_off(now)
        if self.clusters.everything_decidable:
            keys = ready
        else:
            keys = {key for key in ready if self.clusters.decidable(key)}
        self._batches.decided(keys, now)
        self.metrics.count_keys(self.metrics.keys_decided, keys)
        began, started = time.time_ns(), time.perf_counter()
        verdicts = decide_all(self.state, self.reconcilers, keys, self._memos, waiting)
        self.metrics.reconcile_duration.record(time.perf_counter() - started)
        decided = time.time_ns()
        for verdict in verdicts:
            if verdict.decision.requeue_at is not None:
                self._requeues.schedule(verdict.decision.requeue_at, verdict.key)
            if verdict.error is None:
                continue
            if verdict.event is not None:
                # Once per new failure (an unchanged one is not logged again as a decision).
                log.error(
                    "reconciler failed",
                    reconciler=verdict.event.reconciler,
                    key=verdict.key,
                    reason=verdict.decision.reason,
                    traceback=verdict.error,
                )
            elif verdict.queue and self._queue_errors.get(verdict.key) != verdict.decision.reason:
                # Releasing from a queue failed (no decision to log): once per new failure.
                self._queue_errors[verdict.key] = verdict.decision.reason
                log.error(
                    "reconciler failed releasing from a queue",
                    key=verdict.key,
                    reason=verdict.decision.reason,
                    traceback=verdict.error,
                )
        decisions = [v.event for v in verdicts if v.event is not None]
        if not decisions:
            return
        seqs = await self._logged(event_log, decisions)
        self.metrics.decided(decisions, self.state, woken_at=self._woken_at, logged_at=now_ms())
        for seq, event in zip(seqs, decisions, strict=True):
            fold(self.state, seq, event)
            context = None
            if trace is not None:
                obj = self.state.get(event.key)
                uid, created = (obj.uid, obj.created) if obj is not None else ("", 0)
                context = trace.decided(seq, event, began, decided, uid, created)
            # A term that ended meanwhile hands out nothing: its intents are marked
            # unconfirmed when the pump sees the end of the term.
            if event.intents and self.leading and term == self._term:
                if self.recorder is not None:
                    # Read against the state the decision was made from (see `notes_for`).
                    self.recorder.expect(seq, notes_for(self.state, event))
                self._actions.send_nowait((term, seq, event, context))  # unbounded
                self.pumped_at = time.monotonic()

    async def _carry_out(self, actuator: Actuator, term: int) -> None:
        actions = self._action_rx
        while True:
            # A decision already queued is taken without the checkpoint that `receive` (and
            # so `async for`) makes first: a trip round the loop and a lookup of anyio's
            # backend for every decision, about 1 % of the daemon's CPU in the gang benchmark.
            try:
                action_term, seq, decision, context = actions.receive_nowait()
            except anyio.WouldBlock:
                try:
                    action_term, seq, decision, context = await actions.receive()
                except anyio.EndOfStream:
                    return
            except anyio.EndOfStream:
                return
            if action_term == term:
                if not self._log_writable.is_set():
                    await self._log_writable.wait()
                await actuator.execute(seq, decision, context)

    async def _act(self, actuator: Actuator) -> None:
        """Carry out decisions, one term at a time: the end of a term cancels what it
        started, and decisions of a term that has ended are dropped."""
        while True:
            await self._term_began.wait()
            term = self._term
            with anyio.CancelScope() as scope:
                self._term_scope = scope
                if not self.leading or term != self._term:
                    continue
                async with anyio.create_task_group() as tg:
                    # A pool of workers rather than a task per decision: starting a task
                    # costs about as much as the binding it would carry out. As many
                    # workers as API calls may run at once, so none waits on the pool.
                    for _ in range(self.settings.daemon.concurrency):
                        tg.start_soon(self._carry_out, actuator, term)
            if scope.cancelled_caught:
                log.info("stopped acting", term=term, in_flight=actuator.in_flight)
