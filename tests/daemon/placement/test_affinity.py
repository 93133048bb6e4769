"""Required node affinity as Kubernetes' NodeSelector defines it."""

from __future__ import annotations

import pytest

from daemon.placement.affinity import admitted
from events.objects import NodeSelectorRequirement as R

LABELS = {"pool": "a", "gpu-count": "8", "zone": "z1"}
NAME = "n1"


@pytest.mark.parametrize(
    ("terms", "expected"),
    [
        ((), True),  # no required affinity: every node
        (((R("pool", "In", ("a", "b")),),), True),
        (((R("pool", "In", ("b",)),),), False),
        (((R("pool", "NotIn", ("b",)),),), True),
        (((R("missing", "NotIn", ("b",)),),), True),
        (((R("pool", "Exists"),),), True),
        (((R("missing", "Exists"),),), False),
        (((R("missing", "DoesNotExist"),),), True),
        (((R("pool", "DoesNotExist"),),), False),
        (((R("gpu-count", "Gt", ("4",)),),), True),
        (((R("gpu-count", "Lt", ("4",)),),), False),
        (((R("pool", "Gt", ("4",)),),), False),  # not an integer
        (((R("gpu-count", "Gt", ("4", "5")),),), False),  # Gt takes one value
        (((R("missing", "Gt", ("4",)),),), False),
        (((R("pool", "Bogus", ("a",)),),), False),
        # Every requirement of a term must hold...
        (((R("pool", "In", ("a",)), R("zone", "In", ("z2",))),), False),
        # ...and any one term is enough.
        (((R("pool", "In", ("b",)),), (R("zone", "In", ("z1",)),)), True),
        # A term without requirements matches no node.
        (((),), False),
        # matchFields: the node's name.
        (((R("metadata.name", "In", ("n1",), field=True),),), True),
        (((R("metadata.name", "In", ("n2",), field=True),),), False),
        # A label that happens to be called metadata.name is a label, not the field.
        (((R("metadata.name", "In", ("n1",)),),), False),
    ],
)
def test_admitted(terms: tuple[tuple[R, ...], ...], expected: bool) -> None:
    assert admitted(terms, LABELS, NAME) is expected
