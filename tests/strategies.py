"""Hypothesis strategies every input surface's property tests share: a JSON document with a
few of its places damaged."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st


def json_paths(doc: Any, prefix: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every place in a JSON document, the document itself first."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += json_paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += json_paths(value, (*prefix, index))
    return found


@st.composite
def damaged_json(
    draw: st.DrawFn, doc: Any, values: st.SearchStrategy[Any], fields: Sequence[str]
) -> Any:
    """A copy of `doc` with one to three of its places replaced by one of `values`, removed,
    or given one of `fields` (of one of `values`); the whole document replaced, at times."""
    doc = json.loads(json.dumps(doc))
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(json_paths(doc)))
        if not path:
            return draw(values)
        *parents, last = path
        node: Any = doc
        for part in parents:
            node = node[part]
        action = draw(st.sampled_from(["replace", "remove", "insert"]))
        if action == "remove":
            del node[last]
        elif action == "insert" and isinstance(node[last], dict):
            node[last][draw(st.sampled_from(fields))] = draw(values)
        else:
            node[last] = draw(values)
    return doc
