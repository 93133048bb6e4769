"""The settings of gang admission (``[reconcilers.gang]``); every key, its default and its
bounds are in `config/kbatchd.toml` and docs/configuration.md."""

from __future__ import annotations

from typing import Annotated

import msgspec

from daemon.controllers.settings import MAX_SECONDS, Count, Seconds, SecondsOrOff


class GangSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = True
    # Pods whose spec.schedulerName equals this are placed and bound by kbatchd, group by group.
    scheduler_name: Annotated[str, msgspec.Meta(min_length=1)] = "kbatchd"
    # A group whose ready (or succeeded) pods have not reached minCount this long after it was
    # bound is evicted as a whole and requeued (0 = never). Kueue's waitForPodsReady default.
    ready_timeout_seconds: SecondsOrOff = 1800.0
    # Requeue back-off after the n-th eviction: base x 2^(n-1), capped (Kueue's defaults).
    backoff_base_seconds: Seconds = 60.0
    backoff_max_seconds: Seconds = 3600.0
    # Evictions after which a group is no longer requeued (0 = requeue for ever).
    max_evictions: Count = 0
    # A group that does not fit is decided again after 1 s, doubling up to this; capacity
    # released on its cluster wakes it sooner.
    retry_max_seconds: Annotated[float, msgspec.Meta(ge=1, le=MAX_SECONDS)] = 60.0
    # The level each unit of a role-ratio Workload stays inside; empty = the level above the
    # lowest (the rack in block/rack/host). A Workload may override it by annotation.
    ratio_level: str = ""
