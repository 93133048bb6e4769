"""The event schema: every event round-trips through the log encoding; garbage is refused."""

from __future__ import annotations

import msgspec
import pytest

from events.intents import Bind, Create, Delete, Patch
from events.objects import (
    JobSet,
    OwnerRef,
    PersistentVolumeClaim,
    Pod,
    Taint,
    Workload,
)
from events.schema import (
    Decided,
    Event,
    Observed,
    Outcome,
    Resynced,
    Tick,
    decode_event,
    encode_event,
    event_ref,
)
from tests.events.builders import (
    job_owner,
    make_job,
    make_node,
    make_pod,
    make_podgroup,
)

FULL_POD = Pod(
    name="p",
    namespace="ns",
    uid="u",
    rv="12",
    generation=2,
    created=1_700_000_000_000,
    deletion_ts=1_700_000_100_000,
    labels={"a": "b"},
    annotations={"x": "y"},
    owners=(OwnerRef("Job", "j", "uj", True), OwnerRef("ConfigMap", "cm", "uc")),
    finalizers=("f/1",),
    node_name="n1",
    scheduler_name="kbatchd",
    pod_group="pg",
    priority=-5,
    requests={"cpu": 1500, "memory": 1 << 40, "nvidia.com/gpu": 8},
    scheduling_gates=("kbatchd.dev/admission",),
    phase="Failed",
    conditions={"Ready": "False"},
    restart_count=3,
    exit_codes={"main": 137, "side": 0},
    grace_seconds=0,
)
TAINTED_NODE = msgspec.structs.replace(
    make_node("n1", unschedulable=True),
    taints=(Taint("gpu", "NoSchedule", "present"), Taint("k", "NoExecute")),
)

EVENTS: list[Event] = [
    Observed(at=1, cluster="c1", change="ADDED", obj=FULL_POD),
    Observed(at=2, cluster="c1", change="MODIFIED", obj=make_pod("p", owner=job_owner("j"))),
    Observed(at=3, cluster="c2", change="DELETED", obj=TAINTED_NODE),
    Observed(at=4, cluster="c1", change="ADDED", obj=make_job("j")),
    Observed(
        at=5,
        cluster="c1",
        change="ADDED",
        obj=JobSet(name="js", namespace="ns", spec={"replicatedJobs": [{"name": "w"}]}),
    ),
    Observed(
        at=6,
        cluster="c1",
        change="ADDED",
        obj=Workload(name="w", namespace="ns", status={"admission": None, "n": 1.5}),
    ),
    Observed(at=7, cluster="c1", change="ADDED", obj=make_podgroup("pg")),
    Observed(
        at=8, cluster="c1", change="ADDED", obj=PersistentVolumeClaim(name="d", namespace="n")
    ),
    Resynced(at=9, cluster="c1", kind="Pod", resource_version="100"),
    Resynced(at=10, cluster="c2", kind="Node", resource_version="7", reason="relisted"),
    Tick(at=11),
    Decided(at=12, reconciler="gang", key="Job/c1/ns/j", reason="waiting for capacity"),
    Decided(
        at=13,
        reconciler="gang",
        key="Job/c1/ns/j",
        reason="admit",
        intents=(
            Create("c1", "Pod", "ns", "p-0", body={"metadata": {"name": "p-0"}, "n": [1, 2]}),
            Patch("c1", "Job", "ns", "j", patch={"spec": {"suspend": False}}, precondition_rv="7"),
            Patch(
                "c1",
                "Pod",
                "ns",
                "p",
                patch=[{"op": "remove", "path": "/spec/schedulingGates/0"}],
                patch_type="json",
                subresource="",
            ),
            Patch("c1", "Job", "ns", "j", patch={"status": {}}, subresource="status"),
            Delete("c1", "Pod", "ns", "p-1", precondition_uid="u-1", grace_seconds=0),
            Delete("c1", "Job", "ns", "j", propagation="Foreground"),
            Bind("c1", "Pod", "ns", "p-2", node="n1", uid="u-2"),
        ),
    ),
    Outcome(at=14, decision=13, index=0, ok=True, resource_version="55"),
    Outcome(at=15, decision=13, index=1, ok=False, code=409, message="conflict"),
]


@pytest.mark.parametrize("event", EVENTS, ids=[f"{type(e).__name__}-{e.at}" for e in EVENTS])
def test_round_trip(event: Event) -> None:
    body = encode_event(event)
    assert isinstance(body, bytes)
    decoded = decode_event(body)
    assert type(decoded) is type(event)
    assert decoded == event
    assert encode_event(decoded) == body


def test_intent_refs() -> None:
    decided = EVENTS[12]
    assert isinstance(decided, Decided)
    assert [intent.ref for intent in decided.intents[:2]] == [
        "Pod/c1/ns/p-0",
        "Job/c1/ns/j",
    ]


def _msgpack(value: object) -> bytes:
    return msgspec.msgpack.encode(value)


@pytest.mark.parametrize(
    "body",
    [
        pytest.param(b"", id="empty"),
        pytest.param(b"\xc1", id="reserved-byte"),
        pytest.param(b"\x93\xa4tick", id="truncated"),
        pytest.param(_msgpack(["nope", 1]), id="unknown-tag"),
        pytest.param(_msgpack(["tick"]), id="missing-at"),
        pytest.param(_msgpack(["tick", "soon"]), id="at-not-int"),
        pytest.param(_msgpack({"t": "tick", "at": 1}), id="map-not-array"),
        pytest.param(_msgpack(["observed", 1, "c1", "CHANGED", ["Pod"]]), id="bad-change"),
        pytest.param(_msgpack(["observed", 1, "c1", "ADDED", ["Deployment"]]), id="bad-kind"),
        pytest.param(
            _msgpack(["decided", 1, "r", "k", "x", [["explode", "c", "K", "n", "x"]]]),
            id="bad-intent",
        ),
        pytest.param(_msgpack(["resynced", 1, "c1", "Pod", "1", "guessed"]), id="bad-reason"),
        pytest.param(_msgpack(42), id="scalar"),
    ],
)
def test_decode_garbage_raises_msgspec_errors(body: bytes) -> None:
    with pytest.raises(msgspec.DecodeError):  # ValidationError is a DecodeError
        decode_event(body)


def test_old_event_without_appended_defaults_still_decodes() -> None:
    # Fields are only ever appended with defaults: an Outcome written before `code`,
    # `message` and `resource_version` existed must still decode.
    assert decode_event(_msgpack(["outcome", 5, 3, 0, True])) == Outcome(
        at=5, decision=3, index=0, ok=True
    )


@pytest.mark.parametrize(
    ("event", "ref"),
    [
        pytest.param(EVENTS[0], "Pod/c1/ns/p", id="pod"),
        pytest.param(EVENTS[2], "Node/c2//n1", id="node"),
        pytest.param(EVENTS[3], "Job/c1/ns/j", id="job"),
        pytest.param(EVENTS[7], "PersistentVolumeClaim/c1/n/d", id="pvc"),
        pytest.param(EVENTS[11], "Job/c1/ns/j", id="decided"),
        pytest.param(EVENTS[8], None, id="resynced"),
        pytest.param(EVENTS[10], None, id="tick"),
        pytest.param(EVENTS[13], None, id="outcome"),
    ],
)
def test_event_ref(event: Event, ref: str | None) -> None:
    assert event_ref(event) == ref


@pytest.mark.parametrize(
    ("event", "kind", "uid", "namespace", "name", "rv", "ref"),
    [
        pytest.param(EVENTS[0], "Pod", "u", "ns", "p", "12", "Pod/c1/ns/p", id="pod"),
        pytest.param(EVENTS[2], "Node", "uid-n1", "", "n1", "1", "Node/c2//n1", id="node"),
        pytest.param(
            EVENTS[4], "JobSet", "", "ns", "js", "", "JobSet/c1/ns/js", id="jobset-defaults"
        ),
        pytest.param(
            EVENTS[6], "PodGroup", "uid-pg-pg", "ns", "pg", "1", "PodGroup/c1/ns/pg", id="podgroup"
        ),
    ],
)
def test_observed_properties(
    event: Observed, kind: str, uid: str, namespace: str, name: str, rv: str, ref: str
) -> None:
    assert (
        event.kind,
        event.uid,
        event.namespace,
        event.name,
        event.resource_version,
        event.ref,
    ) == (kind, uid, namespace, name, rv, ref)
