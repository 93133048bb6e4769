"""The compressed interval format of completedIndexes / failedIndexes / succeededIndexes."""

from __future__ import annotations

import pytest

from daemon.controllers.job.indexes import Indexes


@pytest.mark.parametrize(
    ("indexes", "text"),
    [
        ([], ""),
        ([0], "0"),
        ([3, 4], "3,4"),
        ([1, 3, 4, 5, 7], "1,3-5,7"),
        ([0, 1, 2, 3], "0-3"),
        ([9, 2, 2, 3], "2,3,9"),
    ],
    ids=["empty", "one", "two-consecutive", "mixed", "run", "unsorted-duplicates"],
)
def test_format(indexes: list[int], text: str) -> None:
    assert str(Indexes.of(indexes)) == text


@pytest.mark.parametrize(
    ("text", "completions", "expected"),
    [
        ("1,3-5,7", 10, [1, 3, 4, 5, 7]),
        ("3,4", 10, [3, 4]),
        ("0-9", 5, [0, 1, 2, 3, 4]),
        ("1,8", 5, [1]),
        ("x,2", 5, [2]),
        ("", 5, []),
        (None, 5, []),
        ("1-2,3", 5, [1, 2, 3]),
    ],
    ids=[
        "mixed",
        "pair",
        "clipped",
        "past-completions",
        "corrupt-part",
        "empty",
        "none",
        "adjacent",
    ],
)
def test_parse(text: str | None, completions: int, expected: list[int]) -> None:
    assert list(Indexes.parse(text, completions)) == expected


def test_membership_union_and_overlap() -> None:
    a = Indexes.parse("0,2-3", 10)
    b = Indexes.of([3, 4, 5])
    assert 2 in a
    assert 1 not in a
    assert 3 in b
    assert str(a.union([1])) == "0-3"
    assert str(a.merge(b)) == "0,2-5"
    assert a.overlap(b) == 1
    assert a.total() == 3


@pytest.mark.parametrize(
    ("taken", "count", "limit", "expected"),
    [
        ("", 3, 5, [0, 1, 2]),
        ("0,2", 2, 5, [1, 3]),
        ("0-4", 2, 5, []),
        ("1-3", 5, 6, [0, 4, 5]),
    ],
    ids=["none-taken", "gaps", "all-taken", "around-a-run"],
)
def test_first_missing(taken: str, count: int, limit: int, expected: list[int]) -> None:
    assert Indexes.parse(taken, limit).first_missing(count, limit) == expected
