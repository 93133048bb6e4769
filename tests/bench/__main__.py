"""Run every benchmark and print one table (`make bench`)."""

from __future__ import annotations

import platform
import sys

import anyio

from tests.bench import cluster, gang, jobset, log, placement, replay, sim_pods
from tests.bench.table import Table


async def main() -> int:
    table = Table()
    print(f"kbatchd benchmarks on Python {platform.python_version()}, {platform.machine()}")
    # Placement first: after the log sections have made and freed a few gigabytes of events,
    # the same placement measured about 40 % slower at 10,000 nodes (and its scaling ratio
    # with it), which is the heap's history, not the placement's cost.
    placement.run(table)
    await log.run(table)
    await replay.run(table)
    await cluster.run(table)
    await sim_pods.run(table)
    jobset.run(table)
    await gang.run(table)
    print()
    print(table.render())
    return 1 if table.missed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
