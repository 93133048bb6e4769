"""Kubernetes resource quantities as integers in canonical units.

CPU is counted in millicores and everything else in base units (bytes, devices, pods),
rounded up as the API server does, so that capacity arithmetic is exact integer arithmetic.
"""

from __future__ import annotations

import math
import re
from decimal import ROUND_CEILING, Decimal
from functools import lru_cache
from typing import Final

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
}
_QUANTITY: Final = re.compile(
    r"^(?P<num>[+-]?(?:\d+\.?\d*|\.\d+))"
    r"(?:(?P<bin>Ki|Mi|Gi|Ti|Pi|Ei)|(?P<exp>[eE][+-]?\d+)|(?P<dec>[numkMGTPE]?))$"
)

MILLI_RESOURCES: Final = frozenset({"cpu"})
# Kubernetes keeps quantities in int64 (and the log encodes them as msgpack integers).
MAX_UNITS: Final = 2**63 - 1


class QuantityError(ValueError):
    """A string that is not a Kubernetes quantity."""


def parse_quantity(text: str | int | float) -> Decimal:
    """The exact value of a quantity string such as ``"500m"``, ``"1Ti"`` or ``"1e3"``."""
    if isinstance(text, bool):
        raise QuantityError(f"invalid quantity {text!r}")
    if isinstance(text, int | float):
        if isinstance(text, float) and not math.isfinite(text):
            raise QuantityError(f"invalid quantity {text!r}")
        return Decimal(str(text))
    match = _QUANTITY.match(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise QuantityError(f"invalid quantity {text!r}")
    try:
        number = Decimal(match["num"])
        if match["bin"]:
            return number * _BINARY[match["bin"]]
        if match["exp"]:
            return number.scaleb(int(match["exp"][1:]))
        return number * _DECIMAL[match["dec"] or ""]
    except ArithmeticError as exc:  # an exponent beyond what Decimal can hold
        raise QuantityError(f"invalid quantity {text!r}") from exc


# Clusters repeat a handful of quantity strings ("1", "500m", "8Gi") across every pod; decoding
# a watch stream parses each many times over.
@lru_cache(maxsize=4096)
def to_units(resource: str, text: str | int | float) -> int:
    """The quantity in canonical integer units for `resource` (millicores for CPU)."""
    try:
        value = parse_quantity(text)
        if resource in MILLI_RESOURCES:
            value = value * 1000
        units = value.to_integral_value(rounding=ROUND_CEILING)
    except (QuantityError, ArithmeticError) as exc:
        raise QuantityError(f"invalid quantity {text!r} for {resource}") from exc
    if value < 0:
        raise QuantityError(f"negative quantity {text!r} for {resource}")
    if units > MAX_UNITS:
        raise QuantityError(f"quantity {text!r} for {resource} is out of range (over 2^63-1)")
    return int(units)


def format_units(resource: str, units: int) -> str:
    """A quantity string for canonical units, the inverse of `to_units` for display."""
    if resource in MILLI_RESOURCES:
        return f"{units // 1000}" if units % 1000 == 0 else f"{units}m"
    for suffix in ("Ei", "Pi", "Ti", "Gi", "Mi", "Ki"):
        scale = _BINARY[suffix]
        if units >= scale and units % scale == 0 and resource == "memory":
            return f"{units // scale}{suffix}"
    return str(units)


def resource_map(raw: dict[str, str | int | float] | None) -> dict[str, int]:
    """A `requests`/`allocatable` mapping converted to canonical units."""
    if not raw:
        return {}
    return {name: to_units(name, value) for name, value in raw.items()}


def add_into(total: dict[str, int], other: dict[str, int], sign: int = 1) -> None:
    """Add (or with ``sign=-1`` subtract) `other` into `total`, dropping zero entries."""
    for name, value in other.items():
        updated = total.get(name, 0) + sign * value
        if updated:
            total[name] = updated
        else:
            total.pop(name, None)
