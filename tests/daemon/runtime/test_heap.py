"""The garbage collector settings of the daemon's and the simulated cluster's processes."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from daemon.runtime.heap import THRESHOLDS, relax_collector


@pytest.fixture
def thresholds() -> Iterator[None]:
    saved = gc.get_threshold()
    yield
    gc.set_threshold(*saved)


def test_relax_collector_collects_seldom_but_still_collects(thresholds: None) -> None:
    relax_collector()
    assert gc.get_threshold() == THRESHOLDS
    young, middle, old = THRESHOLDS
    # Later than CPython's defaults (700, 10, 10) at every generation.
    assert young > 700
    assert middle >= 10
    assert old >= 10
    assert gc.isenabled()
