"""The ``kbatchd place`` request file: JSON decoded and checked into placement inputs.

Every problem becomes a `RequestError` whose one-line message names the field path and, where
there is one, the offending value, e.g. ``podSets[0].requests.cpu: invalid quantity 'abc'``.
"""

from __future__ import annotations

import re
from typing import Any, Literal

import msgspec

from daemon.placement.model import (
    ALGORITHMS,
    Algorithm,
    NodeInfo,
    PodSetRequest,
    Taint,
    Toleration,
)
from daemon.placement.validation import first_problem
from events.quantity import QuantityError, parse_quantity, to_units
from events.topology import DEFAULT_LEVELS

Quantity = str | int | float
# Node lists repeat a handful of quantities thousands of times: each (resource, text) is parsed
# once per request.
UnitCache = dict[tuple[str, Quantity], int]


class RequestError(ValueError):
    """A malformed request: the message is one line naming the field."""


class _Wire(msgspec.Struct, forbid_unknown_fields=True, rename="camel"):
    pass


class TaintWire(_Wire):
    key: str
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    value: str = ""


class TolerationWire(_Wire):
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: Literal["", "NoSchedule", "PreferNoSchedule", "NoExecute"] = ""


class NodeWire(_Wire):
    name: str
    labels: dict[str, str] = {}
    allocatable: dict[str, Quantity] = {}
    used: dict[str, Quantity] = {}
    ready: bool = True
    unschedulable: bool = False
    taints: list[TaintWire] = []


class SliceLayerWire(_Wire):
    level: str
    size: int


class PodSetWire(_Wire):
    name: str
    count: int
    requests: dict[str, Quantity] = {}
    required: str | None = None
    preferred: str | None = None
    unconstrained: bool | None = None
    implied: bool | None = None
    slice_level: str | None = None
    slice_size: int | None = None
    slice_layers: list[SliceLayerWire] | None = None
    group: str | None = None
    tolerations: list[TolerationWire] = []
    node_selector: dict[str, str] = {}


class RequestWire(_Wire):
    nodes: list[NodeWire]
    pod_sets: list[PodSetWire]
    levels: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_LEVELS))
    algorithm: Literal["auto", "BestFit", "LeastFreeCapacity", "BalancedPlacement"] | None = None


class Request(msgspec.Struct, frozen=True):
    """A decoded, checked request: the arguments of `place`."""

    levels: tuple[str, ...]
    nodes: tuple[NodeInfo, ...]
    pod_sets: tuple[PodSetRequest, ...]
    algorithm: Algorithm


_AT = re.compile(r"^(?P<what>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.DOTALL)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<field>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<field>[^`]*)`$")


_TOO_DEEP = "invalid JSON: nested too deeply"


def parse_request(data: bytes | str) -> Request:
    """Decode and check a request document."""
    try:
        raw = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise RequestError(f"invalid JSON: {_one_line(str(exc))}") from None
    except RecursionError:
        # msgspec decodes (and converts) nested arrays and objects recursively, up to
        # Python's recursion limit.
        raise RequestError(_TOO_DEEP) from None
    if not isinstance(raw, dict):
        raise RequestError(f"request: expected a JSON object, got {_kind(raw)}")
    try:
        wire = msgspec.convert(raw, RequestWire)
    except msgspec.ValidationError as exc:
        raise RequestError(_describe(str(exc), raw)) from None
    except RecursionError:
        raise RequestError(_TOO_DEEP) from None
    return _checked(wire)


def _checked(wire: RequestWire) -> Request:
    seen: UnitCache = {}
    nodes: list[NodeInfo] = []
    names: set[str] = set()
    for index, node in enumerate(wire.nodes):
        where = f"nodes[{index}]"
        if node.name in names:
            raise RequestError(f"{where}.name: duplicate node name {node.name!r}")
        names.add(node.name)
        nodes.append(
            NodeInfo(
                name=node.name,
                labels=node.labels,
                allocatable=_quantities(f"{where}.allocatable", node.allocatable, seen),
                used=_quantities(f"{where}.used", node.used, seen),
                ready=node.ready,
                unschedulable=node.unschedulable,
                taints=tuple(Taint(t.key, t.effect, t.value) for t in node.taints),
            )
        )
    pod_sets = tuple(_pod_set(index, ps, seen) for index, ps in enumerate(wire.pod_sets))
    levels = tuple(wire.levels)
    problem = first_problem(levels, pod_sets)
    if problem is not None:
        where = f"podSets[{problem.pod_set}]." if problem.pod_set is not None else ""
        raise RequestError(f"{where}{problem.field}: {problem.message}")
    return Request(levels, tuple(nodes), pod_sets, wire.algorithm or "auto")


def _pod_set(index: int, wire: PodSetWire, seen: UnitCache) -> PodSetRequest:
    where = f"podSets[{index}]"
    layers: tuple[tuple[str, int], ...] = ()
    if wire.slice_layers is not None:
        if wire.slice_level is not None or wire.slice_size is not None:
            raise RequestError(f"{where}.sliceLayers: excludes sliceLevel and sliceSize")
        if not wire.slice_layers:
            raise RequestError(f"{where}.sliceLayers: 1 to 3 layers allowed, got 0")
        layers = tuple((layer.level, layer.size) for layer in wire.slice_layers)
    elif wire.slice_level is not None:
        # Kueue reads a slice size only together with a slice level; 0 is "not provided".
        layers = ((wire.slice_level, wire.slice_size or 0),)
    for position, toleration in enumerate(wire.tolerations):
        if not toleration.key and toleration.operator != "Exists":
            raise RequestError(
                f"{where}.tolerations[{position}].operator: an empty key needs operator Exists"
            )
    return PodSetRequest(
        name=wire.name,
        count=wire.count,
        requests=_quantities(f"{where}.requests", wire.requests, seen),
        required=wire.required,
        preferred=wire.preferred,
        unconstrained=bool(wire.unconstrained),
        implied=bool(wire.implied),
        slice_layers=layers,
        group=wire.group,
        tolerations=tuple(
            Toleration(t.key, t.operator, t.value, t.effect) for t in wire.tolerations
        ),
        node_selector=wire.node_selector,
    )


def _quantities(where: str, raw: dict[str, Quantity], seen: UnitCache) -> dict[str, int]:
    units: dict[str, int] = {}
    for name, value in raw.items():
        key = (name, value)
        amount = seen.get(key)
        if amount is None:
            amount = seen[key] = _units(f"{where}.{name}", name, value)
        units[name] = amount
    return units


def _units(where: str, name: str, value: Quantity) -> int:
    try:
        negative = parse_quantity(value) < 0
    except QuantityError:
        raise RequestError(f"{where}: invalid quantity {value!r}") from None
    if negative:
        raise RequestError(f"{where}: negative quantity {value!r}")
    try:
        return to_units(name, value)
    except QuantityError:
        raise RequestError(f"{where}: quantity {value!r} is out of range") from None


def _describe(message: str, raw: Any) -> str:
    """msgspec's validation message rewritten as ``path: problem``."""
    match = _AT.match(message)
    what = match["what"] if match else message
    path = (match["path"] if match else None) or ""
    unknown = _UNKNOWN.match(what)
    if unknown:
        return f"{_join(path, unknown['field'])}: unknown field"
    missing = _MISSING.match(what)
    if missing:
        return f"{_join(path, _camel(missing['field']))}: required field missing"
    if path.endswith("[...]"):
        path, found, value = _offending_entry(raw, path[: -len("[...]")], what)
    else:
        found, value = _lookup(raw, path)
    where = path.lstrip(".") or "request"
    if what.startswith("Invalid enum value") and path.endswith(".algorithm"):
        return f"{where}: unknown algorithm {value!r} (one of {', '.join(ALGORITHMS)})"
    if what.startswith("Invalid enum value"):
        return f"{where}: invalid value {value!r}"
    detail = (what[:1].lower() + what[1:]).replace("`", "")
    shown = f" (value {_show(value)})" if found else ""
    return _one_line(f"{where}: {detail}{shown}")


_GOT = re.compile(r"got `?(?P<kind>\w+)`?")
_KINDS = {bool: "bool", int: "int", float: "float", str: "str", list: "array", dict: "object"}


def _offending_entry(raw: Any, path: str, what: str) -> tuple[str, bool, Any]:
    """msgspec names a bad map value ``[...]``: find the key holding a value of the kind it
    complains about (keys such as ``nvidia.com/gpu`` contain dots, so return the value too)."""
    found, mapping = _lookup(raw, path)
    got = _GOT.search(what)
    if found and isinstance(mapping, dict) and got:
        for key, value in mapping.items():
            if _KINDS.get(type(value), "null") == got["kind"]:
                return f"{path}.{key}", True, value
    return path, False, None


def _join(path: str, field: str) -> str:
    path = path.lstrip(".")
    return f"{path}.{field}" if path else field


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _lookup(raw: Any, path: str) -> tuple[bool, Any]:
    value = raw
    for key, index in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path):
        try:
            value = value[int(index)] if index else value[key]
        except (KeyError, IndexError, TypeError):
            return False, None
    return True, value


def _show(value: Any) -> str:
    text = msgspec.json.encode(value).decode()
    return text if len(text) <= 60 else text[:57] + "..."


def _kind(value: Any) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number"
    )


def _one_line(text: str) -> str:
    return " ".join(text.split())
