"""The settings of the multi-cluster dispatcher (``[reconcilers.multicluster]``); every key,
its default and its bounds are in `config/kbatchd.toml` and docs/configuration.md."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Final, Literal

import msgspec

from daemon.controllers.settings import Seconds

# Jobs and JobSets on the manager with kbatchd's managedBy and this label set to "true" are
# dispatched.
LABEL: Final = "kbatchd.dev/multicluster"


class MulticlusterSettings(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    enabled: bool = False
    # The [[clusters]] name workloads are submitted to; required when enabled.
    manager: str = ""
    # The [[clusters]] names that run them, in the order they are tried; empty = every
    # cluster but the manager, in the order of [[clusters]].
    workers: list[str] = []
    # Which workers get a copy: all at once, or `step` more after each `round_seconds`.
    dispatcher: Literal["AllAtOnce", "Incremental"] = "AllAtOnce"
    step: Annotated[int, msgspec.Meta(ge=1, le=100)] = 3
    round_seconds: Seconds = 300.0
    label: Annotated[str, msgspec.Meta(min_length=1, max_length=317)] = LABEL
    # A preemption not committed this long after it was reserved is aborted.
    preemption_deadline_seconds: Seconds = 120.0
    # A workload no worker takes is looked at again this often.
    retry_seconds: Seconds = 2.0


def workers_of(section: MulticlusterSettings, clusters: Sequence[str]) -> list[str]:
    """The workers in the order they are tried: as configured, else every cluster but the
    manager in the order of [[clusters]]."""
    return list(section.workers) or [c for c in clusters if c != section.manager]
