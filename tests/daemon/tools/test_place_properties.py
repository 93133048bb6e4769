"""Properties of `kbatchd place` on malformed requests: the shipped examples and the tests'
request with random values at their fields, fields removed or unknown ones added, JSON cut
short, and bytes.

The promise (the module's docstring): exit 0 with the result as JSON on stdout, admitted or
not; or exit 2 with one line on stderr naming what is wrong; nothing else.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.daemon.tools.test_place import EXAMPLES, request, run_cli
from tests.strategies import damaged_json

BASES = [json.loads(path.read_text()) for path in sorted(EXAMPLES.glob("*.json"))]
BASES.append(request(14, required="cloud.provider.com/topology-rack"))

# The request's field names, and values as they are written and near misses of them.
FIELDS = (
    "levels", "nodes", "podSets", "algorithm", "name", "labels", "allocatable", "used",
    "count", "requests", "required", "preferred", "unconstrained", "sliceLevel", "sliceSize",
    "group", "cpu", "memory", "nvidia.com/gpu", "pods",
)  # fmt: skip
WORDS = st.sampled_from(
    ["BestFit", "LeastFreeCapacity", "Balanced", "kubernetes.io/hostname",
     "cloud.provider.com/topology-rack", "cloud.provider.com/topology-block", "8", "1Ti",
     "500m", "-1", "lots", "1e999", "9223372036854775807", ""]
)  # fmt: skip
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
    WORDS,
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(FIELDS) | st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


def damaged_request() -> st.SearchStrategy[Any]:
    return st.sampled_from(BASES).flatmap(lambda doc: damaged_json(doc, VALUES, FIELDS))


def _text(doc: Any) -> str:
    return json.dumps(doc, ensure_ascii=False)


REQUESTS = st.one_of(
    damaged_request().map(_text),
    damaged_request().map(_text),
    damaged_request().map(_text),
    st.builds(lambda doc, cut: _text(doc)[:cut], damaged_request(), st.integers(0, 300)),
    st.text(max_size=30),
)


@settings(max_examples=200, deadline=None)
@given(REQUESTS)
@example(_text(request(10**12)))  # more pods than any cluster holds: refused, not hung
@example(_text(request(14, required="cloud.provider.com/topology-rack") | {"levels": []}))
@example('{"nodes": ' + "[" * 5000 + "]" * 5000 + "}")
def test_any_request_is_placed_or_refused_in_one_line(text: str) -> None:
    code, out, err = run_cli(["-"], stdin=text)
    if code == 0:
        assert err == ""
        assert "admitted" in json.loads(out)
        return
    assert code == 2
    assert out == ""
    assert err.startswith("kbatchd place: ")
    assert err.count("\n") == 1, err


def test_the_examples_are_found() -> None:
    assert len(BASES) > 3
    assert all(isinstance(base, dict) for base in BASES)
    assert Path(EXAMPLES).is_dir()
