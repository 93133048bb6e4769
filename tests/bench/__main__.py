"""Run every benchmark and print one table (`make bench`).

Each section runs in a fresh process (its ratios are still measured within that one run):
measured after the log sections had made and freed a few gigabytes of events, the same
placement took about 40 % longer at 10,000 nodes (47 ms against 30–34 ms alone), which is the
heap's history, not the code under measurement."""

from __future__ import annotations

import platform
import sys
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

from tests.bench.section import run_section
from tests.bench.table import Table

SECTIONS = (
    "placement",
    "log",
    "replay",
    "cluster",
    "sim_pods",
    "jobset",
    "gang",
    "gang_real",
    "gang_vs_scheduler",
    "job_vs_upstream",
    "jobset_vs_upstream",
    "gang_vs_kueue",
    "multicluster",
    "kills",
    "scale",
    "scale_real",
)


def main() -> int:
    table = Table()
    print(f"kbatchd benchmarks on Python {platform.python_version()}, {platform.machine()}")
    for name in SECTIONS:
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as child:
            table.rows.extend(child.submit(run_section, name).result())
    print()
    print(table.render())
    return 1 if table.missed else 0


if __name__ == "__main__":
    sys.exit(main())
