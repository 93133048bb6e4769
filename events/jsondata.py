"""JSON data as the API serves it (dicts, lists, strings, numbers, booleans, None)."""

from __future__ import annotations

from typing import Any, Final

import msgspec

_ENCODER: Final = msgspec.json.Encoder()
_DECODER: Final = msgspec.json.Decoder()


def clone(value: Any) -> Any:
    """A deep copy of JSON data: several times faster than `copy.deepcopy`, which a pod
    template meets once per pod created."""
    return _DECODER.decode(_ENCODER.encode(value))
