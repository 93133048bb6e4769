"""Validation the real API server performs on object metadata and Pods, plus the helpers the
Job rules (`job_validation`, `job_status`) share.

Each check returns `FieldError`s; the registry turns them into one 422 `Invalid` whose causes
carry the field paths, as the real server does.
"""

from __future__ import annotations

import re
from typing import Any, Final

from daemon.sim.errors import (
    OMIT,
    FieldError,
    forbidden,
    immutable,
    invalid,
    not_supported,
    required,
)
from events.jsondata import clone

Obj = dict[str, Any]

_SUBDOMAIN: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_QUALIFIED: Final = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
MANAGED_BY: Final = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[-A-Za-z0-9_.~!$&'()*+,;=:@/%]+$"
)

SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def get_path(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


# -- metadata -----------------------------------------------------------------------------


def label_errors(labels: Any, path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    if labels is None:
        return errors
    if not isinstance(labels, dict):
        return [invalid(path, labels, "must be a map of strings")]
    for key, value in labels.items():
        name = key.rsplit("/", 1)[-1]
        prefix = key[: -len(name) - 1] if "/" in key else ""
        if (
            not name
            or len(name) > 63
            or not _QUALIFIED.match(name)
            or (prefix and not _SUBDOMAIN.match(prefix))
        ):
            errors.append(
                invalid(
                    path,
                    key,
                    "name part must consist of alphanumeric "
                    "characters, '-', '_' or '.', and must start and end with "
                    "an alphanumeric character",
                )
            )
        if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
            errors.append(
                invalid(
                    path,
                    value,
                    "a valid label must be an empty string or "
                    "consist of alphanumeric characters, '-', '_' or '.', and "
                    "must start and end with an alphanumeric character",
                )
            )
    return errors


# The real server's limit on all of an object's annotations together, keys and values.
ANNOTATIONS_LIMIT: Final = 256 * 1024


def annotations_size(annotations: dict[str, str]) -> int:
    return sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())


def metadata(obj: Obj, *, namespace_name: bool = False) -> list[FieldError]:
    errors: list[FieldError] = []
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [required("metadata")]
    name = meta.get("name")
    if not name:
        errors.append(required("metadata.name", "name or generateName is required"))
    elif not isinstance(name, str):
        errors.append(invalid("metadata.name", name, "must be a string"))
    elif namespace_name and (len(name) > 63 or not _LABEL.match(name)):
        errors.append(invalid("metadata.name", name, LABEL_MSG))
    elif len(name) > 253 or not _SUBDOMAIN.match(name):
        errors.append(invalid("metadata.name", name, SUBDOMAIN_MSG))
    errors += label_errors(meta.get("labels"), "metadata.labels")
    annotations = meta.get("annotations")
    if annotations is not None and (
        not isinstance(annotations, dict)
        or not all(isinstance(v, str) for v in annotations.values())
    ):
        errors.append(invalid("metadata.annotations", annotations, "must be a map of strings"))
    elif annotations and annotations_size(annotations) > ANNOTATIONS_LIMIT:
        errors.append(
            FieldError(
                "metadata.annotations",
                "FieldValueTooLong",
                f"must have at most {ANNOTATIONS_LIMIT} bytes",
            )
        )
    finalizers = meta.get("finalizers")
    if finalizers is not None and (
        not isinstance(finalizers, list) or not all(isinstance(f, str) for f in finalizers)
    ):
        errors.append(invalid("metadata.finalizers", finalizers, "must be a list of strings"))
    for i, ref in enumerate(meta.get("ownerReferences") or ()):
        path = f"metadata.ownerReferences[{i}]"
        if not isinstance(ref, dict):
            errors.append(invalid(path, ref, "must be an object"))
            continue
        for key in ("apiVersion", "kind", "name", "uid"):
            if not ref.get(key):
                errors.append(required(f"{path}.{key}", f"{key} must not be empty"))
    controllers = [
        r for r in meta.get("ownerReferences") or () if isinstance(r, dict) and r.get("controller")
    ]
    if len(controllers) > 1:
        errors.append(
            invalid(
                "metadata.ownerReferences",
                OMIT,
                "Only one reference can have Controller set to true",
            )
        )
    return errors


def metadata_update(old: Obj, new: Obj) -> list[FieldError]:
    errors = label_errors(get_path(new, "metadata", "labels"), "metadata.labels")
    if get_path(new, "metadata", "uid") not in (None, "", get_path(old, "metadata", "uid")):
        errors.append(immutable("metadata.uid", get_path(new, "metadata", "uid")))
    return errors


# -- pods ---------------------------------------------------------------------------------

_RESTART_POLICIES: Final = ("Always", "OnFailure", "Never")


def pod_spec(spec: Any, path: str) -> list[FieldError]:
    if not isinstance(spec, dict):
        return [required(path)]
    errors: list[FieldError] = []
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers:
        errors.append(required(f"{path}.containers"))
        containers = []
    names: set[str] = set()
    for field in ("initContainers", "containers"):
        for i, container in enumerate(spec.get(field) or ()):
            where = f"{path}.{field}[{i}]"
            if not isinstance(container, dict):
                errors.append(invalid(where, container, "must be an object"))
                continue
            name = container.get("name")
            if not name:
                errors.append(required(f"{where}.name"))
            elif name in names:
                errors.append(FieldError(f"{where}.name", "FieldValueDuplicate", value=name))
            else:
                names.add(name)
            if not container.get("image"):
                errors.append(required(f"{where}.image"))
            errors += _resources(container.get("resources"), f"{where}.resources")
    policy = spec.get("restartPolicy")
    if policy is not None and policy not in _RESTART_POLICIES:
        errors.append(not_supported(f"{path}.restartPolicy", policy, _RESTART_POLICIES))
    errors += label_errors(spec.get("nodeSelector"), f"{path}.nodeSelector")
    return errors


def _quantity_units(name: str, value: Any) -> float | None:
    from events.quantity import QuantityError, parse_quantity

    try:
        return float(parse_quantity(value))
    except (QuantityError, TypeError):
        return None


def _extended(name: str) -> bool:
    """A resource name outside the kubernetes.io domain (the native ones have no domain)."""
    domain = name.split("/", 1)[0] if "/" in name else ""
    return bool(domain) and domain != "kubernetes.io" and not domain.endswith(".kubernetes.io")


def _resources(resources: Any, path: str) -> list[FieldError]:
    if resources is None:
        return []
    if not isinstance(resources, dict):
        return [invalid(path, resources, "must be an object")]
    errors: list[FieldError] = []
    parsed: dict[str, dict[str, float]] = {}
    for part in ("limits", "requests"):
        values = resources.get(part) or {}
        if not isinstance(values, dict):
            errors.append(invalid(f"{path}.{part}", values, "must be a map"))
            continue
        parsed[part] = {}
        for name, value in values.items():
            units = _quantity_units(name, value)
            if units is None or units < 0:
                errors.append(invalid(f"{path}.{part}[{name}]", value, "must be a valid quantity"))
            else:
                parsed[part][name] = units
    for name, request in parsed.get("requests", {}).items():
        limit = parsed.get("limits", {}).get(name)
        if _extended(name):
            # An extended resource (nvidia.com/gpu) is never overcommitted: the real server
            # wants its limit, equal to the request.
            if limit is None:
                errors.append(
                    required(f"{path}.limits", "Limit must be set for non overcommitable resources")
                )
            elif request != limit:
                errors.append(
                    invalid(
                        f"{path}.requests[{name}]",
                        resources["requests"][name],
                        f"must be equal to {name} limit of {resources['limits'][name]}",
                    )
                )
            continue
        if limit is not None and request > limit:
            value = resources["requests"][name]
            errors.append(
                invalid(
                    f"{path}.requests",
                    value,
                    f"must be less than or equal to {name} limit of {resources['limits'][name]}",
                )
            )
    return errors


def pod_create(obj: Obj) -> list[FieldError]:
    errors = pod_spec(obj.get("spec"), "spec")
    if get_path(obj, "spec", "nodeName") and get_path(obj, "spec", "schedulingGates"):
        errors.append(
            forbidden("spec.nodeName", "cannot be set until all schedulingGates have been cleared")
        )
    return errors


_POD_UPDATE_MSG: Final = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only "
    "additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be "
    "set to 1 if it was previously negative)"
)


def pod_update(old: Obj, new: Obj) -> list[FieldError]:
    """`ValidatePodUpdate`: the spec is immutable except for a few fields."""
    old_spec = clone(old.get("spec") or {})
    new_spec = new.get("spec") or {}
    errors: list[FieldError] = []
    old_gates = [
        g.get("name") for g in old_spec.get("schedulingGates") or () if isinstance(g, dict)
    ]
    new_gates = [
        g.get("name") for g in new_spec.get("schedulingGates") or () if isinstance(g, dict)
    ]
    for gate in new_gates:
        if gate not in old_gates:
            errors.append(
                forbidden(
                    "spec.schedulingGates",
                    f"only deletion is allowed, but found new scheduling gate '{gate}'",
                )
            )
    # Everything that may change is copied from the new spec; what remains must be equal.
    for field in ("containers", "initContainers"):
        olds, news = old_spec.get(field) or [], new_spec.get(field) or []
        if isinstance(olds, list) and isinstance(news, list) and len(olds) == len(news):
            for old_c, new_c in zip(olds, news, strict=True):
                if isinstance(old_c, dict) and isinstance(new_c, dict) and "image" in new_c:
                    old_c["image"] = new_c["image"]
    for field in ("activeDeadlineSeconds", "schedulingGates"):
        if field in new_spec:
            old_spec[field] = clone(new_spec[field])
        else:
            old_spec.pop(field, None)
    old_tolerations = old_spec.get("tolerations") or []
    new_tolerations = new_spec.get("tolerations") or []
    if isinstance(new_tolerations, list) and all(t in new_tolerations for t in old_tolerations):
        old_spec["tolerations"] = clone(new_tolerations)
    if old_gates:
        # A gated pod may gain node selector terms (never change or drop existing ones).
        old_selector = old_spec.get("nodeSelector") or {}
        new_selector = new_spec.get("nodeSelector") or {}
        if isinstance(new_selector, dict) and all(
            new_selector.get(k) == v for k, v in old_selector.items()
        ):
            old_spec["nodeSelector"] = clone(new_selector)
        if (
            get_path(new_spec, "affinity", "nodeAffinity") is not None
            or get_path(old_spec, "affinity", "nodeAffinity") is None
        ):
            affinity = dict(old_spec.get("affinity") or {})
            node_affinity = get_path(new_spec, "affinity", "nodeAffinity")
            if node_affinity is not None:
                affinity["nodeAffinity"] = clone(node_affinity)
            old_spec["affinity"] = affinity
    for spec in (old_spec, new_spec):
        for key in ("tolerations", "nodeSelector", "affinity", "schedulingGates"):
            if spec.get(key) in ({}, [], None):
                spec.pop(key, None)
    if old_spec != new_spec and not errors:
        errors.append(forbidden("spec", _POD_UPDATE_MSG))
    return errors


_TERMINAL: Final = ("Succeeded", "Failed")


def pod_status_update(old: Obj, new: Obj) -> list[FieldError]:
    old_phase = get_path(old, "status", "phase")
    new_phase = get_path(new, "status", "phase")
    if old_phase in _TERMINAL and new_phase != old_phase:
        return [
            forbidden(
                "status.phase", f"cannot transition from terminal phase {old_phase} to {new_phase}"
            )
        ]
    return []


def non_negative(value: Any, path: str) -> list[FieldError]:
    if value is None:
        return []
    if not isinstance(value, int) or isinstance(value, bool):
        return [invalid(path, value, "must be an integer")]
    if value < 0:
        return [invalid(path, value, "must be greater than or equal to 0")]
    return []


def condition_true(status: Any, type_: str) -> bool:
    for condition in get_path(status, "conditions") or ():
        if isinstance(condition, dict) and condition.get("type") == type_:
            return bool(condition.get("status") == "True")
    return False


def job_status_update(old: Obj, new: Obj) -> list[FieldError]:
    """The Job status rules (`daemon.sim.job_status`), reachable from here as well: callers
    outside the sim use this module as the one place for the server's checks."""
    from daemon.sim.job_status import job_status_update as rules  # the rules import this module

    return rules(old, new)
