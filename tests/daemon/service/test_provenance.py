"""What a daemon records of itself in its log (`Started`) and what is read back from it."""

from __future__ import annotations

import re
import subprocess
import sys
from importlib.resources.abc import Traversable

import msgspec
import pytest

from daemon.controllers.gang.settings import GangSettings
from daemon.controllers.job.settings import JobSettings
from daemon.controllers.multicluster.settings import MulticlusterSettings
from daemon.service import provenance
from daemon.service.config import Cluster, Reconcilers, Settings, Topology
from events.schema import STARTED_REF, Started, decode_event, encode_event, event_ref

SETTINGS = [
    Settings(),
    Settings(reconcilers=Reconcilers(gang=GangSettings(scheduler_name="other", max_evictions=3))),
    Settings(reconcilers=Reconcilers(job=JobSettings(backoff_base_seconds=1.5))),
    Settings(topology=Topology(levels=["example.com/rack", "kubernetes.io/hostname"])),
]


@pytest.mark.parametrize("settings", SETTINGS, ids=["defaults", "gang", "job", "levels"])
def test_the_recorded_settings_read_back_as_they_were(settings: Settings) -> None:
    event = decode_event(encode_event(provenance.started(settings, at=7)))
    assert isinstance(event, Started)
    read = provenance.recorded_settings(event)
    assert (read.reconcilers, read.topology) == (settings.reconcilers, settings.topology)
    assert event_ref(event) == STARTED_REF


def test_the_dispatchers_default_workers_are_recorded_as_they_resolve() -> None:
    clusters = [Cluster(name=n) for n in ("m", "w1", "w2")]
    section = MulticlusterSettings(enabled=True, manager="m")
    settings = Settings(clusters=clusters, reconcilers=Reconcilers(multicluster=section))
    event = decode_event(encode_event(provenance.started(settings, at=7)))
    assert isinstance(event, Started)
    read = provenance.recorded_settings(event)
    assert read.reconcilers.multicluster.workers == ["w1", "w2"], "no [[clusters]] recorded"


def test_the_start_names_this_kbatchd_and_its_rules() -> None:
    event = provenance.started(Settings(), at=7)
    assert event.version == provenance.kbatchd_version()
    assert re.fullmatch(r"[0-9a-f]{16}", event.rules)
    assert event.rules == provenance.rules_digest()


def test_settings_this_kbatchd_cannot_read_are_an_error_naming_the_writer() -> None:
    event = msgspec.structs.replace(
        provenance.started(Settings(), at=7),
        version="9.9.9",
        settings={"reconcilers": {"gang": {"scheduler_name": 5}}},
    )
    with pytest.raises(
        provenance.RecordedSettingsError, match=r"kbatchd 9\.9\.9: .*scheduler_name"
    ):
        provenance.recorded_settings(event)


def test_the_rules_are_what_the_reconcilers_placement_and_fold_import() -> None:
    """A module the decisions come to depend on changes the digest only if it is listed: a
    fresh interpreter imports the daemon's reconcilers (as wired and as run), placement and
    the fold; everything of kbatchd's they load must be a rule, and every module of the rule
    packages they do not load must be one of `NOT_RULES` (so that editing it, `kbatchd
    place`'s own code, does not tell `--verify` the rules changed)."""
    imports = "daemon.service.wiring, daemon.controllers.runner, daemon.placement, events.fold"
    # Every controller on, those off by default too (the dispatcher).
    build = (
        "s = daemon.service.wiring.Settings(); s.reconcilers.multicluster.enabled = True; "
        "daemon.service.wiring.reconcilers(s)"
    )
    loaded = subprocess.run(
        # The reconcilers load when they are built (`Controller.build`), as the daemon does.
        [sys.executable, "-c", f"import sys, {imports}; {build}; print(*sys.modules)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    # `daemon.service`: the package of the settings and the wiring, a docstring.
    ours = {m for m in loaded if m.startswith(("daemon.", "events."))} - {"daemon.service"}
    in_packages = {
        m for m in ours if m.startswith(tuple(f"{p}." for p in provenance.RULE_PACKAGES))
    }
    assert ours - in_packages - set(provenance.RULE_PACKAGES) == set(provenance.RULE_MODULES)
    unloaded = set(provenance.package_modules()) - in_packages - set(provenance.RULE_PACKAGES)
    assert unloaded == set(provenance.NOT_RULES)


@pytest.mark.parametrize(
    ("module", "changes"),
    [
        ("daemon.placement.tree", True),
        ("daemon.controllers.runner", True),
        ("daemon.tools.place", False),
        ("daemon.placement.request", False),
    ],
)
def test_an_edit_changes_the_digest_only_in_a_rule(
    monkeypatch: pytest.MonkeyPatch, module: str, changes: bool
) -> None:
    package, _, name = module.rpartition(".")
    sources = provenance._sources

    def edited(root: Traversable, prefix: str) -> list[tuple[str, bytes]]:
        found = sources(root, prefix)
        if str(root).endswith(package.replace(".", "/")):
            found = [(n, s + b"\n# edited" if n == f"{name}.py" else s) for n, s in found]
        return found

    before = provenance.rules_digest.__wrapped__()
    monkeypatch.setattr(provenance, "_sources", edited)
    assert (provenance.rules_digest.__wrapped__() != before) is changes
