"""The settings of the Job controller (``[reconcilers.job]``); every key, its default and its
bounds are in `config/kbatchd.toml` and docs/configuration.md."""

from __future__ import annotations

import msgspec

from daemon.controllers.settings import ManagedBy, Seconds, SecondsOrOff


class JobSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    # Off: kbatchd runs no Job (each controller can be turned off on its own).
    enabled: bool = True
    # Jobs whose spec.managedBy equals this are kbatchd's; every other Job is left alone.
    managed_by: ManagedBy = "kbatchd.dev/job-controller"
    # Treat a pod terminating this long on a NotReady node as failed (0 = never, upstream).
    stuck_terminating_after_seconds: SecondsOrOff = 0
    # Pod re-creation back-off after failures: base doubling per failure up to the cap (the
    # upstream controller's 10 s and 10 min).
    backoff_base_seconds: Seconds = 10.0
    backoff_max_seconds: Seconds = 600.0
    # A drop of a Job's status.ready is written only once it lasts this long (0 = at once, as
    # upstream); rises and every other status change are written at once.
    ready_decrease_grace_seconds: SecondsOrOff = 0.0
    # Upstream's sync batch period: a Job's pod changes are decided at most once this often,
    # and while pods run a status change of counters alone is written at most once this
    # often; conditions and a Job's last write go at once (0 = every change at once).
    sync_batch_seconds: SecondsOrOff = 1.0
    # Jobs without spec.scheduling get a Workload and PodGroup as upstream's WorkloadWithJob
    # gate gives them (1.36: Indexed, parallelism > 1 and = completions, a gang; 1.37: basic).
    # A Job with spec.scheduling gets them whatever this says.
    workload_with_job: bool = False
