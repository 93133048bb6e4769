"""Required node affinity: which nodes a pod's ``nodeSelectorTerms`` admit (Kubernetes'
``NodeSelector`` semantics: any one term must match, every requirement of a term must hold, a
term without requirements matches no node)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from events.objects import NodeSelectorRequirement

Terms = Sequence[Sequence[NodeSelectorRequirement]]


def admitted(terms: Terms, labels: Mapping[str, str], name: str) -> bool:
    """Whether a node with `labels` and `name` satisfies `terms` (no terms: every node)."""
    if not terms:
        return True
    return any(term and all(_holds(r, labels, name) for r in term) for term in terms)


def _holds(requirement: NodeSelectorRequirement, labels: Mapping[str, str], name: str) -> bool:
    value = name if requirement.field else labels.get(requirement.key)
    operator, values = requirement.operator, requirement.values
    if operator == "In":
        return value is not None and value in values
    if operator == "NotIn":
        return value is None or value not in values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if operator in ("Gt", "Lt") and value is not None and len(values) == 1:
        try:
            have, bound = int(value), int(values[0])
        except ValueError:
            return False
        return have > bound if operator == "Gt" else have < bound
    return False
