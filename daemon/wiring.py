"""What the daemon runs, built from its settings: the reconcilers, in the order they decide."""

from __future__ import annotations

from daemon.config import Settings
from daemon.reconcilers.base import Reconciler
from daemon.reconcilers.job import JobReconciler


def reconcilers(settings: Settings) -> list[Reconciler]:
    job = settings.reconcilers.job
    stuck = job.stuck_terminating_after_seconds
    return [
        JobReconciler(
            managed_by=job.managed_by,
            stuck_terminating_after_ms=int(stuck * 1000) if stuck else None,
        ),
    ]
