"""Workloads and PodGroups as kbatchd writes them: one model (`GroupTemplate`), encoded in the
version of ``scheduling.k8s.io`` the cluster serves, with the names upstream's Job controller
gives the objects it makes for a Job (KEP-5547), so that either controller finds the other's.

The versions differ in three places (spec 2.1-2.4): a PodGroup names its template as
``podGroupTemplateRef.workload`` in v1alpha2 (Kubernetes 1.36) and as ``workloadRef`` in
v1beta1 (1.37; v1alpha3 has the same shape); the disruption mode is a string there
(``Pod``/``PodGroup``) and a one-member union here (``single``/``all``); and v1alpha2 gates a
template's priority and disruption mode behind ``WorkloadAwarePreemption``, so kbatchd writes
them only where the API takes them ungated.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

GROUP: Final = "scheduling.k8s.io"
V1ALPHA2: Final = f"{GROUP}/v1alpha2"
V1BETA1: Final = f"{GROUP}/v1beta1"
V1ALPHA3: Final = f"{GROUP}/v1alpha3"

Disruption = Literal["single", "all"]

# A DNS subdomain, the longest name an object may have; template names are DNS labels.
MAX_NAME: Final = 253
MAX_LABEL: Final = 63
# rand.SafeEncodeString's alphabet: no vowels, no look-alike digits.
_SAFE: Final = "bcdfghjklmnpqrstvwxz2456789"


class GroupTemplate(msgspec.Struct, frozen=True):
    """One PodGroup template: what a Workload holds and each PodGroup made from it copies."""

    name: str
    # None: a basic group (no quorum); else the gang's minCount.
    min_count: int | None
    # ``schedulingConstraints.topology[0].key``: every member inside one value of this label.
    topology_key: str | None = None
    disruption: Disruption | None = None
    priority_class_name: str | None = None


class CompositeTemplate(msgspec.Struct, frozen=True):
    """A CompositePodGroup template (Kubernetes 1.37, KEP-6012): a gang of PodGroups, one level
    above them. Only v1beta1 and v1alpha3 Workloads hold one."""

    name: str
    # None: a basic group; else the gang's minGroupCount (child groups, not pods).
    min_group_count: int | None
    children: tuple[GroupTemplate, ...]
    topology_key: str | None = None
    disruption: Disruption | None = None
    priority_class_name: str | None = None


class OwnerRef(msgspec.Struct, frozen=True):
    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool = False

    def body(self) -> dict[str, Any]:
        ref: dict[str, Any] = {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "uid": self.uid,
        }
        if self.controller:
            ref["controller"] = True
            ref["blockOwnerDeletion"] = True
        return ref


def _fnv32a(*parts: bytes) -> int:
    value = 0x811C9DC5
    for part in parts:
        for byte in part:
            value = ((value ^ byte) * 0x01000193) & 0xFFFFFFFF
    return value


def _safe(number: int) -> str:
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in str(number))


def workload_name(job_name: str, job_uid: str) -> str:
    """``<job>-<hash>``: the hash is FNV-32a of the Job's UID as Go's deep-hash printer writes
    a ``types.UID`` (type in parentheses, value unquoted), so it is stable across restarts and
    the same as upstream's."""
    suffix = _safe(_fnv32a(f"(types.UID){job_uid}".encode()))
    return f"{job_name[: MAX_NAME - len(suffix) - 1]}-{suffix}"


def template_name(job_name: str) -> str:
    """The Job's one template, ``<job>-pgt-0``. Job names of 58 characters or more make it
    longer than a DNS label, which the API refuses (kubernetes/kubernetes#142844)."""
    return f"{job_name}-pgt-0"


def podgroup_name(workload: str, template: str) -> str:
    """``<workload>-<template>-<hash of both>``, each part cut to fit a name: one shorter
    than half the room leaves the rest to the other; both longer share it evenly."""
    suffix = _safe(_fnv32a(workload.encode(), template.encode()))
    room = MAX_NAME - len(suffix) - 2
    if len(workload) + len(template) > room:
        half = room // 2
        if len(workload) <= half:
            template = template[: room - len(workload)]
        elif len(template) <= half:
            workload = workload[: room - len(template)]
        else:
            workload, template = workload[: room - half], template[:half]
    return f"{workload}-{template}-{suffix}"


def _disruption(version: str, mode: Disruption) -> Any:
    if version == V1ALPHA2:
        return "PodGroup" if mode == "all" else "Pod"
    return {mode: {}}


def group_fields(version: str, template: GroupTemplate) -> dict[str, Any]:
    """The fields a template and the PodGroups made from it share."""
    fields: dict[str, Any] = {
        "schedulingPolicy": (
            {"basic": {}}
            if template.min_count is None
            else {"gang": {"minCount": template.min_count}}
        )
    }
    if template.topology_key is not None:
        fields["schedulingConstraints"] = {"topology": [{"key": template.topology_key}]}
    if version != V1ALPHA2:
        if template.disruption is not None:
            fields["disruptionMode"] = _disruption(version, template.disruption)
        if template.priority_class_name is not None:
            fields["priorityClassName"] = template.priority_class_name
    return fields


def composite_fields(template: CompositeTemplate) -> dict[str, Any]:
    """The fields a composite template and the CompositePodGroups made from it share."""
    count = template.min_group_count
    fields: dict[str, Any] = {
        "schedulingPolicy": {"basic": {}} if count is None else {"gang": {"minGroupCount": count}}
    }
    if template.topology_key is not None:
        fields["schedulingConstraints"] = {"topology": [{"key": template.topology_key}]}
    if template.disruption is not None:
        fields["disruptionMode"] = {template.disruption: {}}
    if template.priority_class_name is not None:
        fields["priorityClassName"] = template.priority_class_name
    return fields


def workload_body(
    version: str,
    controller: tuple[str, str, str],
    templates: list[GroupTemplate],
    owner: OwnerRef,
    annotations: dict[str, str] | None = None,
    composites: tuple[CompositeTemplate, ...] = (),
) -> dict[str, Any]:
    """A Workload whose ``spec.controllerRef`` is `controller` (API group, kind, name), with
    `templates` at its top level and `composites` (not in v1alpha2) holding theirs."""
    group, kind, name = controller
    metadata: dict[str, Any] = {"ownerReferences": [owner.body()]}
    if annotations:
        metadata["annotations"] = dict(annotations)
    spec: dict[str, Any] = {"controllerRef": {"apiGroup": group, "kind": kind, "name": name}}
    if templates:
        spec["podGroupTemplates"] = [
            {"name": t.name, **group_fields(version, t)} for t in templates
        ]
    if composites:
        spec["compositePodGroupTemplates"] = [
            {
                "name": c.name,
                **composite_fields(c),
                "podGroupTemplates": [
                    {"name": t.name, **group_fields(version, t)} for t in c.children
                ],
            }
            for c in composites
        ]
    return {"apiVersion": version, "kind": "Workload", "metadata": metadata, "spec": spec}


def composite_body(
    workload: str, template: CompositeTemplate, owners: list[OwnerRef]
) -> dict[str, Any]:
    """A root CompositePodGroup made from `template` of `workload` (v1alpha3 only)."""
    return {
        "apiVersion": V1ALPHA3,
        "kind": "CompositePodGroup",
        "metadata": {"ownerReferences": [o.body() for o in owners]},
        "spec": {
            "workloadRef": {"workloadName": workload, "templateName": template.name},
            **composite_fields(template),
        },
    }


def podgroup_body(
    version: str,
    workload: str,
    template: GroupTemplate,
    owners: list[OwnerRef],
    annotations: dict[str, str] | None = None,
    parent: str | None = None,
) -> dict[str, Any]:
    """A PodGroup made from `template` of `workload`, its fields copied from the template (the
    API keeps no link that would fill them in); a child of the CompositePodGroup `parent`
    (not in v1alpha2)."""
    if version == V1ALPHA2:
        ref: dict[str, Any] = {
            "podGroupTemplateRef": {
                "workload": {"workloadName": workload, "podGroupTemplateName": template.name}
            }
        }
    else:
        ref = {"workloadRef": {"workloadName": workload, "templateName": template.name}}
    metadata: dict[str, Any] = {"ownerReferences": [o.body() for o in owners]}
    if annotations:
        metadata["annotations"] = dict(annotations)
    if parent is not None:
        ref["parentCompositePodGroupName"] = parent
    return {
        "apiVersion": version,
        "kind": "PodGroup",
        "metadata": metadata,
        "spec": {**ref, **group_fields(version, template)},
    }
