"""The JSON shape of the fields the simulated server reads, checked before anything else.

The real server decodes bodies into Go structs, so a string where an object belongs is a 400
before any validation runs; here bodies stay plain dicts, so this check plays the decoder's
part. Only fields some code reads are described; unknown fields pass untouched.
"""

from __future__ import annotations

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


def _matches(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind)


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


def _walk(value: Any, shape: Shape) -> None:
    if value is None:
        return  # null is "unset" for every optional field, as in Go
    if isinstance(shape, dict):
        if not isinstance(value, dict):
            raise ShapeError("", value, shape)
        for key, sub in shape.items():
            item = value.get(key)
            if item is not None:
                try:
                    _walk(item, sub)
                except ShapeError as exc:
                    exc.steps.append(f".{key}")
                    raise
    elif isinstance(shape, list):
        if not isinstance(value, list):
            raise ShapeError("", value, shape)
        for index, item in enumerate(value):
            try:
                _walk(item, shape[0])
            except ShapeError as exc:
                exc.steps.append(f"[{index}]")
                raise
    elif isinstance(shape, _Map):
        if not isinstance(value, dict):
            raise ShapeError("", value, shape)
        for key, item in value.items():
            if item is not None and not shape.accepts(item):
                raise ShapeError(f"[{key}]", item, shape.values[0])
    elif not _matches(value, shape):
        raise ShapeError("", value, shape)


def check(kind: str, version: str, obj: Any) -> None:
    """Raise a 400 like the real decoder when a known field has the wrong JSON type."""
    shape = {"metadata": META, **_BY_KIND.get(kind, _GENERIC)}
    try:
        _walk(obj, shape)
    except ShapeError as exc:
        raise _decode_error(kind, version, exc) from None


def check_status(kind: str, version: str, status: Any) -> None:
    """`check` for the status alone, for writes that change nothing else."""
    try:
        _walk(status, _BY_KIND.get(kind, _GENERIC).get("status", dict))
    except ShapeError as exc:
        exc.steps.append(".status")
        raise _decode_error(kind, version, exc) from None


def _decode_error(kind: str, version: str, exc: ShapeError) -> ApiError:
    return bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
        f"{exc.got} into Go struct field {kind}.{exc.path} of type {exc.expected}"
    )
