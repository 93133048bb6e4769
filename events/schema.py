"""The events of the log: a tagged union of msgspec structs, encoded once as msgpack.

Every event carries `at`, the Unix time in milliseconds at which its producer saw it; the
store adds the dense `seq`. Structs are array-like (compact, fast to decode) and new fields
may only be appended with defaults, so older logs keep decoding.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Literal

import msgspec

from events.intents import Intent
from events.objects import (
    Job,
    JobSet,
    Node,
    OwnerRef,
    PersistentVolumeClaim,
    PodGroup,
    Service,
    SlimObject,
    Workload,
    controller_of,
)

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


# ---------------------------------------------------------------------------------------------
# Decoding a pod change only as far as a bulk fold reads it


class PodHead(msgspec.Struct, frozen=True, array_like=True, gc=False, tag_field="kind", tag="Pod"):
    """A stored `events.objects.Pod` decoded only as far as `events.fold.BulkFold` reads a
    pod version before it settles: the fields of its Job's back-off and ordinal watermark.

    Positionally `Pod`'s fields up to `finished` (array-like: the later ones are ignored, as
    msgspec ignores trailing fields by design). The fields nothing reads here are `Raw`, left
    undecoded, and so are owners and annotations, read only for a pod of a Job when it
    appears or finishes (`PodChange`). Half of a million pod changes' decoding was building
    labels, requests and conditions that a newer version replaces unread."""

    name: str = ""
    namespace: str = ""
    uid: msgspec.Raw = msgspec.Raw()
    rv: msgspec.Raw = msgspec.Raw()
    generation: int = 0
    created: int = 0
    deletion_ts: int | None = None
    labels: msgspec.Raw = msgspec.Raw()
    annotations_raw: msgspec.Raw = msgspec.Raw()
    owners_raw: msgspec.Raw = msgspec.Raw()
    finalizers: tuple[str, ...] = ()
    node_name: msgspec.Raw = msgspec.Raw()
    scheduler_name: msgspec.Raw = msgspec.Raw()
    pod_group: msgspec.Raw = msgspec.Raw()
    priority: int = 0
    requests: msgspec.Raw = msgspec.Raw()
    scheduling_gates: msgspec.Raw = msgspec.Raw()
    phase: str = "Pending"
    conditions: msgspec.Raw = msgspec.Raw()
    restart_count: int = 0
    exit_codes: msgspec.Raw = msgspec.Raw()
    grace_seconds: int = 30
    finished: int | None = None


class PodObserved(_Event, frozen=True, tag="observed"):
    """An `Observed` change as `HEAD_DECODER` decodes it: a pod to its head, any other kind
    whole (`observed` makes that one the `Observed` it is)."""

    cluster: str
    change: Change
    # Every kind of `SlimObject`, a pod as its head: one decoder for any stored event.
    obj: PodHead | Node | Job | JobSet | Workload | PodGroup | PersistentVolumeClaim | Service

    def observed(self) -> Observed:
        """This change of an object that is not a pod, as `decode_event` decodes it."""
        return Observed(self.at, self.cluster, self.change, self.obj)  # type: ignore[arg-type]


# Decodes a stored event as `decode_event` does, except that an `Observed` comes as a
# `PodObserved`. Raises as `decode_event` does on a body that is not MessagePack or whose
# decoded fields do not fit; what a pod's head leaves undecoded is checked only as MessagePack.
HEAD_DECODER: Final = msgspec.msgpack.Decoder(
    PodObserved | Resynced | Tick | Decided | Outcome | Started
)
_ANNOTATIONS: Final = msgspec.msgpack.Decoder(dict[str, str])
_OWNERS: Final = msgspec.msgpack.Decoder(tuple[OwnerRef, ...])


class PodChange(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A stored pod change as a process reading ahead of a long replay sends it
    (`events.readahead`): the fields of its head that `events.fold.BulkFold` reads, and
    the stored event, which it keeps to decode whole when the pod settles. Annotations and
    owners stay MessagePack, decoded when read (`jobs.Changed`)."""

    at: int
    cluster: str
    change: Change
    key: str  # the pods table's: ``cluster/namespace/name``
    namespace: str
    phase: str
    deletion_ts: int | None
    finalizers: tuple[str, ...]
    created: int
    grace_seconds: int
    finished: int | None
    annotations_raw: bytes
    owners_raw: bytes
    body: bytes

    @property
    def annotations(self) -> dict[str, str]:
        return _ANNOTATIONS.decode(self.annotations_raw) if self.annotations_raw else {}

    @property
    def controller(self) -> OwnerRef | None:
        return controller_of(_OWNERS.decode(self.owners_raw)) if self.owners_raw else None


class UndecodableEvent(Exception):
    """A stored event does not decode: its seq, and msgspec's reason."""

    def __init__(self, seq: int, reason: str) -> None:
        super().__init__(f"event seq {seq} does not decode: {reason}")
        self.seq = seq
        self.reason = reason


def pod_changes(first: int, bodies: Iterable[tuple[bytes]]) -> list[PodChange | bytes]:
    """Stored events `first`, `first + 1`, ... (one body to a row, as the store reads them)
    as a reading-ahead process sends them: a pod change as its `PodChange`, any other event
    as it is stored. Raises `UndecodableEvent` for the first that does not decode to its
    head."""
    decode = HEAD_DECODER.decode
    changes: list[PodChange | bytes] = []
    for seq, (body,) in enumerate(bodies, first):
        try:
            event = decode(body)
        except DECODE_ERRORS as exc:
            raise UndecodableEvent(seq, str(exc)) from exc
        if type(event) is PodObserved and type(pod := event.obj) is PodHead:
            changes.append(
                PodChange(
                    event.at,
                    event.cluster,
                    event.change,
                    f"{event.cluster}/{pod.namespace}/{pod.name}",
                    pod.namespace,
                    pod.phase,
                    pod.deletion_ts,
                    pod.finalizers,
                    pod.created,
                    pod.grace_seconds,
                    pod.finished,
                    bytes(pod.annotations_raw),
                    bytes(pod.owners_raw),
                    body,
                )
            )
        else:
            changes.append(body)
    return changes


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
