"""The settings of the JobSet controller (``[reconcilers.jobset]``); every key, its default and its
bounds are in `config/kbatchd.toml` and docs/configuration.md."""

from __future__ import annotations

import msgspec

from daemon.controllers.settings import ManagedBy


class JobSetSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    # JobSets whose spec.managedBy equals this are kbatchd's; every other JobSet is left alone.
    # Their child Jobs carry [reconcilers.job] managed_by, so kbatchd runs them too.
    managed_by: ManagedBy = "kbatchd.dev/jobset-controller"
