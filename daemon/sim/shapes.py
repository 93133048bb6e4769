"""The JSON shape of every kind the simulated server serves, field by field: the one
description of the kinds that the decoder checks, `fieldValidation` and the OpenAPI
documents (`openapi`) all read.

The real server decodes bodies into Go structs, so a string where an object belongs is a 400
before any validation runs, and a field the struct lacks is unknown (dropped, warned about or
refused as `fieldValidation` asks); here bodies stay plain dicts, so this module plays the
decoder's part. A `Struct` lists every field of its Go type; `dict` is an object whose
inside is not described here (kept as sent, never checked).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from daemon.sim.errors import ApiError, bad_request


class FreeMap:
    """A JSON object with free keys and values of one type (labels, resource lists)."""

    def __init__(self, values: tuple[type, ...], go: str):
        self.values = values
        self.go = go

    def accepts(self, item: Any) -> bool:
        # bool is an int in Python but never a JSON number.
        return isinstance(item, self.values) and (bool in self.values or type(item) is not bool)


class Struct(dict[str, Any]):
    """The fields of one Go type; `name` is its OpenAPI definition name (empty: inlined)."""

    def __init__(self, name: str, fields: dict[str, Any]):
        super().__init__(fields)
        self.name = name


STRINGS: Final = FreeMap((str,), "map[string]string")
QUANTITIES: Final = FreeMap((str, int, float), "v1.ResourceList")
Shape = Any  # a Python type, a Struct, `dict`, a one-item list, or a FreeMap

_CORE: Final = "io.k8s.api.core.v1."
_META: Final = "io.k8s.apimachinery.pkg.apis.meta.v1."

OWNER_REFERENCE: Final = Struct(
    _META + "OwnerReference",
    {
        "apiVersion": str,
        "kind": str,
        "name": str,
        "uid": str,
        "controller": bool,
        "blockOwnerDeletion": bool,
    },
)
META: Final = Struct(
    _META + "ObjectMeta",
    {
        "name": str,
        "generateName": str,
        "namespace": str,
        "selfLink": str,
        "uid": str,
        "resourceVersion": str,
        "generation": int,
        "creationTimestamp": str,
        "deletionTimestamp": str,
        "deletionGracePeriodSeconds": int,
        "labels": STRINGS,
        "annotations": STRINGS,
        "ownerReferences": [OWNER_REFERENCE],
        "finalizers": [str],
        "managedFields": [dict],
    },
)
# The metadata a CRD's schema gives an embedded template (JobSet's job and pod templates).
EMBEDDED_META: Final = Struct(
    "",
    {
        "name": str,
        "namespace": str,
        "labels": STRINGS,
        "annotations": STRINGS,
        "finalizers": [str],
    },
)
LABEL_SELECTOR: Final = Struct(
    _META + "LabelSelector", {"matchLabels": STRINGS, "matchExpressions": [dict]}
)
RESOURCES: Final = Struct(
    _CORE + "ResourceRequirements",
    {"limits": QUANTITIES, "requests": QUANTITIES, "claims": [dict]},
)
CONTAINER: Final = Struct(
    _CORE + "Container",
    {
        "name": str,
        "image": str,
        "command": [str],
        "args": [str],
        "workingDir": str,
        "ports": [dict],
        "envFrom": [dict],
        "env": [Struct(_CORE + "EnvVar", {"name": str, "value": str, "valueFrom": dict})],
        "resources": RESOURCES,
        "resizePolicy": [dict],
        "restartPolicy": str,
        "restartPolicyRules": [
            Struct("", {"action": str, "exitCodes": Struct("", {"operator": str, "values": [int]})})
        ],
        "volumeMounts": [dict],
        "volumeDevices": [dict],
        "livenessProbe": dict,
        "readinessProbe": dict,
        "startupProbe": dict,
        "lifecycle": dict,
        "terminationMessagePath": str,
        "terminationMessagePolicy": str,
        "imagePullPolicy": str,
        "securityContext": dict,
        "stdin": bool,
        "stdinOnce": bool,
        "tty": bool,
    },
)
TOLERATION: Final = Struct(
    _CORE + "Toleration",
    {"key": str, "operator": str, "value": str, "effect": str, "tolerationSeconds": int},
)
POD_SPEC: Final = Struct(
    _CORE + "PodSpec",
    {
        "volumes": [dict],
        "initContainers": [CONTAINER],
        "containers": [CONTAINER],
        "ephemeralContainers": [dict],
        "restartPolicy": str,
        "terminationGracePeriodSeconds": int,
        "activeDeadlineSeconds": int,
        "dnsPolicy": str,
        "nodeSelector": STRINGS,
        "serviceAccountName": str,
        "serviceAccount": str,
        "automountServiceAccountToken": bool,
        "nodeName": str,
        "hostNetwork": bool,
        "hostPID": bool,
        "hostIPC": bool,
        "shareProcessNamespace": bool,
        "securityContext": dict,
        "imagePullSecrets": [dict],
        "hostname": str,
        "hostnameOverride": str,
        "subdomain": str,
        "affinity": Struct(
            _CORE + "Affinity", {"nodeAffinity": dict, "podAffinity": dict, "podAntiAffinity": dict}
        ),
        "schedulerName": str,
        "tolerations": [TOLERATION],
        "hostAliases": [dict],
        "priorityClassName": str,
        "priority": int,
        "dnsConfig": dict,
        "readinessGates": [Struct("", {"conditionType": str})],
        "runtimeClassName": str,
        "enableServiceLinks": bool,
        "preemptionPolicy": str,
        "overhead": QUANTITIES,
        "topologySpreadConstraints": [dict],
        "setHostnameAsFQDN": bool,
        "os": dict,
        "hostUsers": bool,
        "schedulingGates": [Struct("", {"name": str})],
        "resourceClaims": [dict],
        "resources": RESOURCES,
        "schedulingGroup": dict,
    },
)


def _conditions(name: str, **times: Shape) -> list[Struct]:
    """A list of conditions: the fields every condition type has, plus `times` (each type
    has its own timestamps)."""
    return [Struct(name, {"type": str, "status": str, "reason": str, "message": str, **times})]


CONDITIONS: Final = _conditions(  # metav1.Condition
    _META + "Condition", lastTransitionTime=str, observedGeneration=int
)


def _pod_template(meta: Struct) -> Struct:
    return Struct(
        _CORE + "PodTemplateSpec" if meta is META else "", {"metadata": meta, "spec": POD_SPEC}
    )


def _job_spec(meta: Struct) -> Struct:
    """A JobSpec whose pod template has `meta` for metadata (a CRD embeds less of it)."""
    return Struct(
        "io.k8s.api.batch.v1.JobSpec" if meta is META else "",
        {
            "parallelism": int,
            "completions": int,
            "activeDeadlineSeconds": int,
            "podFailurePolicy": Struct("", {"rules": [dict]}),
            "successPolicy": Struct("", {"rules": [dict]}),
            "backoffLimit": int,
            "backoffLimitPerIndex": int,
            "maxFailedIndexes": int,
            "selector": LABEL_SELECTOR,
            "manualSelector": bool,
            "template": _pod_template(meta),
            "ttlSecondsAfterFinished": int,
            "completionMode": str,
            "suspend": bool,
            "podReplacementPolicy": str,
            "managedBy": str,
        },
    )


POD_TEMPLATE: Final = _pod_template(META)
JOB_SPEC: Final = _job_spec(META)
JOB_STATUS: Final = Struct(
    "io.k8s.api.batch.v1.JobStatus",
    {
        "conditions": _conditions(
            "io.k8s.api.batch.v1.JobCondition", lastProbeTime=str, lastTransitionTime=str
        ),
        "startTime": str,
        "completionTime": str,
        "active": int,
        "succeeded": int,
        "failed": int,
        "terminating": int,
        "completedIndexes": str,
        "failedIndexes": str,
        "uncountedTerminatedPods": Struct("", {"succeeded": [str], "failed": [str]}),
        "ready": int,
    },
)
POD_STATUS: Final = Struct(
    _CORE + "PodStatus",
    {
        "observedGeneration": int,
        "phase": str,
        "conditions": _conditions(
            _CORE + "PodCondition",
            lastProbeTime=str,
            lastTransitionTime=str,
            observedGeneration=int,
        ),
        "message": str,
        "reason": str,
        "nominatedNodeName": str,
        "hostIP": str,
        "hostIPs": [dict],
        "podIP": str,
        "podIPs": [dict],
        "startTime": str,
        "initContainerStatuses": [dict],
        "containerStatuses": [dict],
        "qosClass": str,
        "ephemeralContainerStatuses": [dict],
        "resize": str,
        "resourceClaimStatuses": [dict],
        "extendedResourceClaimStatus": dict,
        "nodeAllocatableResourceClaimStatuses": [dict],
        "allocatedResources": QUANTITIES,
        "resources": RESOURCES,
    },
)

# scheduling.k8s.io/v1alpha2 (Kubernetes 1.36): what a PodGroup's spec and a Workload's pod
# group templates share.
POD_GROUP_POLICY: Final[dict[str, Shape]] = {
    "schedulingPolicy": Struct("", {"basic": dict, "gang": Struct("", {"minCount": int})}),
    "schedulingConstraints": Struct("", {"topology": [Struct("", {"key": str})]}),
    "disruptionMode": str,
    "priorityClassName": str,
    "priority": int,
    "resourceClaims": [dict],
}
_SCHEDULING: Final = "io.k8s.api.scheduling.v1alpha2."
POD_GROUP_SPEC: Final = Struct(
    _SCHEDULING + "PodGroupSpec",
    {
        "podGroupTemplateRef": Struct(
            "",
            {"workload": Struct("", {"workloadName": str, "podGroupTemplateName": str})},
        ),
        **POD_GROUP_POLICY,
    },
)
_JOBSET: Final = "io.x-k8s.jobset.v1alpha2."

# The fields of each kind besides apiVersion, kind and metadata.
_BY_KIND: Final[dict[str, dict[str, Shape]]] = {
    "Pod": {"spec": POD_SPEC, "status": POD_STATUS},
    "Job": {"spec": JOB_SPEC, "status": JOB_STATUS},
    "JobSet": {
        "spec": Struct(
            _JOBSET + "JobSetSpec",
            {
                "replicatedJobs": [
                    Struct(
                        _JOBSET + "ReplicatedJob",
                        {
                            "name": str,
                            "groupName": str,
                            "template": Struct(
                                "", {"metadata": EMBEDDED_META, "spec": _job_spec(EMBEDDED_META)}
                            ),
                            "replicas": int,
                            "dependsOn": [dict],
                        },
                    )
                ],
                "network": dict,
                "successPolicy": dict,
                "failurePolicy": Struct(
                    "", {"maxRestarts": int, "restartStrategy": str, "rules": [dict]}
                ),
                "startupPolicy": dict,
                "suspend": bool,
                "coordinator": dict,
                "volumeClaimPolicies": [Struct("", {"templates": [dict], "retentionPolicy": dict})],
                "managedBy": str,
                "ttlSecondsAfterFinished": int,
            },
        ),
        "status": Struct(
            _JOBSET + "JobSetStatus",
            {
                "conditions": CONDITIONS,
                "restarts": int,
                "restartsCountTowardsMax": int,
                "terminalState": str,
                "replicatedJobsStatus": [dict],
                "currentInPlaceRestartAttempt": int,
                "previousInPlaceRestartAttempt": int,
            },
        ),
    },
    "Node": {
        "spec": Struct(
            _CORE + "NodeSpec",
            {
                "podCIDR": str,
                "podCIDRs": [str],
                "providerID": str,
                "unschedulable": bool,
                "taints": [
                    Struct(
                        _CORE + "Taint", {"key": str, "value": str, "effect": str, "timeAdded": str}
                    )
                ],
                "configSource": dict,
                "externalID": str,
            },
        ),
        "status": Struct(
            _CORE + "NodeStatus",
            {
                "capacity": QUANTITIES,
                "allocatable": QUANTITIES,
                "phase": str,
                "conditions": _conditions(
                    _CORE + "NodeCondition", lastHeartbeatTime=str, lastTransitionTime=str
                ),
                "addresses": [Struct("", {"type": str, "address": str})],
                "daemonEndpoints": dict,
                "nodeInfo": dict,
                "images": [dict],
                "volumesInUse": [str],
                "volumesAttached": [dict],
                "config": dict,
                "runtimeHandlers": [dict],
                "features": dict,
                "declaredFeatures": [str],
            },
        ),
    },
    "Namespace": {
        "spec": Struct(_CORE + "NamespaceSpec", {"finalizers": [str]}),
        "status": Struct(
            _CORE + "NamespaceStatus",
            {"phase": str, "conditions": _conditions("", lastTransitionTime=str)},
        ),
    },
    "PersistentVolumeClaim": {"spec": dict, "status": dict},
    "Service": {"spec": dict, "status": dict},
    "PriorityClass": {
        "value": int,
        "globalDefault": bool,
        "description": str,
        "preemptionPolicy": str,
    },
    "PodGroup": {
        "spec": POD_GROUP_SPEC,
        "status": Struct(
            _SCHEDULING + "PodGroupStatus",
            {"conditions": CONDITIONS, "resourceClaimStatuses": [dict]},
        ),
    },
    "Workload": {
        "spec": Struct(
            _SCHEDULING + "WorkloadSpec",
            {
                "controllerRef": dict,
                "podGroupTemplates": [
                    Struct(_SCHEDULING + "PodGroupTemplate", {"name": str, **POD_GROUP_POLICY})
                ],
            },
        ),
        # Not in the 1.36 type; the simulated server keeps one for its status subresource.
        "status": dict,
    },
    "Lease": {
        "spec": Struct(
            "io.k8s.api.coordination.v1.LeaseSpec",
            {
                "holderIdentity": str,
                "leaseDurationSeconds": int,
                "acquireTime": str,
                "renewTime": str,
                "leaseTransitions": int,
                "strategy": str,
                "preferredHolder": str,
            },
        ),
    },
}
# The two Event kinds share a kind name; their fields differ by group.
_EVENTS: Final[dict[str, dict[str, Shape]]] = {
    "": {
        "involvedObject": dict,
        "reason": str,
        "message": str,
        "source": dict,
        "firstTimestamp": str,
        "lastTimestamp": str,
        "count": int,
        "type": str,
        "eventTime": str,
        "series": dict,
        "action": str,
        "related": dict,
        "reportingComponent": str,
        "reportingInstance": str,
    },
    "events.k8s.io": {
        "eventTime": str,
        "series": dict,
        "reportingController": str,
        "reportingInstance": str,
        "action": str,
        "reason": str,
        "regarding": dict,
        "related": dict,
        "note": str,
        "type": str,
        "deprecatedSource": dict,
        "deprecatedFirstTimestamp": str,
        "deprecatedLastTimestamp": str,
        "deprecatedCount": int,
    },
}


def object_shape(kind: str, group: str = "") -> Struct | None:
    """Every field of an object of this kind, or None for a kind not described here."""
    fields = _EVENTS.get(group) if kind == "Event" else _BY_KIND.get(kind)
    if fields is None:
        return None
    return Struct("", {"apiVersion": str, "kind": str, "metadata": META, **fields})


_JSON_NAMES: Final = {str: "string", int: "number", float: "number", bool: "bool"}
_GO_NAMES: Final = {str: "string", int: "int32", float: "float64", bool: "bool", dict: "object"}


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    return _JSON_NAMES.get(type(value), "value")


def _go_type(shape: Shape) -> str:
    if isinstance(shape, FreeMap):
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
    if isinstance(shape, FreeMap):
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


def _compile_map(shape: FreeMap) -> Check:
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


# A kind not described here (none the server serves): any object, nothing checked.
_UNDESCRIBED: Final = Struct("", {"metadata": META, "spec": dict, "status": dict})
_OBJECTS: Final[dict[tuple[str, str], Check]] = {}
_STATUSES: Final[dict[tuple[str, str], Check]] = {}


def check(kind: str, version: str, obj: Any, group: str = "") -> None:
    """Raise a 400 like the real decoder when a known field has the wrong JSON type."""
    checker = _OBJECTS.get((group, kind))
    if checker is None:
        shape = object_shape(kind, group) or _UNDESCRIBED
        checker = _OBJECTS[group, kind] = _compile(shape)
    if obj is None:
        return
    try:
        checker(obj)
    except ShapeError as exc:
        raise _decode_error(kind, version, exc) from None


def check_status(kind: str, version: str, status: Any, group: str = "") -> None:
    """`check` for the status alone, for writes that change nothing else."""
    checker = _STATUSES.get((group, kind))
    if checker is None:
        shape = (object_shape(kind, group) or _UNDESCRIBED).get("status", dict)
        checker = _STATUSES[group, kind] = _compile(shape)
    if status is None:
        return
    try:
        checker(status)
    except ShapeError as exc:
        exc.steps.append(".status")
        raise _decode_error(kind, version, exc) from None


def prune(kind: str, obj: dict[str, Any], group: str = "") -> list[str]:
    """Drop the fields no Go type of the kind declares, as decoding into the struct does; the
    paths of the dropped fields (`spec.containers[0].foo`), in the order of the document."""
    unknown: list[str] = []
    shape = object_shape(kind, group)
    if shape is not None:
        _prune(shape, obj, "", unknown)
    return unknown


def _prune(shape: Shape, value: Any, prefix: str, unknown: list[str]) -> None:
    if isinstance(shape, list) and isinstance(value, list):
        stem = prefix.removesuffix(".")
        for index, item in enumerate(value):
            _prune(shape[0], item, f"{stem}[{index}].", unknown)
    elif isinstance(shape, Struct) and isinstance(value, dict):
        for key in list(value):
            sub = shape.get(key)
            if sub is None:
                unknown.append(prefix + key)
                del value[key]
            elif isinstance(sub, list | Struct):
                _prune(sub, value[key], f"{prefix}{key}.", unknown)


def _decode_error(kind: str, version: str, exc: ShapeError) -> ApiError:
    return bad_request(
        f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
        f"{exc.got} into Go struct field {kind}.{exc.path} of type {exc.expected}"
    )
