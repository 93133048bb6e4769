"""Fault injection for the simulated API server.

A spec string such as ``drop-watch=0.01,expire-history=30s,error-429=0.05,error-500=0.02,
error-409=0.01,latency=5ms`` or the equivalent `Faults` object, changeable at runtime:

- ``drop-watch=P``: after each batch of events a watch stream delivers, it is closed with
  probability P (the client must re-watch from its last resourceVersion).
- ``stall-watch=P``: after each batch of events a watch stream goes silent with probability P:
  open, but sending nothing more, not even bookmarks, until the client gives up on it (a
  half-open connection, a wedged proxy). Only a client's inactivity deadline gets it going.
- ``expire-history=D``: every D (simulated time) the watch history is forgotten, as an etcd
  compaction does; watches and list continuations from older versions then get 410.
- ``error-429=P``, ``error-500=P``: an API request fails with 429 TooManyRequests (with
  ``Retry-After``) or 500 InternalError with probability P, before it has any effect.
- ``retry-after=N``: the whole seconds a 429 tells the client to wait (default 1, what
  kube-apiserver's priority and fairness answers).
- ``error-409=P``: a write (POST/PUT/PATCH/DELETE) fails with 409 Conflict with probability P.
- ``drop-request=P``: an API request other than a watch gets no answer with probability P: its
  connection is cut, half the time before the request has any effect and half the time after
  (a load balancer's timeout, a server restart), so the client cannot know which.
- ``latency=D``: every API request is delayed by D (real time).
- ``refuse-delete=LABEL``: a delete of an object carrying label key LABEL fails with 422, as
  an admission policy denying it answers (a ValidatingAdmissionPolicy: ``<kind> "<name>" is
  forbidden: ...``).

All random choices come from one `random.Random(seed)`: the same seed and the same sequence of
requests give the same faults.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Final, Literal

from daemon.sim.errors import (
    STALE,
    ApiError,
    conflict,
    internal_error,
    qualified,
    too_many_requests,
)
from daemon.sim.resources import Resource
from daemon.sim.store import Store

_DURATION: Final = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_UNITS: Final = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_RATES: Final = ("drop-watch", "stall-watch", "error-429", "error-500", "error-409", "drop-request")
_DURATIONS: Final = ("expire-history", "latency")
WRITE_METHODS: Final = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def parse_duration(key: str, text: str) -> float:
    """Seconds in a duration such as ``5ms``, ``30s``, ``2m``; ValueError names key and value."""
    match = _DURATION.match(text.strip())
    if match is None:
        raise ValueError(f"faults: {key}={text!r} is not a duration (e.g. 5ms, 30s, 2m)")
    return float(match[1]) * _UNITS[match[2]]


def _rate(key: str, text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"faults: {key}={text!r} is not a probability between 0 and 1") from None
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"faults: {key}={text!r} is not a probability between 0 and 1")
    return value


def _whole_seconds(key: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise ValueError(f"faults: {key}={text!r} is not a whole number of seconds")
    return value


@dataclass
class Faults:
    drop_watch: float = 0.0
    stall_watch: float = 0.0
    expire_history: float | None = None  # seconds of simulated time between compactions
    error_429: float = 0.0
    error_500: float = 0.0
    error_409: float = 0.0
    drop_request: float = 0.0
    latency: float = 0.0
    retry_after: int = 1
    refuse_delete: str = ""  # a label key
    seed: int | None = None
    rng: random.Random = field(init=False, repr=False)
    # How many times each fault struck (by its spec key), for a fault campaign's report.
    hits: Counter[str] = field(default_factory=Counter, init=False, repr=False)
    # The store of the running cluster, for the actions that happen "now".
    store: Store | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    @classmethod
    def parse(cls, spec: str | None, seed: int | None = None) -> Faults:
        faults = cls(seed=seed)
        for part in (spec or "").split(","):
            part = part.strip()
            if not part:
                continue
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep:
                raise ValueError(f"faults: {part!r} is not key=value")
            if key in _RATES:
                setattr(faults, key.replace("-", "_"), _rate(key, value))
            elif key in _DURATIONS:
                setattr(faults, key.replace("-", "_"), parse_duration(key, value))
            elif key == "retry-after":
                faults.retry_after = _whole_seconds(key, value)
            elif key == "refuse-delete":
                faults.refuse_delete = value.strip()
            else:
                known = ", ".join((*_RATES, *_DURATIONS, "retry-after", "refuse-delete"))
                raise ValueError(f"faults: unknown key {key!r} (value {value!r}); known: {known}")
        return faults

    def set(
        self,
        *,
        drop_watch: float | None = None,
        stall_watch: float | None = None,
        error_429: float | None = None,
        error_500: float | None = None,
        error_409: float | None = None,
        drop_request: float | None = None,
        latency: float | None = None,
        expire_history: float | None = None,
    ) -> None:
        """Change rates at runtime (None leaves a rate as it is)."""
        for name, value in (
            ("drop-watch", drop_watch),
            ("stall-watch", stall_watch),
            ("error-429", error_429),
            ("error-500", error_500),
            ("error-409", error_409),
            ("drop-request", drop_request),
        ):
            if value is not None:
                setattr(self, name.replace("-", "_"), _rate(name, str(value)))
        if latency is not None:
            self.latency = latency
        if expire_history is not None:
            self.expire_history = expire_history

    def clear(self) -> None:
        self.drop_watch = self.stall_watch = self.error_429 = self.error_500 = self.error_409 = 0.0
        self.drop_request = self.latency = 0.0
        self.expire_history = None
        self.refuse_delete = ""

    def attach(self, store: Store) -> None:
        self.store = store

    def drop_watches(self) -> int:
        """Close every open watch stream now; returns how many were open."""
        dropped = self.store.drop_watches() if self.store is not None else 0
        self.hits["drop-watch"] += dropped
        return dropped

    def expire_history_now(self) -> None:
        """Forget the watch history now: older resourceVersions get 410 Expired."""
        if self.store is not None:
            self.store.expire_history()
            self.hits["expire-history"] += 1

    def _hit(self, rate: float, key: str) -> bool:
        # Draw only when the rate is on, so enabling one fault does not shift the others.
        if rate > 0.0 and self.rng.random() < rate:
            self.hits[key] += 1
            return True
        return False

    def request_error(
        self, method: str, resource: Resource, name: str, namespace: str = ""
    ) -> ApiError | None:
        """The injected failure for one API request, if any."""
        if method == "DELETE" and self.refuse_delete and name and self.store is not None:
            stored = self.store.get(resource, namespace, name)
            labels = (stored.obj.get("metadata") or {}).get("labels") or {} if stored else {}
            if self.refuse_delete in labels:
                what = f'{qualified(resource.plural, resource.group)} "{name}"'
                why = f"injected fault: refuse-delete={self.refuse_delete}"
                return ApiError(422, "Invalid", f"{what} is forbidden: {why}")
        if self._hit(self.error_429, "error-429"):
            return too_many_requests(self.retry_after)
        if self._hit(self.error_500, "error-500"):
            return internal_error("injected fault: etcdserver: request timed out")
        if method in WRITE_METHODS and self._hit(self.error_409, "error-409"):
            return conflict(resource.plural, resource.group, name or resource.plural, STALE)
        return None

    def request_drop(self) -> Literal["before", "after"] | None:
        """Whether to cut one request's connection, and whether before or after its effect."""
        if not self._hit(self.drop_request, "drop-request"):
            return None
        return "before" if self.rng.random() < 0.5 else "after"

    def drop_watch_now(self) -> bool:
        return self._hit(self.drop_watch, "drop-watch")

    def stall_watch_now(self) -> bool:
        return self._hit(self.stall_watch, "stall-watch")
