"""The Python heap of a process that hosts simulated clusters.

A simulated cluster keeps every object it stores, and its watch history, as JSON dicts and
lists: hundreds of thousands of long-lived containers with no reference cycles among them.
With CPython's default thresholds every full collection walks all of them: in the gang
benchmark at 6,000 workloads, 11 full collections took 2.7 s of the benchmark process's 13 s
of CPU.
"""

from __future__ import annotations

import gc
from typing import Final

# Young collections every 50,000 net allocations instead of 700, and the oldest generation
# only after 1,000 middle ones: garbage cycles (a failed request's traceback, say) still go,
# later; the stored objects are seldom walked.
THRESHOLDS: Final = (50_000, 50, 1_000)


def relax_collector() -> None:
    """Set the garbage collector's thresholds for a process that is mostly simulated cluster.
    Process-wide: not for a process that also runs the daemon (the demo runs both)."""
    gc.set_threshold(*THRESHOLDS)
