"""Several worker clusters: a workload submitted to the manager cluster runs in exactly one
worker, and a preemption for it evicts in at most one (`plan`); the workers that hold a copy
while it waits come from its dispatcher (`dispatch`).

`CONTROLLER` is the package as the daemon wires it (`daemon.service.wiring`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from daemon.controllers.base import Controller
from daemon.controllers.multicluster.projection import FOLD

if TYPE_CHECKING:
    from daemon.controllers.multicluster.reconciler import MulticlusterReconciler
    from daemon.service.config import Settings


def _build(settings: Settings) -> MulticlusterReconciler:
    from daemon.controllers.multicluster.reconciler import configured

    return configured(settings)


CONTROLLER: Final = Controller("multicluster", FOLD, _build)
