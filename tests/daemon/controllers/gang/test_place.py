"""`daemon.controllers.gang.place`: the room tests the gang queue and its reasons make."""

from __future__ import annotations

import pytest

from daemon.controllers.gang.place import fits, short_of


@pytest.mark.parametrize(
    ("need", "free", "short"),
    [
        pytest.param({"cpu": 2000}, {"cpu": 2000}, [], id="exactly-enough"),
        pytest.param({"cpu": 2000}, {"cpu": 1999}, ["cpu"], id="one-short"),
        pytest.param({"cpu": 1, "memory": 2}, {}, ["cpu", "memory"], id="nothing-free-sorted"),
        pytest.param({"nvidia.com/gpu": 0}, {}, [], id="zero-need-is-met"),
        pytest.param({"pods": 3}, {"cpu": 5}, [], id="no-pods-allocatable-no-pod-limit"),
        pytest.param({"pods": 3}, {"pods": 2}, ["pods"], id="pods-allocatable-limits"),
        pytest.param({"cpu": 1}, {"cpu": -4}, ["cpu"], id="overcommitted"),
    ],
)
def test_fits_exactly_when_nothing_is_short(
    need: dict[str, int], free: dict[str, int], short: list[str]
) -> None:
    assert short_of(need, free) == short
    assert fits(need, free) is (not short)
