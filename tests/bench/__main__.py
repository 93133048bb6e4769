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
    await log.run(table)
    await replay.run(table)
    placement.run(table)
    await cluster.run(table)
    await sim_pods.run(table)
    jobset.run(table)
    await gang.run(table)
    print()
    print(table.render())
    return 1 if table.missed else 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
