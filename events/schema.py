"""The events of the log: a tagged union of msgspec structs, encoded once as msgpack.

Every event carries `at`, the Unix time in milliseconds at which its producer saw it; the
store adds the dense `seq`. Structs are array-like (compact, fast to decode) and new fields
may only be appended with defaults, so older logs keep decoding.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from events.intents import Intent
from events.objects import SlimObject

Change = Literal["ADDED", "MODIFIED", "DELETED"]


class _Event(msgspec.Struct, frozen=True, array_like=True, gc=False, tag_field="t"):
    at: int


class Observed(_Event, frozen=True, tag="observed"):
    """An object change seen on a cluster's watch (or synthesized by a relist)."""

    cluster: str
    change: Change
    obj: SlimObject

    @property
    def kind(self) -> str:
        return type(self.obj).__name__

    @property
    def uid(self) -> str:
        return self.obj.uid

    @property
    def namespace(self) -> str:
        return self.obj.namespace

    @property
    def name(self) -> str:
        return self.obj.name

    @property
    def resource_version(self) -> str:
        return self.obj.rv

    @property
    def ref(self) -> str:
        return f"{self.kind}/{self.cluster}/{self.obj.namespace}/{self.obj.name}"


class Resynced(_Event, frozen=True, tag="resynced"):
    """A list of one kind on one cluster finished; everything before it is the full set."""

    cluster: str
    kind: str
    resource_version: str
    reason: Literal["listed", "relisted"] = "listed"
    # The ``group/version`` the kind was listed in; empty when the cluster does not serve it.
    # Decisions that write a kind whose versions differ (Workload, PodGroup) write this one.
    api_version: str = ""


class Tick(_Event, frozen=True, tag="tick"):
    """The clock moved. Appended on a timer so timeouts and back-off replay exactly."""


class Decided(_Event, frozen=True, tag="decided"):
    """A reconciler's decision about one key, logged before any of its intents is acted on."""

    reconciler: str
    key: str
    reason: str
    intents: tuple[Intent, ...] = ()


class Outcome(_Event, frozen=True, tag="outcome"):
    """What happened when the actuator carried out intent `index` of decision `decision`."""

    decision: int
    index: int
    ok: bool
    # The HTTP status of the final answer; 0 when none came (every attempt failed to connect
    # or timed out, or no such cluster is configured).
    code: int = 0
    message: str = ""
    resource_version: str = ""
    uid: str = ""
    # No answer is known: the daemon stopped, or lost its lease, while the call was under way.
    # Not a failure: the key is decided again from what the cluster shows.
    unconfirmed: bool = False


class Started(_Event, frozen=True, tag="started"):
    """A daemon opened the log to write to it: which kbatchd, the digest of its decision
    rules (the source decisions depend on, `daemon.service.provenance`), and the settings its
    reconcilers and topology run with. The decisions after it, up to the next one, were made
    by these; `kbatchd replay --verify` decides with them."""

    version: str
    rules: str
    settings: dict[str, Any]


Event = Observed | Resynced | Tick | Decided | Outcome | Started

# The ref of every `Started` event: a log's daemon starts are found without decoding it all.
STARTED_REF: Final = "Started"

_ENCODER: Final = msgspec.msgpack.Encoder()
_DECODER: Final = msgspec.msgpack.Decoder(Event)


# What decoding a stored body raises when the body is corrupt (TypeError: not a blob at all).
DECODE_ERRORS: Final = (msgspec.DecodeError, TypeError)


def encode_event(event: Event) -> bytes:
    return _ENCODER.encode(event)


def decode_event(body: bytes) -> Event:
    """Decode one stored event; raises `msgspec.DecodeError`/`ValidationError` if corrupt."""
    return _DECODER.decode(body)


def event_ref(event: Event) -> str | None:
    """The object an event is about (``Kind/cluster/namespace/name``), if any; stored beside
    the body so that one object's history can be found without decoding the whole log."""
    if type(event) is Observed:  # every append computes this: the cheap path first
        obj = event.obj
        return f"{type(obj).__name__}/{event.cluster}/{obj.namespace}/{obj.name}"
    if isinstance(event, Decided):
        return event.key
    if isinstance(event, Started):
        return STARTED_REF
    return None
