"""What the daemon runs, built from its settings: the reconcilers, in the order they decide."""

from __future__ import annotations

from daemon.controllers.base import Reconciler
from daemon.controllers.gang.reconciler import GangReconciler
from daemon.controllers.job.reconciler import JobReconciler
from daemon.controllers.jobset.reconciler import JobSetReconciler
from daemon.service.config import Settings


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
