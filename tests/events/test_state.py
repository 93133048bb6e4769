"""When the daemon's next snapshot is due: the interval grows with the state it would encode."""

from __future__ import annotations

import pytest

from events.objects import Node, Pod
from events.state import SNAPSHOT_EVENTS_PER_OBJECT, empty_state, snapshot_due


@pytest.mark.parametrize(
    ("pods", "nodes", "since", "every", "due"),
    [
        pytest.param(0, 0, 999, 1000, False, id="before-the-interval"),
        pytest.param(0, 0, 1000, 1000, True, id="at-the-interval"),
        pytest.param(400, 100, 1000, 1000, True, id="small-state-interval-rules"),
        pytest.param(500, 100, 1000, 1000, False, id="large-state-waits"),
        pytest.param(500, 100, 1199, 1000, False, id="one-short-of-two-per-object"),
        pytest.param(500, 100, 1200, 1000, True, id="two-events-per-object"),
        pytest.param(100_000, 10_000, 50_000, 50_000, False, id="a-big-cluster-at-the-default"),
        pytest.param(100_000, 10_000, 220_000, 50_000, True, id="a-big-cluster-later"),
    ],
)
def test_a_snapshot_is_due_after_the_interval_and_two_events_per_object(
    pods: int, nodes: int, since: int, every: int, due: bool
) -> None:
    state = empty_state()
    state.pods = {f"c/ns/p{i}": Pod(name=f"p{i}") for i in range(pods)}
    state.nodes = {f"c//n{i}": Node(name=f"n{i}") for i in range(nodes)}
    assert SNAPSHOT_EVENTS_PER_OBJECT == 2
    assert snapshot_due(state, since, every) is due
