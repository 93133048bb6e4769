"""The garbage collector's settings for kbatchd's long-running processes.

Both the daemon and the simulated cluster hold a large, long-lived heap without reference
cycles (the daemon its folded state, informer caches and the objects in flight; the simulated
cluster every object it stores, as JSON dicts and lists, and its watch history). With
CPython's default thresholds the collector keeps walking it: in the gang benchmark at 6,000
workloads, 24 full collections took 2.2 s of the daemon's 21 s of CPU and 11 took 2.7 s of
the simulated cluster's 13 s.
"""

from __future__ import annotations

import gc
from typing import Final

# Young collections every 50,000 net allocations instead of 700; the oldest generation after
# 100 middle ones instead of 10 (CPython also waits until it has grown by a quarter). Cycles
# still go (a failed request's traceback, say): most die young, the rest at a full
# collection minutes apart under load instead of seconds.
THRESHOLDS: Final = (50_000, 50, 100)


def relax_collector() -> None:
    """Set the thresholds above. Process-wide: called by `kbatchd run` and `kbatchd sim` at
    start, and by the benchmarks whose process is a simulated cluster."""
    gc.set_threshold(*THRESHOLDS)
