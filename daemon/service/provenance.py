"""Where a log's decisions come from: the kbatchd that made them, the digest of its decision
rules, and the settings they ran with. The daemon records these in a `Started` event each time
it opens its log, so that `kbatchd replay --verify` re-decides a log with the settings its
daemon had (not whatever config the reader passes) and can tell a change of rules, which makes
an old log diverge by design, from a decision that does not reproduce.

Decisions are a function of the log and of the rules alone (`RULE_PACKAGES`, `RULE_MODULES`).
The package version does not say which rules ran (it is bumped at releases, not at every
change), so the digest covers their source.
"""

from __future__ import annotations

import functools
import hashlib
from importlib.metadata import PackageNotFoundError, version
from importlib.resources import files
from importlib.resources.abc import Traversable
from typing import Any, Final

import msgspec

from daemon.controllers.multicluster.settings import workers_of
from daemon.service.config import Reconcilers, Settings, Topology
from events.schema import Started

# The decision rules: what `kbatchd replay --verify` runs again. The reconcilers as the daemon
# wires them from its settings, the placement library, and the fold whose state they read;
# not the tools that only read the log (explain, timeline, JSON lines) nor the I/O around them.
# A test keeps this equal to what those modules import.
RULE_PACKAGES: Final = ("daemon.controllers", "daemon.placement")
# Modules of those packages that no decision depends on: what only `kbatchd place` uses
# (reading its JSON request: a what-if tool).
NOT_RULES: Final = ("daemon.placement.request",)
RULE_MODULES: Final = (
    "daemon.service.config",
    "daemon.service.wiring",
    "events.expectations",
    "events.fold",
    "events.hooks",
    "events.index",
    "events.intents",
    "events.jsondata",
    "events.objects",
    "events.quantity",
    "events.schema",
    "events.state",
    "events.topology",
)
# Hex digits kept of the digest: enough that two versions of the rules never share one.
_DIGEST_LENGTH: Final = 16


def kbatchd_version() -> str:
    try:
        return version("kbatchd")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0+unknown"


@functools.cache
def rules_digest() -> str:
    """A digest of the source of the decision rules (every ``.py`` of `RULE_PACKAGES` but
    `NOT_RULES`, and each of `RULE_MODULES`, by name and content, in name order)."""
    sources = [
        (f"{package}/{name}", source)
        for package in RULE_PACKAGES
        for name, source in _sources(files(package), "")
        if _module_name(package, name) not in NOT_RULES
    ]
    sources += [(module, _module_source(module)) for module in RULE_MODULES]
    digest = hashlib.sha256()
    for name, source in sorted(sources):
        digest.update(f"{name}\0".encode())
        digest.update(source)
        digest.update(b"\0")
    return digest.hexdigest()[:_DIGEST_LENGTH]


def package_modules() -> list[str]:
    """Every module of `RULE_PACKAGES` (``__init__`` as the package itself), from its files."""
    return sorted(
        _module_name(package, name)
        for package in RULE_PACKAGES
        for name, _ in _sources(files(package), "")
    )


def _module_name(package: str, path: str) -> str:
    """``daemon.placement`` + ``tree.py`` → ``daemon.placement.tree``."""
    parts = [package, *path.removesuffix(".py").split("/")]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_source(module: str) -> bytes:
    package, _, name = module.rpartition(".")
    return (files(package) / f"{name}.py").read_bytes()


def _sources(root: Traversable, prefix: str) -> list[tuple[str, bytes]]:
    found: list[tuple[str, bytes]] = []
    for entry in root.iterdir():
        if entry.is_dir():
            if entry.name != "__pycache__":
                found.extend(_sources(entry, f"{prefix}{entry.name}/"))
        elif entry.name.endswith(".py"):
            found.append((prefix + entry.name, entry.read_bytes()))
    return found


def decision_settings(settings: Settings) -> dict[str, Any]:
    """The part of the settings that decisions and the fold depend on. The multi-cluster
    dispatcher's workers are recorded as resolved: by default they are every ``[[clusters]]``
    name but the manager's, which nothing else recorded names."""
    reconcilers: dict[str, Any] = msgspec.to_builtins(settings.reconcilers)
    section = settings.reconcilers.multicluster
    if section.enabled:
        names = [c.name for c in settings.clusters]
        reconcilers["multicluster"]["workers"] = workers_of(section, names)
    return {"reconcilers": reconcilers, "topology": msgspec.to_builtins(settings.topology)}


def started(settings: Settings, at: int) -> Started:
    """The event a daemon appends when it opens its log."""
    return Started(
        at=at,
        version=kbatchd_version(),
        rules=rules_digest(),
        settings=decision_settings(settings),
    )


class RecordedSettingsError(ValueError):
    """A `Started` event whose settings this kbatchd cannot read (a newer one wrote them)."""


def recorded_settings(event: Started) -> Settings:
    """The settings a `Started` event records, as this kbatchd's `Settings` (the rest of
    them at their defaults: nothing else bears on a decision)."""
    try:
        return Settings(
            reconcilers=msgspec.convert(event.settings.get("reconcilers", {}), Reconcilers),
            topology=msgspec.convert(event.settings.get("topology", {}), Topology),
        )
    except msgspec.ValidationError as exc:
        raise RecordedSettingsError(f"settings recorded by kbatchd {event.version}: {exc}") from exc
