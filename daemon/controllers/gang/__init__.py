"""Gang admission: Workloads and PodGroups admitted whole, placed by `daemon.placement`.

`CONTROLLER` is the package as the daemon wires it (`daemon.service.wiring`). Its reconciler,
and the placement and policy code under it, load only where decisions are made: the replay
tools fold with the package's hooks alone."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from daemon.controllers.base import Controller
from daemon.controllers.gang.projection import FOLD

if TYPE_CHECKING:
    from daemon.controllers.gang.reconciler import GangReconciler
    from daemon.service.config import Settings


def _build(settings: Settings) -> GangReconciler:
    from daemon.controllers.gang.reconciler import configured

    return configured(settings)


CONTROLLER: Final = Controller("gang", FOLD, _build)
