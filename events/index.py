"""Set-valued indexes the fold keeps beside its tables (pods by controller, by pod group, by
node): one key moving from one bucket to another, empty buckets dropped so that equal state
has one representation."""

from __future__ import annotations


def reindex(index: dict[str, set[str]], key: str, before: str | None, after: str | None) -> None:
    """Move `key` from bucket `before` to bucket `after` (either may be None)."""
    if before == after:
        return
    if before is not None:
        bucket = index.get(before)
        if bucket is not None:
            bucket.discard(key)
            if not bucket:
                del index[before]
    if after is not None:
        index.setdefault(after, set()).add(key)
