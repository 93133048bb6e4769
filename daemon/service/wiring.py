"""What the daemon runs: the controllers, each one package (`daemon.controllers`), wired here
once. Their fold hooks go into the fold (`wire`), and their reconcilers, built from the
settings, decide in this order."""

from __future__ import annotations

from typing import Final

from daemon.controllers.base import Reconciler
from daemon.controllers.gang.projection import FOLD as GANG_FOLD
from daemon.controllers.gang.reconciler import GangReconciler
from daemon.controllers.job.projection import FOLD as JOB_FOLD
from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.jobset.projection import FOLD as JOBSET_FOLD
from daemon.controllers.jobset.reconciler import JobSetReconciler
from daemon.service.config import Settings
from events import fold
from events.hooks import Wired

FOLDS: Final = (JOB_FOLD, JOBSET_FOLD, GANG_FOLD)


def wire() -> None:
    """Fold with the controllers' hooks: called by every entry point before its first fold."""
    fold.wire(Wired(FOLDS))


def reconcilers(settings: Settings) -> list[Reconciler]:
    job = settings.reconcilers.job
    gang = settings.reconcilers.gang
    stuck = job.stuck_terminating_after_seconds
    every: list[Reconciler] = [
        JobReconciler(
            managed_by=job.managed_by,
            stuck_terminating_after_ms=int(stuck * 1000) if stuck else None,
            backoff_base_ms=int(job.backoff_base_seconds * 1000),
            backoff_max_ms=int(job.backoff_max_seconds * 1000),
            ready_decrease_grace_ms=int(job.ready_decrease_grace_seconds * 1000),
        ),
        JobSetReconciler(
            managed_by=settings.reconcilers.jobset.managed_by,
            job_managed_by=job.managed_by,
        ),
        GangReconciler(
            scheduler_name=gang.scheduler_name,
            ready_timeout_ms=int(gang.ready_timeout_seconds * 1000) or None,
            backoff_base_ms=int(gang.backoff_base_seconds * 1000),
            backoff_max_ms=int(gang.backoff_max_seconds * 1000),
            max_evictions=gang.max_evictions,
            retry_max_ms=int(gang.retry_max_seconds * 1000),
            ratio_level=gang.ratio_level,
        ),
    ]
    wanted = {
        "job": job.enabled,
        "jobset": settings.reconcilers.jobset.enabled,
        "gang": gang.enabled,
    }
    return [r for r in every if wanted[r.name]]
