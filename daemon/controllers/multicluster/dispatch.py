"""Which workers hold a copy of a workload while it waits to be admitted: MultiKueue's two
dispatchers.

- **AllAtOnce**: every worker, at once. Fastest to admit; without coordination, the most
  collisions (`multicluster.plan` makes them harmless).
- **Incremental**: the first `step` workers in the configured order; each `round` without
  admission adds the next `step`, until every worker holds one.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import msgspec

ALL_AT_ONCE: Final = "AllAtOnce"
INCREMENTAL: Final = "Incremental"


class Dispatcher(msgspec.Struct, frozen=True):
    name: str = ALL_AT_ONCE
    step: int = 3  # Incremental: workers added per round
    round_ms: int = 5 * 60 * 1000  # Incremental: how long a round waits for admission


def rounds(dispatcher: Dispatcher, since: int, now: int) -> int:
    """Rounds ended without admission since dispatch began at `since`."""
    return max(0, now - since) // dispatcher.round_ms


def nominated(dispatcher: Dispatcher, workers: Sequence[str], since: int, now: int) -> list[str]:
    """The workers that hold a copy at `now`, in the configured order."""
    if dispatcher.name == ALL_AT_ONCE:
        return list(workers)
    return list(workers[: dispatcher.step * (rounds(dispatcher, since, now) + 1)])


def next_round(dispatcher: Dispatcher, workers: Sequence[str], since: int, now: int) -> int | None:
    """When more workers are nominated (ms), None when every worker already is."""
    if len(nominated(dispatcher, workers, since, now)) >= len(workers):
        return None
    return since + (rounds(dispatcher, since, now) + 1) * dispatcher.round_ms
