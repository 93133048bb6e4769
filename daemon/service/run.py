"""`kbatchd run`: the daemon as a service — what systemd (or a terminal) starts.

Around the supervisor it adds what a process needs and an embedded daemon (the demo, tests)
does not: the health and metrics endpoint, the systemd notifications (READY=1 once the
watches have listed, WATCHDOG=1 while the main loop turns, STOPPING=1 on SIGTERM), signals
(SIGTERM/SIGINT drain and stop, SIGHUP reopens the log file), and the trace exporter.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping, Sequence
from functools import partial

import anyio
import structlog

from daemon.controllers.base import Reconciler
from daemon.runtime import eventloop
from daemon.runtime.leader import default_identity
from daemon.runtime.supervisor import Daemon
from daemon.service import logs, provenance, wiring
from daemon.service.config import ConfigError, Settings, is_loopback, parse_address
from daemon.service.health import HealthServer
from daemon.service.metrics import Metrics
from daemon.service.notify import READY, STOPPING, WATCHDOG, Notifier
from daemon.service.telemetry import Tracing, resource, tracer_provider

log = structlog.get_logger("kbatchd")


class ServiceError(ConfigError):
    """The service cannot start as configured (its health address is taken, say)."""


def build(
    settings: Settings,
    rules: Sequence[Reconciler] | None = None,
    *,
    tracing: Tracing | None = None,
    metrics: Metrics | None = None,
    identity: str = "",
) -> Daemon:
    """The daemon for `settings`: its reconcilers (`rules`, else those the settings turn on),
    its traces and metrics (off and private unless given), and the provenance record it logs
    at each start. Construct inside a running event loop."""
    wiring.wire()
    return Daemon(
        settings,
        wiring.reconcilers(settings) if rules is None else rules,
        tracing=tracing or Tracing(),
        metrics=metrics or Metrics(),
        started=partial(provenance.started, settings),
        identity=identity,
    )


async def serve(settings: Settings, env: Mapping[str, str] | None = None) -> int:
    env = os.environ if env is None else env
    notifier = Notifier.from_environment(env)
    identity = settings.leader_election.identity or default_identity()
    tracing = Tracing(tracer_provider(settings.tracing, identity, env))
    metrics = Metrics(resource(settings.tracing, identity, env))
    daemon = build(
        settings,
        tracing=tracing,
        metrics=metrics,
        identity=identity,
    )
    # Stale: the pump turns at least once a tick (the clock's events); allow for slow batches.
    stale_after = max(10.0, 5 * settings.daemon.tick_seconds)
    health = HealthServer(daemon, metrics, stale_after=stale_after)
    try:
        if settings.health.address:
            host, port = parse_address(settings.health.address)
            try:
                await health.start(host, port)
            except OSError as exc:
                raise ServiceError(
                    f"health.address {settings.health.address}: {exc.strerror or exc}"
                ) from exc
            if not is_loopback(host):
                log.warning(
                    "the health and metrics endpoints are served beyond loopback, to anyone "
                    "who can reach them (they are unauthenticated)",
                    address=settings.health.address,
                )
        notifier.status("replaying the log and listing the clusters")
        log.info(
            "starting", identity=identity, tracing=tracing.enabled, event_loop=eventloop.name()
        )
        code = 1
        async with anyio.create_task_group() as tg:
            tg.start_soon(_signals, daemon, notifier)
            tg.start_soon(_announce, daemon, notifier)
            try:
                code = await daemon.run(handle_signals=False)
            finally:
                tg.cancel_scope.cancel()
        return code
    finally:
        with anyio.CancelScope(shield=True):
            await health.stop()
            # Flushing spans may block on the network (bounded by the exporter's timeout).
            await anyio.to_thread.run_sync(tracing.shutdown)
            metrics.shutdown()


async def _signals(daemon: Daemon, notifier: Notifier) -> None:
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP:
                logs.reopen()
                log.info("log file reopened", signal=name)
                continue
            if not daemon.stopping:
                notifier.send(STOPPING, "STATUS=draining in-flight API calls")
                log.info("signal received, draining", signal=name)
                daemon.stop()


async def _announce(daemon: Daemon, notifier: Notifier) -> None:
    """READY=1 once every watch has listed (or, past `cluster_sync_wait_seconds`, those of
    the clusters that answer), then watchdog pings and status changes.

    The ping comes from this task, on the event loop, and only while the pump keeps
    turning (it does every tick at least): a wedged loop or a stuck pump stops the pings,
    and systemd restarts the service after WatchdogSec."""
    await daemon.synced.wait()
    status = systemd_status(daemon)
    notifier.send(READY, f"STATUS={status}")
    log.info("ready", role=daemon.role)
    watchdog = notifier.watchdog_seconds
    period = watchdog / 2 if watchdog else 1.0
    stalled_after = max(watchdog or 0.0, 3 * daemon.settings.daemon.tick_seconds)
    warned = False
    while True:
        await anyio.sleep(period)
        lines: list[str] = []
        if watchdog:
            if time.monotonic() - daemon.pumped_at < stalled_after:
                lines.append(WATCHDOG)
                warned = False
            elif not warned:
                warned = True
                log.error("the pump is stuck; withholding the watchdog ping")
        now = systemd_status(daemon)
        if now != status:
            status = now
            lines.append(f"STATUS={status}")
        if lines:
            notifier.send(*lines)


def systemd_status(daemon: Daemon) -> str:
    """The daemon's STATUS= line for systemd: its role, and any cluster it has not synced; or
    that it cannot write its log."""
    if daemon.log_error:
        return f"not acting: cannot append to the log ({daemon.log_error}); trying again"
    role = {"leader": "acting", "standby": "standby (another holds the lease)"}.get(
        daemon.role, daemon.role
    )
    unsynced = daemon.unsynced_clusters()
    if unsynced:
        return f"synced but for {', '.join(unsynced)}, {role}"
    return f"synced, {role}"
