"""The Job controller: upstream Job semantics (pods, back-off, suspension, policies).

`CONTROLLER` is the package as the daemon wires it (`daemon.service.wiring`). Its reconciler,
and the placement and policy code under it, load only where decisions are made: the replay
tools fold with the package's hooks alone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from daemon.controllers.base import Controller
from daemon.controllers.job.projection import FOLD

if TYPE_CHECKING:
    from daemon.controllers.job.reconciler import JobReconciler
    from daemon.service.config import Settings


def _build(settings: Settings) -> JobReconciler:
    from daemon.controllers.job.reconciler import configured

    return configured(settings)


CONTROLLER: Final = Controller("job", FOLD, _build)
