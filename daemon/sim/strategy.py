"""Per-kind create/update rules (the registry "strategies" of the real server): defaulting,
what an update of the object or of its status may touch, when generation bumps, and which
validation runs.
"""

from __future__ import annotations

from typing import Any, Final

from daemon.sim import defaults, job_status, job_validation, jobset_validation, validation
from daemon.sim.errors import FieldError, forbidden
from daemon.sim.resources import Resource

Obj = dict[str, Any]

# Metadata a status write cannot change (`metav1.ResetObjectMetaForStatus`).
_STATUS_LOCKED_META: Final = (
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "managedFields",
)


def prepare_create(resource: Resource, obj: Obj, priority: tuple[int, str]) -> None:
    """Defaults and status reset on create; the uid is already assigned."""
    kind = resource.kind
    if kind == "Pod":
        defaults.pod(obj, *priority)
    elif kind == "Job":
        defaults.job(obj)
        defaults.job_selector(obj)
    elif kind == "JobSet":
        defaults.jobset(obj)
    elif kind == "Namespace":
        obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
        obj["status"] = {"phase": "Active"}
    elif kind == "PersistentVolumeClaim":
        obj["status"] = {"phase": "Pending"}
    elif kind == "Service":
        obj["status"] = {"loadBalancer": {}}
    elif resource.has_status and kind != "Node":
        # Kinds with a status subresource ignore status on create (nodes register with theirs).
        obj.pop("status", None)


def validate_create(resource: Resource, obj: Obj) -> list[FieldError]:
    errors = validation.metadata(obj, namespace_name=resource.kind == "Namespace")
    if resource.kind == "Pod":
        errors += validation.pod_create(obj)
    elif resource.kind == "Job":
        errors += job_validation.job_create(obj)
    elif resource.kind == "JobSet":
        errors += jobset_validation.jobset_create(obj)
    return errors


def _spec_part(resource: Resource, obj: Obj) -> Any:
    if resource.crd:
        return {k: v for k, v in obj.items() if k not in ("metadata", "status")}
    return obj.get("spec")


def prepare_update(resource: Resource, old: Obj, new: Obj) -> None:
    """An update of the object itself (a patch's result too): the scheme's defaults again,
    and status is kept when it has its own subresource."""
    if resource.kind == "Pod":
        defaults.pod_scheme(new)
    elif resource.kind == "Job":
        defaults.job_scheme(new)
    elif resource.kind == "JobSet":
        defaults.jobset_schema(new)
    if resource.has_status:
        if "status" in old:
            new["status"] = old["status"]  # stored objects are never mutated: share it
        else:
            new.pop("status", None)
    _bump_generation(resource, old, new)


def prepare_status_update(resource: Resource, old: Obj, new: Obj) -> Obj:
    """A status write: only `status` comes from the request (plus a few metadata fields).

    The result shares what it keeps of `old` (stored objects are never mutated) and takes the
    request's parts as they are (the registry owns the request body); only the metadata dict,
    where the resourceVersion is stamped, is its own."""
    result: Obj = {**old, "metadata": {**old["metadata"]}}
    status = new.get("status")
    if isinstance(status, dict) and resource.kind == "Job":
        result["status"] = job_status.stored_status(status)
    elif status is not None:
        result["status"] = status
    else:
        result.pop("status", None)
    new_meta = new.get("metadata") or {}
    meta = result["metadata"]
    for key, value in new_meta.items():
        if key not in _STATUS_LOCKED_META and key not in (
            "uid",
            "name",
            "namespace",
            "creationTimestamp",
        ):
            meta[key] = value
    return result


def _bump_generation(resource: Resource, old: Obj, new: Obj) -> None:
    meta = new["metadata"]
    generation = old["metadata"].get("generation")
    if not resource.generation or generation is None:
        meta.pop("generation", None)
        return
    meta["generation"] = generation + (
        1 if _spec_part(resource, old) != _spec_part(resource, new) else 0
    )


def validate_update(resource: Resource, old: Obj, new: Obj) -> list[FieldError]:
    errors = validation.metadata(new, namespace_name=resource.kind == "Namespace")
    errors += validation.metadata_update(old, new)
    if resource.kind == "Pod":
        errors += validation.pod_update(old, new)
    elif resource.kind == "Job":
        errors += job_validation.job_update(old, new)
    elif resource.kind == "JobSet":
        errors += job_validation.jobset_update(old, new)
    deleting = old["metadata"].get("deletionTimestamp") is not None
    if deleting:
        before = set(old["metadata"].get("finalizers") or ())
        added = [f for f in new["metadata"].get("finalizers") or () if f not in before]
        if added:
            errors.append(
                forbidden(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers {added}",
                )
            )
    return errors


def validate_status_update(resource: Resource, old: Obj, new: Obj) -> list[FieldError]:
    if resource.kind == "Job":
        return job_status.job_status_update(old, new)
    if resource.kind == "Pod":
        return validation.pod_status_update(old, new)
    return []
