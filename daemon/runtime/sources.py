"""What feeds the log from the clusters: per cluster an informer for each kind its API server
serves (found by discovery, asked again every ``discovery_seconds``), the answer to whether it
keeps Job ``spec.managedBy``, and the clock's ticks (`Clock`)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

import aiohttp
import anyio
import structlog
from anyio.abc import TaskGroup

from daemon.controllers.base import Reconciler
from daemon.kube.actuator import RETRIABLE
from daemon.kube.api import KubeApi
from daemon.kube.capabilities import ProbeError, keeps_job_managed_by
from daemon.kube.discovery import listable, missing_message, served_resources
from daemon.kube.ingest import INGEST_ERRORS, UNANSWERED, Backoff, Informer, error_code
from daemon.kube.resources import CANDIDATES, Resource
from daemon.runtime.clock import Clock
from daemon.runtime.clusters import Clusters
from events.objects import SlimObject
from events.schema import Event
from events.state import State

if TYPE_CHECKING:  # handed in by the service that builds the daemon (`daemon.service.run`)
    from daemon.service.config import Daemon as DaemonSettings
    from daemon.service.metrics import Metrics

log = structlog.get_logger("kbatchd")


class Sources:
    """The daemon's sources, one task group of them per run."""

    def __init__(
        self,
        settings: DaemonSettings,
        *,
        job_manager: str,
        clusters: Clusters,
        reconcilers: Sequence[Reconciler],
        metrics: Metrics,
        send: Callable[[list[Event]], Awaitable[None]],
        state: Callable[[], State],
    ) -> None:
        self.settings = settings
        self.job_manager = job_manager
        self.clusters = clusters
        self.reconcilers = reconcilers
        self.metrics = metrics
        self.send = send
        # The state as it stands (what a new informer starts from).
        self.state = state
        # Per cluster: the resources its API server serves, as discovery last said: what the
        # actuator and the Kubernetes Events recorder address their calls by.
        self.served: dict[str, dict[str, Resource]] = {}
        self.clock = Clock(settings.tick_seconds, settings.pass_interval_seconds, send)

    async def _ask_managed_by(self, cluster: str, api: KubeApi) -> None:
        """Whether `cluster`'s API server keeps Job spec.managedBy (JobManagedBy on); where it
        drops it, the built-in controller runs every Job, so kbatchd must not run them as
        well. Asked until answered: an unreachable cluster is asked again with back-off."""
        manager = self.job_manager
        backoff = Backoff(*self.settings.api_retry_seconds)
        code: int | str
        while True:
            try:
                kept = await keeps_job_managed_by(api, manager)
            except ProbeError as exc:
                if exc.status not in RETRIABLE:
                    log.error(
                        "cannot tell whether Job spec.managedBy is kept; not managing Jobs there",
                        cluster=cluster,
                        error=str(exc),
                    )
                    kept = False
                    break
                error, code = str(exc), exc.status
            except (OSError, TimeoutError, aiohttp.ClientError) as exc:
                # No answer: the cluster's outage, one warning a round for all its callers.
                self.metrics.api_error(cluster, "probe", "connection")
                error = str(exc) or type(exc).__name__
                await anyio.sleep(self.clusters.reachability[cluster].failed("managedBy", error))
                continue
            else:
                if not kept:
                    log.error(
                        "the API server drops Job spec.managedBy (feature JobManagedBy is off): "
                        "its built-in Job controller runs every Job, so kbatchd will not "
                        "manage Jobs on this cluster",
                        cluster=cluster,
                    )
                break
            self.metrics.api_error(cluster, "probe", code)
            delay = backoff.next_delay()
            log.warning(
                "cannot ask whether Job spec.managedBy is kept; asking again",
                cluster=cluster,
                error=error,
                retry_in=round(delay, 2),
            )
            await anyio.sleep(delay)
        self.clusters.reachability[cluster].answered()
        self.clusters.jobs_managed[cluster] = kept
        await self.send([])  # the pump may let the cluster join now

    async def run(self, scope: anyio.CancelScope, apis: dict[str, KubeApi]) -> None:
        """Feed the log until `scope` is cancelled."""
        with scope:
            async with anyio.create_task_group() as tg:
                for cluster, api in apis.items():
                    tg.start_soon(self._cluster_sources, cluster, api)
                    tg.start_soon(self._ask_managed_by, cluster, api)
                tg.start_soon(self.clock.run)

    async def _cluster_sources(self, cluster: str, api: KubeApi) -> None:
        """An informer for each kind the cluster serves, at the newest version it serves,
        found by discovery and asked again every `discovery_seconds`. A kind not served when
        first asked lists as empty (so the cluster syncs, and whatever the log held of it is
        gone); the controllers of that kind idle there, with one warning naming what to
        install. A kind that appears later gets its informer then, without a restart."""
        informers: dict[str, tuple[Informer, anyio.CancelScope | None]] = {}
        backoff = Backoff(*self.settings.api_retry_seconds)
        last: dict[str, Resource] = {}
        async with anyio.create_task_group() as tg:
            while True:
                try:
                    served = await served_resources(api)
                except INGEST_ERRORS as exc:
                    code = error_code(exc)
                    self.metrics.api_error(cluster, "discovery", code)
                    error = str(exc) or type(exc).__name__
                    if code in UNANSWERED:
                        delay = self.clusters.reachability[cluster].failed("discovery", error)
                    else:
                        delay = backoff.next_delay()
                        log.warning(
                            "cannot read the cluster's API discovery; asking again",
                            cluster=cluster,
                            error=error,
                            retry_in=round(delay, 2),
                        )
                    await anyio.sleep(delay)
                    continue
                backoff.reset()
                self.clusters.reachability[cluster].answered()
                if served != last:
                    log.info(
                        "cluster API",
                        cluster=cluster,
                        kinds={kind: r.api_version for kind, r in sorted(served.items())},
                    )
                    last = served
                self.served[cluster] = served
                for kind in CANDIDATES:
                    await self._follow(tg, cluster, api, informers, kind, served.get(kind))
                await anyio.sleep(self.settings.discovery_seconds)

    async def _follow(
        self,
        tg: TaskGroup,
        cluster: str,
        api: KubeApi,
        informers: dict[str, tuple[Informer, anyio.CancelScope | None]],
        kind: str,
        resource: Resource | None,
    ) -> None:
        """Keep one kind's informer in step with what discovery says is served. A kind being
        watched is never given up on one discovery read: an API server that is starting
        serves some groups before others (custom resources last), and taking that for the
        kind's removal would delete every object of it from the state. Its informer goes on
        (a kind really removed answers its watch 404, logged with back-off); only a newer
        version replaces it."""
        current = informers.get(kind)
        watching = current is not None and current[1] is not None
        if resource is None and watching:
            return
        if current is not None and (current[0].resource if watching else None) == resource:
            return
        if current is not None and current[1] is not None:
            current[1].cancel()
        known: dict[str, SlimObject] = {}
        if current is not None:
            known = current[0].known
        else:
            prefix = f"{cluster}/"
            for key, obj in self.state().table(kind).items():
                if key.startswith(prefix):
                    known[key[len(prefix) :]] = obj  # type: ignore[assignment]
        if resource is None and known:
            # Discovery says the kind is gone but the log holds some of it: only its own list
            # can tell a kind removed from one an API server has not registered yet.
            resource = await listable(api, CANDIDATES[kind])
        daemon = self.settings
        informer = Informer(
            api,
            resource or CANDIDATES[kind][0],
            self.send,
            known,
            watch_timeout=daemon.watch_timeout_seconds,
            read_timeout=daemon.watch_inactivity_seconds,
            on_error=self._ingest_error,
            reachability=self.clusters.reachability[cluster],
        )
        if resource is None:
            idle = sorted(r.name for r in self.reconcilers if kind in r.kinds)
            log.warning(
                missing_message(kind, CANDIDATES[kind]),
                cluster=cluster,
                idle_controllers=idle,
            )
            informers[kind] = (informer, None)
            await informer.list_nothing()
            return
        if current is not None:
            log.info("now served", cluster=cluster, kind=kind, version=resource.api_version)
        scope = anyio.CancelScope()
        informers[kind] = (informer, scope)

        async def run() -> None:
            with scope:
                await informer.run()

        tg.start_soon(run)

    def _ingest_error(self, cluster: str, code: int | str) -> None:
        self.metrics.api_error(cluster, "ingest", code)
