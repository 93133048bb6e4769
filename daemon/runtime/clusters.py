"""Which clusters the daemon decides for: each joins once it has synced in this run (every
kind listed, and its API server asked whether it keeps Job ``spec.managedBy``), and a Job is
decided only where that answer was yes."""

from __future__ import annotations

from collections.abc import Iterable

from daemon.kube.ingest import Reachability
from daemon.kube.resources import CANDIDATES
from events.state import State


class Clusters:
    """The configured clusters and how far each has come in this run."""

    def __init__(self, names: Iterable[str], retry: tuple[float, float]) -> None:
        self.names = tuple(names)
        first, cap = retry
        # Per cluster, shared by its discovery, its managedBy question and its informers.
        self.reachability = {name: Reachability(name, first=first, cap=cap) for name in self.names}
        # Per cluster: whether its API server keeps Job spec.managedBy (absent: not yet known).
        self.jobs_managed: dict[str, bool] = {}
        # The clusters whose keys are decided: synced in this run. Every cluster joins as it
        # syncs; acting begins when all have, or after `cluster_sync_wait_seconds` with those
        # that have (one unreachable cluster does not hold the others up).
        self.acting: set[str] = set()

    @property
    def refusing_jobs(self) -> set[str]:
        """Clusters where kbatchd does not manage Jobs (their API server drops managedBy)."""
        return {cluster for cluster, kept in self.jobs_managed.items() if not kept}

    def unsynced(self) -> list[str]:
        """Clusters whose keys are not decided yet: not listed in this run, or not answering."""
        return [c for c in self.names if c not in self.acting]

    @property
    def all_joined(self) -> bool:
        return len(self.acting) == len(self.names)

    @property
    def everything_decidable(self) -> bool:
        """Every cluster in, and Jobs run on all of them: no key needs a look (`decidable`)."""
        return self.all_joined and all(self.jobs_managed.values())

    def decidable(self, key: str) -> bool:
        """Whether the key's cluster has joined, and (for a Job) kbatchd runs Jobs there."""
        parts = key.split("/", 2)
        if len(parts) < 2:
            return True
        cluster = parts[1]
        if cluster not in self.acting:
            return False
        return parts[0] != "Job" or self.jobs_managed.get(cluster, False)

    def synced(self, state: State, started_at: int) -> set[str]:
        """Clusters whose first list of every kind since seq `started_at` is in the log, and
        which have answered whether they keep Job spec.managedBy."""
        synced = state.synced
        return {
            cluster
            for cluster in self.names
            if cluster in self.jobs_managed
            and all(synced.get(f"{cluster}/{kind}", 0) > started_at for kind in CANDIDATES)
        }

    def may_begin(self, state: State, started_at: int, waited: float, wait: float) -> bool:
        """Every cluster synced; or some, once `wait` seconds have passed."""
        synced = self.synced(state, started_at)
        if len(synced) == len(self.names):
            return True
        return bool(synced) and waited >= wait

    def join(self, state: State, started_at: int) -> tuple[set[str], bool]:
        """The clusters synced since the last call join the acting; returns them, and whether
        they are the first to join."""
        if self.all_joined:
            return set(), False
        joining = self.synced(state, started_at) - self.acting
        first = not self.acting
        self.acting |= joining
        return joining, first and bool(joining)
