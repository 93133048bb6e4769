"""Settings: decoded from TOML with msgspec into typed structs with documented defaults.

Unknown keys, wrong types and bad values are errors naming the key and the file, raised
before anything starts.
"""

from __future__ import annotations

import ipaddress
import os
import tomllib
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from daemon.controllers.gang.settings import GangSettings
from daemon.controllers.job.settings import JobSettings
from daemon.controllers.jobset.settings import JobSetSettings
from daemon.controllers.jobset.validation import MANAGED_BY
from daemon.controllers.multicluster.settings import MulticlusterSettings, workers_of
from daemon.controllers.settings import (
    MAX_COUNT,
    MAX_SECONDS,
    Count,
    Seconds,
    SecondsOrOff,
    WholeSeconds,
)
from daemon.placement.validation import level_problem
from events.topology import DEFAULT_LEVELS


class ConfigError(Exception):
    """A configuration that cannot be used; the message names the file and the key."""


class Cluster(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # The cluster's name in the log and in object refs.
    name: Annotated[str, msgspec.Meta(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
    # Kubeconfig file; empty means the default kubeconfig, then in-cluster configuration.
    kubeconfig: str = ""
    # Context in the kubeconfig; empty means its current context.
    context: str = ""

    def kubeconfig_path(self) -> str | None:
        """The kubeconfig with environment variables expanded (systemd credentials:
        ``$CREDENTIALS_DIRECTORY/kubeconfig``); None for the default lookup."""
        return os.path.expandvars(self.kubeconfig) if self.kubeconfig else None


class Topology(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # Node label keys, widest level first; `kubernetes.io/hostname` only as the last.
    levels: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_LEVELS))


class Reconcilers(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    job: JobSettings = msgspec.field(default_factory=JobSettings)
    jobset: JobSetSettings = msgspec.field(default_factory=JobSetSettings)
    gang: GangSettings = msgspec.field(default_factory=GangSettings)
    multicluster: MulticlusterSettings = msgspec.field(default_factory=MulticlusterSettings)


class Daemon(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # How often a Tick event moves the clock of the log (timeouts, back-off). At most 10 s: the
    # watchdog (3 ticks against the unit's WatchdogSec=30s) and /healthz's staleness (5 ticks)
    # are counted in ticks.
    tick_seconds: Annotated[float, msgspec.Meta(gt=0, le=10)] = 1.0
    # Save a snapshot of folded state every this many events (restart and replay start there),
    # or every `events.state.SNAPSHOT_EVENTS_PER_OBJECT` per object of the state when more.
    snapshot_every: Annotated[int, msgspec.Meta(ge=1000, le=MAX_COUNT)] = 50_000
    # Snapshots kept in the log, the newest; older ones are removed as a new one is saved
    # (each is a whole copy of the state). 0: keep every snapshot, so that a replay to any
    # point starts at most one snapshot interval before it (config/kbatchd.toml says why).
    keep_snapshots: Count = 0
    # Reconcile passes start at most this often (seconds): events arriving in between join the
    # next pass, so a busy daemon makes fewer, larger passes. 0: a pass for every batch.
    pass_interval_seconds: Annotated[float, msgspec.Meta(ge=0, le=1)] = 0.02
    # How many API calls the actuator makes at once.
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 64
    # Server-side watch timeout range in seconds (client-go picks 5 to 10 minutes).
    watch_timeout_seconds: tuple[WholeSeconds, WholeSeconds] = (300, 600)
    # No bytes on a watch for this long means a dead connection: twice the ~60 s between the
    # bookmarks kube-apiserver sends, since a loaded server sends them late.
    watch_inactivity_seconds: Seconds = 120.0
    # How long the daemon waits for every cluster's first list before it acts on the clusters
    # that have listed (0: act as soon as one has); a cluster that lists later joins then.
    cluster_sync_wait_seconds: SecondsOrOff = 60.0
    # How often each cluster's API discovery is read again: a CRD installed or an API turned on
    # is watched from the next read on, without a restart.
    discovery_seconds: Annotated[float, msgspec.Meta(ge=1, le=MAX_SECONDS)] = 30.0
    # How long SIGTERM waits for in-flight API calls before leaving them to the next start.
    drain_seconds: Annotated[float, msgspec.Meta(gt=0, le=9)] = 7.0
    # A key whose intents failed is decided again after a back-off that doubles from the first
    # value up to the second (seconds), so a decision that keeps failing is retried slowly.
    retry_backoff_seconds: tuple[Seconds, Seconds] = (1.0, 60.0)
    # A cluster asked what it serves (discovery) or whether it keeps Job spec.managedBy, that
    # does not answer or answers 429 or 5xx, is asked again after a back-off doubling from the
    # first value up to the second (seconds).
    api_retry_seconds: tuple[Seconds, Seconds] = (1.0, 30.0)
    # One API call that is throttled, fails with 5xx or is cut is tried again after a back-off
    # doubling from the first value up to the second (seconds); a 429's Retry-After wins.
    act_retry_seconds: tuple[Seconds, Seconds] = (0.1, 5.0)
    # Write Kubernetes Events about what kbatchd does (`kubectl describe` shows them), as the
    # upstream controllers do; best effort, never in the way of acting.
    kube_events: bool = True


class LeaderElection(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # Off: this daemon always acts. On: only the holder of the Lease acts; the others watch
    # and keep their own log (standby) until the holder stops renewing.
    enabled: bool = False
    # The cluster (a `clusters` name) holding the Lease; empty means the first cluster.
    cluster: str = ""
    namespace: Annotated[str, msgspec.Meta(min_length=1)] = "kube-system"
    name: Annotated[str, msgspec.Meta(min_length=1)] = "kbatchd"
    # This daemon's holderIdentity; empty means hostname_pid_random (unique per process).
    identity: str = ""
    # client-go's defaults (controller-runtime): 15 s lease, 10 s renew deadline, 2 s retry.
    lease_duration_seconds: WholeSeconds = 15
    renew_deadline_seconds: Seconds = 10.0
    retry_period_seconds: Annotated[float, msgspec.Meta(ge=0.1, le=MAX_SECONDS)] = 2.0


class Health(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # HOST:PORT serving /healthz, /readyz and /metrics (Prometheus text); empty disables.
    # Loopback by default: the endpoints are unauthenticated.
    address: str = "127.0.0.1:9464"


class Logging(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    level: Literal["debug", "info", "warning", "error"] = "info"
    # auto: console rendering on a terminal, JSON lines otherwise (journald).
    format: Literal["auto", "json", "console"] = "auto"
    # Empty: stdout (journald under systemd). A path: appended to, reopened on SIGHUP.
    file: str = ""


class Tracing(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # OTLP/HTTP base URL (spans go to ENDPOINT/v1/traces); empty exports nothing.
    # OTEL_EXPORTER_OTLP_ENDPOINT and OTEL_EXPORTER_OTLP_TRACES_ENDPOINT override it.
    endpoint: str = ""
    # The service.name resource attribute; OTEL_SERVICE_NAME overrides it.
    service_name: Annotated[str, msgspec.Meta(min_length=1)] = "kbatchd"
    # Share of event journeys traced; OTEL_TRACES_SAMPLER (and _ARG) override it.
    sample_ratio: Annotated[float, msgspec.Meta(ge=0, le=1)] = 1.0


class Settings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # The SQLite event log.
    log: str = "/var/lib/kbatchd/kbatchd.db"
    clusters: list[Cluster] = msgspec.field(default_factory=lambda: [Cluster(name="default")])
    topology: Topology = msgspec.field(default_factory=Topology)
    reconcilers: Reconcilers = msgspec.field(default_factory=Reconcilers)
    daemon: Daemon = msgspec.field(default_factory=Daemon)
    leader_election: LeaderElection = msgspec.field(default_factory=LeaderElection)
    health: Health = msgspec.field(default_factory=Health)
    logging: Logging = msgspec.field(default_factory=Logging)
    tracing: Tracing = msgspec.field(default_factory=Tracing)


def given_path(path: Path | None) -> Path | None:
    """The config file to read: `path`, else $KBATCHD_CONFIG; None when neither is given."""
    if path is None and os.environ.get("KBATCHD_CONFIG"):
        return Path(os.environ["KBATCHD_CONFIG"])
    return path


def load(path: Path | None) -> Settings:
    """Settings from `path` (or $KBATCHD_CONFIG), defaults when neither is given."""
    path = given_path(path)
    if path is None:
        return Settings()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:
        # tomllib parses nested arrays and tables recursively.
        raise ConfigError(f"{path}: not valid TOML: nested too deeply") from None
    try:
        settings = msgspec.convert(raw, Settings)
    except msgspec.ValidationError as exc:
        raise ConfigError(f"{path}: {exc}") from exc
    names = [c.name for c in settings.clusters]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: clusters: duplicate name in {names}")
    if not settings.clusters:
        raise ConfigError(f"{path}: clusters: at least one cluster is needed")
    low, high = settings.daemon.watch_timeout_seconds
    if not 0 < low <= high:
        raise ConfigError(f"{path}: daemon.watch_timeout_seconds: expected 0 < low <= high")
    for key in ("retry_backoff_seconds", "api_retry_seconds", "act_retry_seconds"):
        first, cap = getattr(settings.daemon, key)
        if first > cap:
            raise ConfigError(f"{path}: daemon.{key}: expected first <= last")
    for key, problem in _problems(settings):
        raise ConfigError(f"{path}: {key}: {problem}")
    return settings


def _multicluster_problems(settings: Settings) -> list[tuple[str, str]]:
    section = settings.reconcilers.multicluster
    if not section.enabled:
        return []
    key = "reconcilers.multicluster"
    names = [c.name for c in settings.clusters]
    if section.manager not in names:
        return [
            (
                f"{key}.manager",
                f"expected one of the [[clusters]] names {names}, got {section.manager!r}",
            )
        ]
    workers = workers_of(section, names)
    unknown = [w for w in workers if w not in names]
    if unknown:
        return [(f"{key}.workers", f"no cluster named {unknown[0]!r}")]
    if section.manager in workers:
        return [(f"{key}.workers", f"the manager {section.manager!r} cannot be a worker")]
    if len(set(workers)) != len(workers):
        return [(f"{key}.workers", f"duplicate name in {workers}")]
    if not workers:
        return [(f"{key}.workers", "at least one worker cluster is needed besides the manager")]
    return []


def _problems(settings: Settings) -> list[tuple[str, str]]:
    """What msgspec's per-field checks cannot see: relations between fields, and formats."""
    problems: list[tuple[str, str]] = []
    for index, cluster in enumerate(settings.clusters):
        if "$" in cluster.kubeconfig:
            expanded = os.path.expandvars(cluster.kubeconfig)
            if "$" in expanded:
                problems.append(
                    (f"clusters[{index}].kubeconfig", f"unset variable in {cluster.kubeconfig!r}")
                )
    level = level_problem(settings.topology.levels)
    if level is not None:
        problems.append((f"topology.{level.field}", level.message))
    for name, section in (
        ("job", settings.reconcilers.job),
        ("jobset", settings.reconcilers.jobset),
    ):
        if not MANAGED_BY.match(section.managed_by):
            expected = 'expected a domain-prefixed path such as "acme.io/foo"'
            problems.append(
                (f"reconcilers.{name}.managed_by", f"{expected}, got {section.managed_by!r}")
            )
    job = settings.reconcilers.job
    if job.backoff_base_seconds > job.backoff_max_seconds:
        problems.append(
            ("reconcilers.job.backoff_base_seconds", "must not exceed backoff_max_seconds")
        )
    gang = settings.reconcilers.gang
    if gang.backoff_base_seconds > gang.backoff_max_seconds:
        problems.append(
            ("reconcilers.gang.backoff_base_seconds", "must not exceed backoff_max_seconds")
        )
    if gang.ratio_level and gang.ratio_level not in settings.topology.levels:
        problems.append(
            ("reconcilers.gang.ratio_level", f"{gang.ratio_level!r} is not a topology level")
        )
    problems += _multicluster_problems(settings)
    election = settings.leader_election
    if election.cluster and election.cluster not in {c.name for c in settings.clusters}:
        problems.append(("leader_election.cluster", f"no cluster named {election.cluster!r}"))
    # client-go's rule: the holder must give up (renew deadline) before a candidate may take
    # over (lease duration), and must get several tries (retry period, with 1.2 jitter) first.
    if not election.lease_duration_seconds > election.renew_deadline_seconds:
        problems.append(
            ("leader_election.renew_deadline_seconds", "must be less than lease_duration_seconds")
        )
    if not election.renew_deadline_seconds > 1.2 * election.retry_period_seconds:
        problems.append(
            (
                "leader_election.retry_period_seconds",
                "must be less than renew_deadline_seconds / 1.2",
            )
        )
    if settings.health.address:
        try:
            parse_address(settings.health.address)
        except ValueError as exc:
            problems.append(("health.address", str(exc)))
    endpoint = settings.tracing.endpoint
    if endpoint and not endpoint.startswith(("http://", "https://")):
        problems.append(("tracing.endpoint", f"expected an http:// or https:// URL: {endpoint!r}"))
    return problems


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[V6]:PORT`` for IPv6) → host and port; HOST is an IP or localhost."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ValueError(f"expected HOST:PORT, got {text!r}")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host != "localhost":
        try:
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"expected an IP address or localhost, got {host!r}") from None
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"{port} is not a port number")
    return host, port


def is_loopback(host: str) -> bool:
    """Whether a `parse_address` host is reachable from this machine only."""
    return host == "localhost" or ipaddress.ip_address(host).is_loopback
