"""Label and field selectors in their query-string form, compiled to predicates on raw objects.

The grammar and the supported field labels follow the real API server so that a selector
that works here works against a cluster (and one rejected there is rejected here).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from daemon.sim.errors import ApiError, bad_request

Predicate = Callable[[dict[str, Any]], bool]

_KEY: Final = re.compile(
    r"^([a-z0-9A-Z]([-a-z0-9A-Z.]*[a-z0-9A-Z])?/)?[a-zA-Z0-9]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?$"
)
_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_OPERATORS: Final = ("==", "!=", "=", ">", "<")


def _split_requirements(text: str) -> list[str]:
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    parts.append("".join(current))
    return [p.strip() for p in parts]


def _bad(text: str, why: str) -> ApiError:
    return bad_request(f"unable to parse requirement: {why}: {text!r}")


def _check_key(key: str, text: str) -> str:
    if not _KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise _bad(text, f"invalid label key {key!r}")
    return key


def _check_value(value: str, text: str) -> str:
    if len(value) > 63 or not _VALUE.match(value):
        raise _bad(text, f"invalid label value: {value!r}")
    return value


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    labels = obj.get("metadata", {}).get("labels")
    return labels if isinstance(labels, dict) else {}


def _set_requirement(text: str) -> Predicate:
    match = re.match(r"^(\S+)\s+(in|notin)\s*\((.*)\)$", text)
    if match is None:
        raise _bad(text, "expected a set-based requirement")
    key = _check_key(match[1], text)
    values = frozenset(_check_value(v.strip(), text) for v in match[3].split(","))
    if match[2] == "in":
        return lambda obj: _labels(obj).get(key) in values
    return lambda obj: _labels(obj).get(key) not in values


def _requirement(text: str) -> Predicate:
    if not text:
        raise _bad(text, "found '', expected: identifier")
    if re.search(r"\s(in|notin)\s*\(", text):
        return _set_requirement(text)
    if text.startswith("!"):
        key = _check_key(text[1:].strip(), text)
        return lambda obj: key not in _labels(obj)
    for op in _OPERATORS:
        if op in text:
            key, _, value = text.partition(op)
            key = _check_key(key.strip(), text)
            value = value.strip()
            if op in (">", "<"):
                try:
                    bound = int(value)
                except ValueError:
                    raise _bad(
                        text, f"for 'Gt', 'Lt' operators, the value must be an integer: {value!r}"
                    ) from None
                return _numeric(key, bound, op == ">")
            _check_value(value, text)
            if op == "!=":
                return lambda obj: _labels(obj).get(key) != value
            return lambda obj: _labels(obj).get(key) == value
    key = _check_key(text, text)
    return lambda obj: key in _labels(obj)


def _numeric(key: str, bound: int, greater: bool) -> Predicate:
    def check(obj: dict[str, Any]) -> bool:
        raw = _labels(obj).get(key)
        if raw is None:
            return False
        try:
            number = int(raw)
        except ValueError:
            return False
        return number > bound if greater else number < bound

    return check


def _all(predicates: list[Predicate]) -> Predicate | None:
    if not predicates:
        return None
    if len(predicates) == 1:
        return predicates[0]
    return lambda obj: all(p(obj) for p in predicates)


def label_selector(text: str | None) -> Predicate | None:
    """A predicate for `labelSelector`, or None when it selects everything."""
    if text is None or not text.strip():
        return None
    return _all([_requirement(part) for part in _split_requirements(text.strip())])


_COMMON_FIELDS: Final = ("metadata.name", "metadata.namespace")
_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "Pod": (
        "spec.nodeName",
        "spec.restartPolicy",
        "spec.schedulerName",
        "spec.serviceAccountName",
        "spec.hostNetwork",
        "status.phase",
        "status.podIP",
        "status.nominatedNodeName",
    ),
    "Node": ("spec.unschedulable",),
    "Job": ("status.successful",),
    "Namespace": ("status.phase",),
    "Event": (
        "involvedObject.kind",
        "involvedObject.namespace",
        "involvedObject.name",
        "involvedObject.uid",
        "involvedObject.apiVersion",
        "involvedObject.resourceVersion",
        "involvedObject.fieldPath",
        "reason",
        "reportingComponent",
        "source",
        "type",
        "regarding.kind",
        "regarding.namespace",
        "regarding.name",
        "regarding.uid",
    ),
}


def field_value(obj: dict[str, Any], path: str) -> str:
    """The string a field selector compares against (missing fields read as "")."""
    if path == "status.successful":
        path = "status.succeeded"
    current: Any = obj
    for part in path.split("."):
        if not isinstance(current, dict):
            return ""
        current = current.get(part)
    if current is None:
        return ""
    if isinstance(current, bool):
        return "true" if current else "false"
    return str(current)


def field_selector(text: str | None, kind: str) -> Predicate | None:
    """A predicate for `fieldSelector`; unsupported field labels are a 400 like the real server."""
    if text is None or not text.strip():
        return None
    supported = _COMMON_FIELDS + _FIELDS.get(kind, ())
    predicates: list[Predicate] = []
    for part in text.split(","):
        part = part.strip()
        for op in ("==", "!=", "="):
            if op in part:
                path, _, value = part.partition(op)
                path = path.strip()
                break
        else:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        if path not in supported:
            raise bad_request(f"field label not supported: {path}")
        negate = op == "!="
        predicates.append(_field_predicate(path, value.strip(), negate))
    return _all(predicates)


def _field_predicate(path: str, value: str, negate: bool) -> Predicate:
    if negate:
        return lambda obj: field_value(obj, path) != value
    return lambda obj: field_value(obj, path) == value


def combine(*predicates: Predicate | None) -> Predicate | None:
    return _all([p for p in predicates if p is not None])


def selector_matches(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A structured `LabelSelector` (matchLabels + matchExpressions) against labels."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
