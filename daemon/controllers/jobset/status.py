"""A JobSet's status as one decision writes it: conditions with upstream's update rules, the
per-replicatedJob counters, and the merge patch that carries only what changed.

Upstream makes one status write at the end of each reconcile; so does a decision here, as a JSON
merge patch on the `status` subresource with the JobSet's resourceVersion as a precondition, so
that counters (`restarts`, `jobRestarts`) are never bumped twice from a stale read. Lists
(conditions, replicatedJobsStatus) are sent whole because a merge patch replaces lists.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any, Final

from daemon.controllers.jobset.spec import (
    STARTUP_COMPLETED,
    STARTUP_IN_PROGRESS,
    JobSetView,
)
from events.objects import rfc3339

_EXCLUSIVE: Final = frozenset({STARTUP_IN_PROGRESS, STARTUP_COMPLETED})


@dataclass
class Counters:
    """One replicatedJob's child Jobs of the current attempt (spec B0)."""

    ready: int = 0
    succeeded: int = 0
    failed: int = 0
    active: int = 0
    suspended: int = 0


@dataclass
class StatusDraft:
    """The status this decision writes, starting from the observed one."""

    view: JobSetView
    now: int
    conditions: list[dict[str, Any]] = field(default_factory=list)
    restarts: int = 0
    restarts_towards_max: int = 0
    terminal_state: str | None = None
    previous_in_place: int | None = None
    current_in_place: int | None = None
    replicated: list[dict[str, Any]] = field(default_factory=list)
    # Human-readable notes of what changed, for the decision's reason.
    notes: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, view: JobSetView, now: int) -> StatusDraft:
        status = view.status
        return cls(
            view=view,
            now=now,
            conditions=copy.deepcopy(list(status.conditions or ())),
            restarts=status.restarts,
            restarts_towards_max=status.restarts_count_towards_max,
            terminal_state=status.terminal_state,
            previous_in_place=status.previous_in_place_restart_attempt,
            current_in_place=status.current_in_place_restart_attempt,
            replicated=copy.deepcopy(list(status.replicated_jobs_status or ())),
        )

    # -- conditions ----------------------------------------------------------------------------

    def set_condition(self, type_: str, status: str, reason: str, message: str) -> bool:
        """upstream `updateCondition`: a condition of the same type changes only when its status
        does (a new reason alone changes nothing); an absent one is added only when True; the
        two startup conditions exclude each other. Reports whether anything changed."""
        new = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": rfc3339(self.now),
        }
        found = changed = False
        for i, current in enumerate(self.conditions):
            if current.get("type") == type_:
                found = True
                if current.get("status") != status:
                    self.conditions[i] = new
                    changed = True
            elif (
                type_ in _EXCLUSIVE
                and current.get("type") in _EXCLUSIVE
                and current.get("status") == "True"
                and status == "True"
            ):
                self.conditions[i] = {**current, "status": "False"}
                changed = True
        if not found and status == "True":
            self.conditions.append(new)
            changed = True
        if changed:
            self.notes.append(f"{type_}={status} ({reason})")
        return changed

    # -- replicatedJobsStatus ------------------------------------------------------------------

    def set_counters(self, counters: dict[str, Counters]) -> None:
        """Recompute every replicatedJob's counters, keeping its RestartJob lists."""
        previous = {entry.get("name"): entry for entry in self.replicated}
        result: list[dict[str, Any]] = []
        for rj in self.view.spec.replicated_jobs:
            count = counters.get(rj.name, Counters())
            entry: dict[str, Any] = {
                "name": rj.name,
                "ready": count.ready,
                "succeeded": count.succeeded,
                "failed": count.failed,
                "active": count.active,
                "suspended": count.suspended,
            }
            old = previous.get(rj.name) or {}
            for key in ("jobRestarts", "jobRestartsCountTowardsMax"):
                if key in old:
                    entry[key] = old[key]
            result.append(entry)
        self.replicated = result

    def counters(self, rj: str) -> Counters:
        for entry in self.replicated:
            if entry.get("name") == rj:
                return Counters(
                    ready=entry.get("ready", 0),
                    succeeded=entry.get("succeeded", 0),
                    failed=entry.get("failed", 0),
                    active=entry.get("active", 0),
                    suspended=entry.get("suspended", 0),
                )
        return Counters()

    def bump_job_restarts(self, rj: str, index: int, *, towards_max: bool) -> None:
        replicas = next((r.replicas for r in self.view.spec.replicated_jobs if r.name == rj), 0)
        for entry in self.replicated:
            if entry.get("name") != rj:
                continue
            keys = ["jobRestarts", *(["jobRestartsCountTowardsMax"] if towards_max else [])]
            for key in ("jobRestarts", "jobRestartsCountTowardsMax"):
                values = [v if isinstance(v, int) else 0 for v in entry.get(key) or ()]
                values += [0] * (max(replicas, index + 1) - len(values))
                if key in keys:
                    values[index] += 1
                entry[key] = values

    def job_restarts_towards_max(self) -> int:
        return sum(
            sum(v for v in entry.get("jobRestartsCountTowardsMax") or () if isinstance(v, int))
            for entry in self.replicated
        )

    # -- the write -----------------------------------------------------------------------------

    def patch(self) -> dict[str, Any]:
        """The status fields that differ from the observed status (empty when none)."""
        have = self.view.status
        patch: dict[str, Any] = {}
        if self.conditions != list(have.conditions or ()):
            patch["conditions"] = self.conditions
        if self.restarts != have.restarts:
            patch["restarts"] = self.restarts
        if self.restarts_towards_max != have.restarts_count_towards_max:
            patch["restartsCountTowardsMax"] = self.restarts_towards_max
        if self.terminal_state != have.terminal_state:
            patch["terminalState"] = self.terminal_state
        if self.previous_in_place != have.previous_in_place_restart_attempt:
            patch["previousInPlaceRestartAttempt"] = self.previous_in_place
        if self.current_in_place != have.current_in_place_restart_attempt:
            patch["currentInPlaceRestartAttempt"] = self.current_in_place
        if self.replicated != list(have.replicated_jobs_status or ()):
            patch["replicatedJobsStatus"] = self.replicated
        return patch
