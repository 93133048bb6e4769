"""Sets of completion indexes in the Job API's compressed interval text (``"1,3-5,7"``).

`status.completedIndexes`, `status.failedIndexes` and a success policy's `succeededIndexes`
use it. Parsing is lenient the way the upstream controller is (a corrupt part is skipped,
anything at or past `completions` is dropped) because it reads what the API server already
accepted; formatting writes two consecutive numbers as ``"3,4"``, never ``"3-4"``.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator

Interval = tuple[int, int]


class Indexes:
    """An immutable, ordered set of non-negative integers held as disjoint, non-adjacent
    closed intervals."""

    __slots__ = ("intervals",)

    def __init__(self, intervals: tuple[Interval, ...] = ()) -> None:
        self.intervals = intervals

    @classmethod
    def parse(cls, text: str | None, completions: int) -> Indexes:
        if not text:
            return cls()
        merged: list[Interval] = []
        for part in text.split(","):
            low_text, dash, high_text = part.partition("-")
            if not low_text.isdigit() or (dash and not high_text.isdigit()):
                continue
            first = int(low_text)
            if first >= completions:
                break
            last = min(int(high_text), completions - 1) if dash else first
            if merged and merged[-1][1] == first - 1:
                merged[-1] = (merged[-1][0], last)
            else:
                merged.append((first, last))
        return cls(tuple(merged))

    @classmethod
    def of(cls, indexes: Iterable[int]) -> Indexes:
        return cls().union(indexes)

    def union(self, indexes: Iterable[int]) -> Indexes:
        return self.merge(Indexes(tuple((i, i) for i in sorted(set(indexes)))))

    def merge(self, other: Indexes) -> Indexes:
        result: list[Interval] = []
        for first, last in sorted(self.intervals + other.intervals):
            if result and first <= result[-1][1] + 1:
                if last > result[-1][1]:
                    result[-1] = (result[-1][0], last)
            else:
                result.append((first, last))
        return Indexes(tuple(result))

    def total(self) -> int:
        return sum(last - first + 1 for first, last in self.intervals)

    def __contains__(self, index: object) -> bool:
        if not isinstance(index, int):
            return False
        position = bisect_left(self.intervals, index, key=_last)
        return position < len(self.intervals) and self.intervals[position][0] <= index

    def __iter__(self) -> Iterator[int]:
        for first, last in self.intervals:
            yield from range(first, last + 1)

    def __bool__(self) -> bool:
        return bool(self.intervals)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Indexes) and self.intervals == other.intervals

    def __hash__(self) -> int:
        return hash(self.intervals)

    def __repr__(self) -> str:
        return f"Indexes({str(self)!r})"

    def __str__(self) -> str:
        parts: list[str] = []
        for first, last in self.intervals:
            if last == first:
                parts.append(str(first))
            elif last == first + 1:
                parts.append(f"{first},{last}")
            else:
                parts.append(f"{first}-{last}")
        return ",".join(parts)

    def overlap(self, other: Indexes) -> int:
        """How many indexes the two sets share (a merge walk over both interval lists)."""
        count = 0
        mine, theirs = self.intervals, other.intervals
        i = j = 0
        while i < len(mine) and j < len(theirs):
            (a_first, a_last), (b_first, b_last) = mine[i], theirs[j]
            count += max(0, min(a_last, b_last) - max(a_first, b_first) + 1)
            if a_last < b_last:
                i += 1
            elif b_last < a_last:
                j += 1
            else:
                i += 1
                j += 1
        return count

    def first_missing(self, count: int, limit: int) -> list[int]:
        """The lowest `count` integers in ``[0, limit)`` not in the set."""
        result: list[int] = []
        candidate = 0
        for first, last in self.intervals:
            while candidate < limit and len(result) < count and candidate < first:
                result.append(candidate)
                candidate += 1
            candidate = max(candidate, last + 1)
        while candidate < limit and len(result) < count:
            result.append(candidate)
            candidate += 1
        return result


def _last(interval: Interval) -> int:
    return interval[1]
