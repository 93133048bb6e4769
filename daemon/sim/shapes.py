"""The JSON shape of the fields the simulated server reads, checked before anything else.

The real server decodes bodies into Go structs, so a string where an object belongs is a 400
before any validation runs; here bodies stay plain dicts, so this check plays the decoder's
part. Only fields some code reads are described; unknown fields pass untouched.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from daemon.sim.errors import ApiError, bad_request


class _Map:
    """A JSON object with free keys and values of one type (labels, resource lists)."""

    def __init__(self, values: tuple[type, ...], go: str):
        self.values = values
        self.go = go

    def accepts(self, item: Any) -> bool:
        # bool is an int in Python but never a JSON number.
        return isinstance(item, self.values) and (bool in self.values or type(item) is not bool)


STRINGS: Final = _Map((str,), "map[string]string")
QUANTITIES: Final = _Map((str, int, float), "v1.ResourceList")

Shape = Any  # a Python type, a dict of field shapes, a one-item list, or a _Map

META: Final[dict[str, Shape]] = {
    "name": str,
    "generateName": str,
    "namespace": str,
    "uid": str,
    "resourceVersion": str,
    "labels": STRINGS,
    "annotations": STRINGS,
    "finalizers": [str],
    "ownerReferences": [
        {
            "apiVersion": str,
            "kind": str,
            "name": str,
            "uid": str,
            "controller": bool,
            "blockOwnerDeletion": bool,
        }
    ],
}
CONTAINER: Final[dict[str, Shape]] = {
    "name": str,
    "image": str,
    "restartPolicy": str,
    "resources": {"requests": QUANTITIES, "limits": QUANTITIES, "claims": [dict]},
    "env": [{"name": str}],
    "restartPolicyRules": [{"action": str, "exitCodes": {"operator": str, "values": [int]}}],
}
POD_SPEC: Final[dict[str, Shape]] = {
    "containers": [CONTAINER],
    "initContainers": [CONTAINER],
    "nodeName": str,
    "schedulerName": str,
    "restartPolicy": str,
    "priorityClassName": str,
    "priority": int,
    "terminationGracePeriodSeconds": int,
    "activeDeadlineSeconds": int,
    "nodeSelector": STRINGS,
    "tolerations": [{"key": str, "operator": str, "value": str, "effect": str}],
    "schedulingGates": [{"name": str}],
    "affinity": {"nodeAffinity": dict, "podAffinity": dict, "podAntiAffinity": dict},
    "overhead": QUANTITIES,
}
CONDITIONS: Final = [{"type": str, "status": str, "reason": str, "message": str}]
POD_TEMPLATE: Final[dict[str, Shape]] = {"metadata": META, "spec": POD_SPEC}
JOB_SPEC: Final[dict[str, Shape]] = {
    "template": POD_TEMPLATE,
    "parallelism": int,
    "completions": int,
    "backoffLimit": int,
    "backoffLimitPerIndex": int,
    "maxFailedIndexes": int,
    "activeDeadlineSeconds": int,
    "ttlSecondsAfterFinished": int,
    "suspend": bool,
    "manualSelector": bool,
    "managedBy": str,
    "completionMode": str,
    "podReplacementPolicy": str,
    "selector": {"matchLabels": STRINGS, "matchExpressions": [dict]},
    "podFailurePolicy": {"rules": [dict]},
    "successPolicy": {"rules": [dict]},
}
JOB_STATUS: Final[dict[str, Shape]] = {
    "active": int,
    "succeeded": int,
    "failed": int,
    "ready": int,
    "terminating": int,
    "startTime": str,
    "completionTime": str,
    "completedIndexes": str,
    "failedIndexes": str,
    "conditions": CONDITIONS,
    "uncountedTerminatedPods": {"succeeded": [str], "failed": [str]},
}

# scheduling.k8s.io/v1alpha2 (Kubernetes 1.36): what a PodGroup's spec and a Workload's pod
# group templates share.
POD_GROUP_POLICY: Final[dict[str, Shape]] = {
    "schedulingPolicy": {"basic": dict, "gang": {"minCount": int}},
    "schedulingConstraints": {"topology": [{"key": str}]},
    "disruptionMode": str,
    "priorityClassName": str,
    "priority": int,
}
POD_GROUP_SPEC: Final[dict[str, Shape]] = {
    "podGroupTemplateRef": {"workload": {"workloadName": str, "podGroupTemplateName": str}},
    **POD_GROUP_POLICY,
}

_BY_KIND: Final[dict[str, dict[str, Shape]]] = {
    "Pod": {
        "spec": POD_SPEC,
        "status": {
            "phase": str,
            "conditions": CONDITIONS,
            "containerStatuses": [dict],
            "initContainerStatuses": [dict],
            "startTime": str,
        },
    },
    "Job": {"spec": JOB_SPEC, "status": JOB_STATUS},
    "JobSet": {
        "spec": {
            "replicatedJobs": [
                {
                    "name": str,
                    "replicas": int,
                    "groupName": str,
                    "template": {"metadata": META, "spec": JOB_SPEC},
                    "dependsOn": [dict],
                }
            ],
            "suspend": bool,
            "managedBy": str,
            "network": dict,
            "successPolicy": dict,
            "failurePolicy": {"rules": [dict]},
            "startupPolicy": dict,
            "volumeClaimPolicies": [{"retentionPolicy": dict}],
        },
        "status": dict,
    },
    "Node": {
        "spec": {"unschedulable": bool, "taints": [{"key": str, "effect": str, "value": str}]},
        "status": {"allocatable": QUANTITIES, "capacity": QUANTITIES, "conditions": CONDITIONS},
    },
    "Namespace": {"spec": {"finalizers": [str]}, "status": {"phase": str}},
    "PriorityClass": {"value": int, "globalDefault": bool, "preemptionPolicy": str},
    "PodGroup": {"spec": POD_GROUP_SPEC, "status": {"conditions": CONDITIONS}},
    "Workload": {
        "spec": {"podGroupTemplates": [{"name": str, **POD_GROUP_POLICY}]},
        "status": dict,
    },
}
_GENERIC: Final[dict[str, Shape]] = {"spec": dict, "status": dict}

_JSON_NAMES: Final = {str: "string", int: "number", float: "number", bool: "bool"}
_GO_NAMES: Final = {str: "string", int: "int32", float: "float64", bool: "bool", dict: "object"}


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return _JSON_NAMES.get(type(value), "value")


def _go_type(shape: Shape) -> str:
    if isinstance(shape, _Map):
        return shape.go
    if isinstance(shape, list):
        return "[]" + _go_type(shape[0])
    if isinstance(shape, dict):
        return "struct"
    return _GO_NAMES.get(shape, "value")


class ShapeError(Exception):
    """A value of the wrong JSON type. The path is collected while the error unwinds, so a
    walk that finds nothing wrong (nearly every one) builds no path strings."""

    def __init__(self, step: str, value: Any, shape: Shape):
        super().__init__(step)
        self.steps = [step]  # innermost first
        self.got = _json_type(value)
        self.expected = _go_type(shape)

    @property
    def path(self) -> str:
        return "".join(reversed(self.steps)).removeprefix(".")


# A compiled shape: raises ShapeError for a value (never None) of the wrong JSON type. Every
# create and update goes through one, so shapes are turned into closures once rather than
# interpreted field by field on every request.
Check = Callable[[Any], None]


def _leaf(kind: type) -> tuple[tuple[type, ...], bool]:
    """The types a leaf accepts, and whether bool (an int in Python) must be refused."""
    if kind is int:
        return (int,), True
    if kind is float:
        return (int, float), True
    return (kind,), False


def _compile(shape: Shape) -> Check:
    if isinstance(shape, _Map):
        return _compile_map(shape)
    if isinstance(shape, list):
        return _compile_list(shape)
    if isinstance(shape, dict):
        return _compile_struct(shape)
    types, strict = _leaf(shape)

    def check_leaf(value: Any) -> None:
        if not isinstance(value, types) or (strict and type(value) is bool):
            raise ShapeError("", value, shape)

    return check_leaf


def _compile_map(shape: _Map) -> Check:
    def check_map(value: Any) -> None:
        if not isinstance(value, dict):
            raise ShapeError("", value, shape)
        for key, item in value.items():
            if item is not None and not shape.accepts(item):
                raise ShapeError(f"[{key}]", item, shape.values[0])

    return check_map


def _compile_list(shape: list[Shape]) -> Check:
    item_shape = shape[0]
    check_item = _compile(item_shape)

    def check_list(value: Any) -> None:
        if not isinstance(value, list):
            raise ShapeError("", value, shape)
        for index, item in enumerate(value):
            if item is not None:
                try:
                    check_item(item)
                except ShapeError as exc:
                    exc.steps.append(f"[{index}]")
                    raise

    return check_list


def _compile_struct(shape: dict[str, Shape]) -> Check:
    # Leaves are tested in place (no call per field); fields keep the shape's order, so the
    # first wrong field reported is the same whichever way it is found.
    fields = tuple(
        (key, *_leaf(sub), None) if isinstance(sub, type) else (key, (), False, _compile(sub))
        for key, sub in shape.items()
    )

    def check_struct(value: Any) -> None:
        if not isinstance(value, dict):
            raise ShapeError("", value, shape)
        for key, types, strict, check in fields:
            item = value.get(key)
            if item is None:
                continue  # null is "unset" for every optional field, as in Go
            if check is None:
                if not isinstance(item, types) or (strict and type(item) is bool):
                    raise ShapeError(f".{key}", item, shape[key])
            else:
                try:
                    check(item)
                except ShapeError as exc:
                    exc.steps.append(f".{key}")
                    raise

    return check_struct


_OBJECTS: Final[dict[str, Check]] = {}
_STATUSES: Final[dict[str, Check]] = {}


def check(kind: str, version: str, obj: Any) -> None:
    """Raise a 400 like the real decoder when a known field has the wrong JSON type."""
    checker = _OBJECTS.get(kind)
    if checker is None:
        checker = _OBJECTS[kind] = _compile({"metadata": META, **_BY_KIND.get(kind, _GENERIC)})
    if obj is None:
        return
    try:
        checker(obj)
    except ShapeError as exc:
        raise _decode_error(kind, version, exc) from None


def check_status(kind: str, version: str, status: Any) -> None:
    """`check` for the status alone, for writes that change nothing else."""
    checker = _STATUSES.get(kind)
    if checker is None:
        shape = _BY_KIND.get(kind, _GENERIC).get("status", dict)
        checker = _STATUSES[kind] = _compile(shape)
    if status is None:
        return
    try:
        checker(status)
    except ShapeError as exc:
        exc.steps.append(".status")
        raise _decode_error(kind, version, exc) from None


def _decode_error(kind: str, version: str, exc: ShapeError) -> ApiError:
    return bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
        f"{exc.got} into Go struct field {kind}.{exc.path} of type {exc.expected}"
    )
