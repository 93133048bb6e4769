"""Properties of decoding whatever a watch may carry: malformed JSON, JSON of the wrong
shape, realistic objects with one field changed or removed, and huge ones.

The promise: `decode_object` returns the kind's slim object, one the log can store, or raises
`ObjectError` naming the kind, in one line; `decode_watch_line` returns the line's type and
pod, the same pod `decode_object` makes of its object, or None (the caller then decodes it the
general way); nothing else escapes either.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import example, given, settings
from hypothesis import strategies as st

from events.objects import KINDS, ObjectError, decode_object, decode_watch_line
from events.schema import Observed, decode_event, encode_event
from tests.events.builders import node_json, pod_json
from tests.strategies import damaged_json

# Every field name the wire structs read, camelCase as the API spells them, and some they
# don't: inserted at random places, they reach the typed fields with values of the wrong type.
FIELDS = (
    "metadata", "spec", "status", "name", "namespace", "uid", "resourceVersion", "generation",
    "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels",
    "annotations", "ownerReferences", "controller", "finalizers", "containers",
    "initContainers", "resources", "requests", "limits", "restartPolicy", "overhead",
    "schedulingGates", "schedulingGroup", "podGroupName", "terminationGracePeriodSeconds",
    "nodeSelector", "tolerations", "affinity", "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", "matchExpressions",
    "matchFields", "values", "operator", "key", "effect", "value", "nodeName", "schedulerName",
    "priority", "phase", "conditions", "type", "lastTransitionTime", "containerStatuses",
    "initContainerStatuses", "restartCount", "state", "lastState", "terminated", "exitCode",
    "finishedAt", "nominatedNodeName", "unschedulable", "taints", "allocatable",
    "globalDefault", "preemptionPolicy", "cpu", "memory", "nvidia.com/gpu", "kind",
)  # fmt: skip

# JSON scalars, with what is most often wrong in them: huge and negative numbers, quantity
# and time look-alikes.
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    st.sampled_from(
        ["1", "500m", "8Gi", "1e3", "-1", "1.2.3", "8Qi", "1e999999", "9223372036854775807",
         "2025-01-02T03:04:05Z", "2025-13-01T00:00:00Z", "0001-01-01T00:00:00", "yesterday",
         "True", "False", "Ready", "Always", "Succeeded", ""]
    ),
)  # fmt: skip
JSON = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)
KIND_NAMES = sorted(KINDS)


def _base(kind: str) -> dict[str, Any]:
    if kind == "Pod":
        return pod_json()
    if kind == "Node":
        return node_json()
    metadata = pod_json()["metadata"]
    if kind == "PriorityClass":
        return {"metadata": metadata, "value": 1000, "globalDefault": False}
    return {"metadata": metadata, "spec": {"parallelism": 2}, "status": {"active": 1}}


def damaged(kind: str) -> st.SearchStrategy[Any]:
    """A realistic object of `kind` with a few of its places replaced by random JSON, removed,
    or given a known field of a random value; at times replaced whole (an array, a string,
    null, ...)."""
    return damaged_json(_base(kind), JSON, FIELDS)


def huge(kind: str, containers: int, annotation_chars: int) -> dict[str, Any]:
    """An object far bigger than any real one: thousands of containers, each with requests,
    and kept and dropped annotations of many kilobytes."""
    doc = _base(kind)
    doc["metadata"]["annotations"] = {
        "kbatchd.dev/blob": "x" * annotation_chars,
        "example.com/blob": "y" * annotation_chars,
    }
    doc.setdefault("spec", {})["containers"] = [
        {"name": f"c{i}", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
        for i in range(containers)
    ]
    return doc


def _raw(kind: str) -> st.SearchStrategy[bytes]:
    encoded = st.one_of(damaged(kind), JSON).map(msgspec.json.encode)
    # Cut short, or not JSON at all.
    truncated = st.builds(lambda doc, cut: doc[:cut], encoded, st.integers(0, 400))
    return st.one_of(encoded, encoded, truncated, st.binary(max_size=64))


def assert_decodes_or_names_the_problem(kind: str, raw: bytes) -> None:
    try:
        obj = decode_object(kind, raw)
    except ObjectError as exc:
        message = str(exc)
        assert message.startswith(f"{kind}: "), message
        assert "\n" not in message, message
        return
    assert type(obj) is KINDS[kind]
    # What decodes is what the log can store, and read back as it was.
    event = Observed(at=0, cluster="c1", change="ADDED", obj=obj)
    assert decode_event(encode_event(event)) == event


KIND_AND_RAW = st.sampled_from(KIND_NAMES).flatmap(
    lambda kind: st.tuples(st.just(kind), _raw(kind))
)
DEEP = b"[" * 5000 + b"]" * 5000


@settings(max_examples=300, deadline=None)
@given(KIND_AND_RAW)
# Integers beyond the API's widths decoded, and then could not be logged (OverflowError).
@example(("Pod", b'{"metadata": {"generation": 100000000000000000000000000000}}'))
@example(("Job", b'{"spec": {"parallelism": 100000000000000000000000000000}}'))
@example(("Pod", b'{"status": {"containerStatuses": [{"restartCount": 9223372036854775807}]}}'))
@example(("PriorityClass", b'{"value": -100000000000000000000000}'))
# Requests each in range whose sum is not.
@example(
    (
        "Pod",
        msgspec.json.encode(
            {"spec": {"containers": [{"resources": {"requests": {"memory": str(2**63 - 1)}}}] * 3}}
        ),
    )
)
# Nesting deeper than msgspec's recursion (even in skipped fields) raised RecursionError.
@example(("Node", b'{"x": ' + DEEP + b"}"))
@example(("JobSet", b'{"spec": {"x": ' + DEEP + b"}}"))
def test_any_input_decodes_to_a_storable_object_or_one_object_error(
    kind_and_raw: tuple[str, bytes],
) -> None:
    assert_decodes_or_names_the_problem(*kind_and_raw)


@settings(max_examples=6, deadline=None)
@given(
    st.sampled_from(["Pod", "Node", "Job"]),
    st.integers(1, 3000),
    st.sampled_from([0, 1024, 1025, 300_000]),
)
def test_huge_objects_decode_with_long_annotations_dropped(
    kind: str, containers: int, annotation_chars: int
) -> None:
    raw = msgspec.json.encode(huge(kind, containers, annotation_chars))
    assert_decodes_or_names_the_problem(kind, raw)
    dropped: list[str] = []
    obj = decode_object(kind, raw, dropped)
    assert len(msgspec.msgpack.encode(obj)) < 200_000
    assert dropped == (["kbatchd.dev/blob"] if annotation_chars > 1024 else [])


def _line(type_: Any, obj: Any) -> bytes:
    return msgspec.json.encode({"type": type_, "object": obj})


@settings(max_examples=200, deadline=None)
@given(
    st.one_of(
        st.builds(
            _line, st.sampled_from(["ADDED", "MODIFIED", "DELETED", "BOOKMARK"]), damaged("Pod")
        ),
        st.builds(_line, JSON, JSON),
        damaged("Pod").map(msgspec.json.encode),
        st.binary(max_size=64),
    )
)
@example(line=_line("ADDED", {"spec": {"priority": 2**40}}))
@example(line=b'{"type": "ADDED", "object": {"x": ' + DEEP + b"}}")
def test_a_watch_line_decodes_as_its_object_would_or_is_left_to_the_general_way(
    line: bytes,
) -> None:
    decoded = decode_watch_line("Pod", line)
    if decoded is None:
        return
    type_, pod = decoded
    envelope = msgspec.json.decode(line)
    assert type_ == envelope["type"]
    assert pod == decode_object("Pod", msgspec.json.encode(envelope["object"]))
