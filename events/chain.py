"""The log's digest chain: every stored event carries a digest of the log up to and including
it, so that a changed, lost or inserted row anywhere shows as the first seq whose digest no
longer follows from the one before.

``digest(n) = H(digest(n - 1), seq, at, ref, body)``, the fields as stored, ``digest(0)`` the
`GENESIS`. It makes damage evident (a damaged page, a row edited or removed behind the
store's back); it is no signature: whoever may write the file may also write a new chain.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence
from typing import Final

# blake2b cut to 16 bytes: 128 bits is ample against damage, and the row grows by 17 bytes.
# (SHA-256 hashed a 460-byte event in 0.8 us and blake2b in 1.4 us alone, but the chain of
# 200,000 events cost the same with either, 2.1-3.5 us an event: the rest is the call.)
DIGEST_SIZE: Final = 16
GENESIS: Final = bytes(DIGEST_SIZE)

# seq, at and the ref's length in bytes (-1: no ref, which is not the empty ref), then the
# ref and the body: no two different rows hash the same bytes.
_FIXED: Final = struct.Struct("<qqi")
_blake2b: Final = hashlib.blake2b


def link(previous: bytes, seq: int, at: int, ref: str | None, body: bytes) -> bytes:
    """The digest of the log up to the event `seq`, from the digest up to the one before."""
    name = b"" if ref is None else ref.encode()
    fixed = _FIXED.pack(seq, at, -1 if ref is None else len(name))
    return _blake2b(b"".join((previous, fixed, name, body)), digest_size=DIGEST_SIZE).digest()


def links(
    previous: bytes,
    first: int,
    ats: Sequence[int],
    refs: Sequence[str | None],
    bodies: Sequence[bytes],
) -> list[bytes]:
    """The digests of consecutive events from seq `first`, continuing the chain at `previous`."""
    digests: list[bytes] = []
    add = digests.append
    digest = previous
    for seq, at, ref, body in zip(
        range(first, first + len(bodies)), ats, refs, bodies, strict=True
    ):
        digest = link(digest, seq, at, ref, body)
        add(digest)
    return digests


class ChainBroken(ValueError):
    """Where the chain breaks: the first seq that does not follow, and why."""

    def __init__(self, seq: int, reason: str) -> None:
        super().__init__(f"seq {seq}: {reason}")
        self.seq = seq
        self.reason = reason


class Walk:
    """A walk along the chain from the event after `after`, whose digest is `digest`.

    `follow` takes stored rows in seq order; `next_seq` is the first seq not yet walked, so a
    reader that fails midway can say from which seq the log could not be read."""

    __slots__ = ("digest", "next_seq")

    def __init__(self, after: int, digest: bytes) -> None:
        self.next_seq = after + 1
        self.digest = digest

    def follow(self, rows: Iterable[tuple[int, int, str | None, bytes, bytes | None]]) -> None:
        """Walk `rows` (seq, at, ref, body, stored digest); `ChainBroken` at the first seq
        that is missing or whose stored digest is not the one the chain gives."""
        expected, digest = self.next_seq, self.digest
        try:
            for seq, at, ref, body, stored in rows:
                if seq != expected:
                    raise ChainBroken(expected, f"the event is missing (the next one is seq {seq})")
                following = link(digest, seq, at, ref, body)
                if stored != following:
                    raise ChainBroken(seq, _mismatch(stored))
                digest = following
                expected += 1
        except (TypeError, AttributeError, struct.error):
            # Stored as SQLite allows but not as the store writes (a text body, say).
            raise ChainBroken(expected, "the event's fields are not of their types") from None
        finally:
            self.next_seq, self.digest = expected, digest

    def end(self, last: int) -> None:
        """The walk was to reach `last`: an event not walked up to it is missing."""
        if self.next_seq <= last:
            raise ChainBroken(self.next_seq, f"the event is missing (the log holds up to {last})")


def _mismatch(stored: bytes | None) -> str:
    if stored is None:
        return "the event has no digest"
    return (
        "the event's digest does not follow from the events before it "
        "(the event or its digest was changed)"
    )
