"""Health and metrics over HTTP (aiohttp, already a dependency of the Kubernetes client).

- ``/healthz``: the process is alive — its main loop (the pump) has turned recently.
- ``/readyz``: the watches have listed everything, the log took an append recently (and the
  last one tried: ``log_error`` says why not), and the daemon knows its role (leader, or
  standby behind another holder of the Lease).
- ``/metrics``: the OpenTelemetry metrics in the Prometheus text format.

Both probes answer 200 or 503 with a small JSON body saying which check failed.
"""

from __future__ import annotations

import time
from typing import Any, Protocol

import structlog
from aiohttp import web

from daemon.service import prometheus
from daemon.service.metrics import Metrics

log = structlog.get_logger("kbatchd.health")


class Observed(Protocol):
    """What the probes read from the daemon."""

    @property
    def role(self) -> str: ...

    @property
    def pumped_at(self) -> float: ...

    @property
    def appended_at(self) -> float: ...

    @property
    def log_error(self) -> str: ...

    def is_synced(self) -> bool: ...

    def unsynced_clusters(self) -> list[str]: ...


class HealthServer:
    def __init__(self, daemon: Observed, metrics: Metrics, *, stale_after: float) -> None:
        self.daemon = daemon
        self.metrics = metrics
        # The pump turns and appends at least once a tick (the clock): much longer without
        # either means it is stuck.
        self.stale_after = stale_after
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, host: str, port: int) -> str:
        """Serve on HOST:PORT (port 0 picks a free one); returns the base URL."""
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        # No access log: a scraper every few seconds would drown the daemon's own lines.
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, host, port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound_host, bound_port = runner.addresses[0][:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        self.url = f"http://{shown}:{bound_port}"
        log.info("health serving", url=self.url)
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def alive(self) -> bool:
        return time.monotonic() - self.daemon.pumped_at < self.stale_after

    def readiness(self) -> dict[str, Any]:
        daemon = self.daemon
        checks: dict[str, Any] = {
            "synced": daemon.is_synced(),
            # Clusters not listed yet in this run: their objects are not decided meanwhile.
            "unsynced_clusters": daemon.unsynced_clusters(),
            "log_writable": bool(daemon.appended_at)
            and not daemon.log_error
            and time.monotonic() - daemon.appended_at < self.stale_after,
            # Why the last append failed (a full disk, say); null while the log takes them.
            "log_error": daemon.log_error or None,
            "role": daemon.role,
        }
        checks["ready"] = bool(
            checks["synced"] and checks["log_writable"] and daemon.role in ("leader", "standby")
        )
        return checks

    async def _healthz(self, _: web.Request) -> web.Response:
        alive = self.alive()
        body = {"alive": alive, "pumped_seconds_ago": time.monotonic() - self.daemon.pumped_at}
        return web.json_response(body, status=200 if alive else 503)

    async def _readyz(self, _: web.Request) -> web.Response:
        checks = self.readiness()
        return web.json_response(checks, status=200 if checks["ready"] else 503)

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=self.metrics.render().encode(),
            headers={"Content-Type": prometheus.CONTENT_TYPE},
        )
