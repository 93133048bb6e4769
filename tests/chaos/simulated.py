"""A chaos run's clusters when simulated: one, or a manager and three workers, in this process,
their faults seeded. The oracle is each cluster's own record of its changes (`Journal`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any, Final

from daemon.sim.cluster import SimCluster
from daemon.sim.faults import Faults
from daemon.sim.resources import Resource
from tests.chaos import invariants
from tests.chaos.load import NAMESPACE, FailOnce, Load, submit

# Pods run at 4x; bookmarks every simulated second keep a healthy watch well inside the
# daemon's 2 s inactivity deadline in a run, which a stalled watch then runs out.
TIME_SCALE: Final = 4.0
BOOKMARK_SECONDS: Final = 1.0


class SimClusters:
    """The run's simulated clusters, and what the run needs of them."""

    def __init__(self, sims: dict[str, SimCluster], load: Load) -> None:
        self.sims = sims
        self.load = load
        # Before anything is submitted: the journals and the failing see every change.
        self._journals = {name: invariants.Journal(sim) for name, sim in sims.items()}
        self._failing = FailOnce(sims[load.home], load)

    @property
    def kubeconfigs(self) -> dict[str, Path]:
        return {n: s.kubeconfig_path for n, s in self.sims.items() if s.kubeconfig_path}

    @property
    def failed(self) -> dict[str, list[int]]:
        return self._failing.failed

    async def submit(self) -> None:
        submit(self.sims, self.load)

    async def get(self, resource: Resource, name: str) -> dict[str, Any] | None:
        return self.sims[self.load.home].get(resource, NAMESPACE, name)

    async def held(self, name: str) -> dict[tuple[str, str], str]:
        return invariants.held(self.sims[name])

    async def journals(self) -> dict[str, list[invariants.Change]]:
        return {name: journal.events for name, journal in self._journals.items()}

    async def lift(self) -> Counter[str]:
        """Every injected fault off; the faults that struck, by name."""
        struck: Counter[str] = Counter()
        for sim in self.sims.values():
            sim.faults.clear()
            struck += sim.faults.hits
        return struck


@asynccontextmanager
async def simulated_clusters(
    names: tuple[str, ...], topology: str, faults: str, seed: int, tmp: Path, load: Load
) -> AsyncIterator[SimClusters]:
    """The clusters `names` (cluster i seeded `seed + i`), serving until the block ends."""
    async with AsyncExitStack() as stack:
        sims: dict[str, SimCluster] = {}
        for i, name in enumerate(names):
            sims[name] = await stack.enter_async_context(
                SimCluster.start(
                    topology=topology,
                    seed=seed + i,
                    time_scale=TIME_SCALE,
                    faults=Faults.parse(faults, seed=seed + i),
                    bookmark_seconds=BOOKMARK_SECONDS,
                    name=name,
                    kubeconfig_path=tmp / f"{name}.kubeconfig",
                )
            )
        yield SimClusters(sims, load)
