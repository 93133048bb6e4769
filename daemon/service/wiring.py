"""What the daemon runs: its controllers, one package each (`daemon.controllers`), in the
order they decide. Adding a controller is its package and one line here (and its section of
the settings)."""

from __future__ import annotations

from typing import Final

from daemon.controllers import gang, job, jobset, multicluster
from daemon.controllers.base import Controller, Reconciler
from daemon.service.config import Settings
from events import fold
from events.hooks import Wired

CONTROLLERS: Final[tuple[Controller, ...]] = (
    job.CONTROLLER,
    jobset.CONTROLLER,
    gang.CONTROLLER,
    multicluster.CONTROLLER,
)


def wire() -> None:
    """Fold with the controllers' hooks: called by every entry point before its first fold."""
    fold.wire(Wired(c.fold for c in CONTROLLERS))


def reconcilers(settings: Settings) -> list[Reconciler]:
    """The reconcilers of the controllers the settings turn on."""
    return [c.build(settings) for c in CONTROLLERS if getattr(settings.reconcilers, c.name).enabled]
