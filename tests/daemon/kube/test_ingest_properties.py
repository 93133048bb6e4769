"""Properties of the informer on whatever a list or a watch may carry.

One malformed object is logged and skipped, and the watch goes on; a line or a page that is
no answer at all raises what `Informer.run` retries (`INGEST_ERRORS`, or `Expired`); nothing
else escapes, and what is handed on to the log can be stored.
"""

from __future__ import annotations

from typing import Any

import anyio
import msgspec
import pytest
import structlog.testing
from hypothesis import example, given, settings
from hypothesis import strategies as st

from daemon.kube.api import Response
from daemon.kube.ingest import INGEST_ERRORS, Expired, Informer
from daemon.kube.resources import RESOURCES
from events.objects import KINDS
from events.schema import Event, Observed, encode_event
from tests.daemon.kube.test_ingest import ScriptedApi
from tests.events.test_object_properties import DEEP, JSON, damaged

# What `Informer.run` turns into a retry; anything else would end the informer.
RETRIED = (*INGEST_ERRORS, Expired)
CHANGES = ("ADDED", "MODIFIED", "DELETED")
KIND_NAMES = sorted(set(KINDS) & set(RESOURCES))


class _Collected:
    def __init__(self) -> None:
        self.events: list[Event] = []

    async def send(self, events: list[Event]) -> None:
        self.events.extend(events)


def _informer(kind: str, api: Any = None) -> tuple[Informer, _Collected]:
    sink = _Collected()
    return Informer(api or ScriptedApi([]), RESOURCES[kind], sink.send, {}), sink


def _good(kind: str, name: str) -> bytes:
    obj = {"metadata": {"name": name, "namespace": "ns", "uid": name, "resourceVersion": "7"}}
    return msgspec.json.encode({"type": "ADDED", "object": obj})


@st.composite
def lines(draw: st.DrawFn, kind: str) -> bytes:
    """A watch line: an envelope around a damaged object, an envelope of the wrong shape, an
    ERROR or BOOKMARK with a random object, a line cut short, or bytes."""
    envelope = msgspec.json.encode(
        {"type": draw(st.sampled_from(CHANGES)), "object": draw(damaged(kind))}
    )
    return draw(
        st.one_of(
            st.just(envelope),
            st.builds(lambda cut: envelope[:cut], st.integers(0, len(envelope) - 1)),
            st.builds(
                lambda t, o: msgspec.json.encode({"type": t, "object": o}),
                st.sampled_from([*CHANGES, "BOOKMARK", "ERROR", "SURPRISE"]),
                JSON,
            ),
            JSON.map(msgspec.json.encode),
            st.binary(max_size=48),
        )
    )


KIND_AND_LINE = st.sampled_from(KIND_NAMES).flatmap(
    lambda kind: st.tuples(st.just(kind), lines(kind))
)


@settings(max_examples=250, deadline=None)
@given(KIND_AND_LINE)
# Nesting deeper than msgspec's recursion: a RecursionError ended the informer.
@example(("Pod", b'{"type": "ADDED", "object": {"x": ' + DEEP + b"}}"))
@example(("Job", b'{"type": "MODIFIED", "object": {"spec": {"x": ' + DEEP + b"}}}"))
@example(("Node", b'{"type": "ADDED", "object": ' + DEEP + b"}"))
def test_a_watch_line_is_logged_skipped_or_retried_and_never_ends_the_watch(
    kind_and_line: tuple[str, bytes],
) -> None:
    kind, line = kind_and_line
    informer, _ = _informer(kind)
    with structlog.testing.capture_logs():
        try:
            observed = informer._observed(kind, line)
        except RETRIED:
            return
    if observed is not None:
        change, obj = observed
        assert change in CHANGES
        encode_event(Observed(at=0, cluster="c", change=change, obj=obj))
    # The informer still decodes the next line.
    assert informer._observed(kind, _good(kind, "next")) is not None


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(KIND_NAMES).flatmap(lambda kind: st.tuples(st.just(kind), damaged(kind))))
def test_a_malformed_object_among_good_ones_is_one_error_and_the_rest_reach_the_log(
    kind_and_doc: tuple[str, Any],
) -> None:
    kind, doc = kind_and_doc
    bad = msgspec.json.encode({"type": "MODIFIED", "object": doc})
    api = ScriptedApi([[_good(kind, "before"), bad, _good(kind, "after")]])
    informer, sink = _informer(kind, api)
    with structlog.testing.capture_logs() as logs:
        anyio.run(informer.watch)
    names = [e.obj.name for e in sink.events if isinstance(e, Observed)]
    errors = [line for line in logs if line["log_level"] == "error"]
    assert names[0] == "before"
    assert names[-1] == "after"
    if len(names) == 2:  # the damaged one skipped: said once, with what is wrong
        assert [e["event"] for e in errors] == ["undecodable object skipped"]
        assert errors[0]["error"].startswith(f"{kind}: ")
    else:
        assert errors == []
    for event in sink.events:
        encode_event(event)


class _Pages:
    """A list request answered with one page."""

    cluster = "c"

    def __init__(self, body: bytes) -> None:
        self.body = body

    async def request(self, method: str, path: str, **_: Any) -> Response:
        return Response(200, self.body)


@pytest.mark.parametrize(
    ("body", "listed"),
    [
        pytest.param(
            b'{"metadata": {"resourceVersion": "9"}, "items": [{"metadata": {"name": "a"}},'
            b' {"metadata": {"name": 5}}, {"metadata": {"name": "b"}}]}',
            ["a", "b"],
            id="a-malformed-item-is-skipped",
        ),
        # Nesting deeper than msgspec's recursion: a RecursionError ended the informer.
        pytest.param(b'{"items": [' + DEEP + b"]}", None, id="nested-too-deeply"),
        pytest.param(b'{"items": [{"metadata": ', None, id="cut-short"),
    ],
)
def test_a_list_page_lists_its_good_items_or_is_retried(
    body: bytes, listed: list[str] | None
) -> None:
    informer, sink = _informer("Pod", _Pages(body))
    with structlog.testing.capture_logs():
        if listed is None:
            with pytest.raises(msgspec.DecodeError):
                anyio.run(informer.relist)
            return
        anyio.run(informer.relist)
    assert [e.obj.name for e in sink.events if isinstance(e, Observed)] == listed
