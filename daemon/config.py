"""Settings: decoded from TOML with msgspec into typed structs with documented defaults.

Unknown keys, wrong types and bad values are errors naming the key and the file, raised
before anything starts.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Annotated

import msgspec

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


class Topology(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # Node label keys, widest level first; `kubernetes.io/hostname` only as the last.
    levels: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_LEVELS))


class JobSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # Jobs whose spec.managedBy equals this are kbatchd's; every other Job is left alone.
    managed_by: str = "kbatchd.dev/job-controller"
    # Treat a pod terminating this long on a NotReady node as failed (0 = never, upstream).
    stuck_terminating_after_seconds: Annotated[float, msgspec.Meta(ge=0)] = 0


class Reconcilers(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    job: JobSettings = msgspec.field(default_factory=JobSettings)


class Daemon(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # How often a Tick event moves the clock of the log (timeouts, back-off).
    tick_seconds: Annotated[float, msgspec.Meta(gt=0)] = 1.0
    # Save a snapshot of folded state every this many events (restart and replay start there).
    snapshot_every: Annotated[int, msgspec.Meta(ge=1000)] = 50_000
    # How many API calls the actuator makes at once.
    concurrency: Annotated[int, msgspec.Meta(ge=1, le=1024)] = 32
    # Server-side watch timeout range in seconds (client-go picks 5 to 10 minutes).
    watch_timeout_seconds: tuple[int, int] = (300, 600)
    # No bytes on a watch for this long means a dead connection (bookmarks come every 60 s).
    watch_inactivity_seconds: Annotated[float, msgspec.Meta(gt=0)] = 70.0
    # How long SIGTERM waits for in-flight API calls before leaving them to the next start.
    drain_seconds: Annotated[float, msgspec.Meta(gt=0, le=9)] = 7.0


class Logging(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    level: str = "info"


class Settings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # The SQLite event log.
    log: str = "/var/lib/kbatchd/kbatchd.db"
    clusters: list[Cluster] = msgspec.field(default_factory=lambda: [Cluster(name="default")])
    topology: Topology = msgspec.field(default_factory=Topology)
    reconcilers: Reconcilers = msgspec.field(default_factory=Reconcilers)
    daemon: Daemon = msgspec.field(default_factory=Daemon)
    logging: Logging = msgspec.field(default_factory=Logging)


def load(path: Path | None) -> Settings:
    """Settings from `path` (or $KBATCHD_CONFIG), defaults when neither is given."""
    if path is None and os.environ.get("KBATCHD_CONFIG"):
        path = Path(os.environ["KBATCHD_CONFIG"])
    if path is None:
        return Settings()
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
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
    return settings
