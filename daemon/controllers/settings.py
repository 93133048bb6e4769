"""The kinds of value a setting takes, shared by every section of the settings: the
controllers' own (each package's `settings.py`) and the daemon's (`daemon.service.config`)."""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

# Every duration and count has an upper bound, and that bound is what refuses TOML's `inf`
# (the lower bounds already refuse `nan` and `-inf`): an endless value would pass a lower
# bound alone and then overflow the milliseconds the reconcilers count in, or stop a timer
# for good. A week is longer than any timeout, period or back-off kbatchd has a use for.
MAX_SECONDS: Final = 7 * 24 * 3600
MAX_COUNT: Final = 2**31 - 1

# The kinds of value; a key with its own reason for a tighter bound spells it out.
Seconds = Annotated[float, msgspec.Meta(gt=0, le=MAX_SECONDS)]
SecondsOrOff = Annotated[float, msgspec.Meta(ge=0, le=MAX_SECONDS)]  # 0: never, or at once
WholeSeconds = Annotated[int, msgspec.Meta(ge=1, le=MAX_SECONDS)]
Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_COUNT)]
# A spec.managedBy value: the API's rule, a domain-prefixed path of at most 63 characters (the
# pattern is checked in `_problems`, to say so in words).
ManagedBy = Annotated[str, msgspec.Meta(min_length=1, max_length=63)]
