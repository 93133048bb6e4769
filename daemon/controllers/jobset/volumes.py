"""Volume claim policies (spec B4, KEP-572): one shared claim per template per JobSet, and the
volumes of the child Jobs that mount it.

- ``whenDeleted: Delete`` (default): the claim has a controller reference to the JobSet, so the
  garbage collector removes it with the JobSet object (not when the JobSet finishes).
- ``Retain``: no owner; the claim outlives the JobSet and a later JobSet of the same name
  reuses it (an existing claim is never re-created or changed).
- ★ Beyond upstream, ``kbatchd.dev/scratch: "true"`` on a template (with ``Delete``): the
  claim is deleted as soon as the JobSet finishes — for large scratch space that must not be
  held by a finished JobSet that nobody has deleted yet.

Claims are created even while the JobSet is suspended (upstream), so that a queueing system
resuming it finds them bound.
"""

from __future__ import annotations

from typing import Any

from daemon.controllers.jobset.spec import (
    DELETE,
    JOBSET_NAME,
    JobSetView,
    is_scratch,
    pvc_name,
    template_name,
)
from events.intents import Create, Delete, Intent
from events.state import State


def claim_body(view: JobSetView, template: dict[str, Any], owned: bool) -> dict[str, Any]:
    """upstream `createPVCsIfNecessary`: the template's labels plus `jobset-name`, its
    annotations and spec, and a controller reference when the policy is `Delete`."""
    name = template_name(template)
    meta = template.get("metadata") if isinstance(template.get("metadata"), dict) else {}
    assert isinstance(meta, dict)
    labels = dict(meta.get("labels") or {})
    labels[JOBSET_NAME] = view.name
    metadata: dict[str, Any] = {
        "name": pvc_name(view.name, name),
        "namespace": view.namespace,
        "labels": labels,
    }
    if meta.get("annotations"):
        metadata["annotations"] = dict(meta["annotations"])
    if owned:
        metadata["ownerReferences"] = [view.owner_reference()]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": metadata,
        "spec": dict(template.get("spec") or {}),
    }


def missing_claims(state: State, cluster: str, view: JobSetView) -> list[Intent]:
    """A create for each claim the cluster does not hold yet (existing ones are left as
    they are, whoever made them)."""
    intents: list[Intent] = []
    pvcs = state.pvcs
    for policy in view.spec.volume_claim_policies or ():
        owned = policy.retention_policy.when_deleted == DELETE
        for template in policy.templates:
            name = pvc_name(view.name, template_name(template))
            if f"{cluster}/{view.namespace}/{name}" in pvcs:
                continue
            intents.append(
                Create(
                    cluster,
                    "PersistentVolumeClaim",
                    view.namespace,
                    name,
                    body=claim_body(view, template, owned),
                )
            )
    return intents


def finished_scratch(state: State, cluster: str, view: JobSetView) -> list[Intent]:
    """Deletes of the scratch claims of a finished JobSet that still exist (and are this
    JobSet's: the uid guards against a same-named claim made since)."""
    intents: list[Intent] = []
    for policy in view.spec.volume_claim_policies or ():
        for template in policy.templates:
            if not is_scratch(template):
                continue
            name = pvc_name(view.name, template_name(template))
            claim = state.pvcs.get(f"{cluster}/{view.namespace}/{name}")
            if claim is None or claim.deletion_ts is not None:
                continue
            owner = claim.controller
            if owner is None or owner.uid != view.jobset.uid:
                continue
            intents.append(
                Delete(
                    cluster,
                    "PersistentVolumeClaim",
                    view.namespace,
                    name,
                    precondition_uid=claim.uid,
                )
            )
    return intents


def add_volumes(view: JobSetView, pod_spec: dict[str, Any]) -> None:
    """upstream `addVolumes`: a `persistentVolumeClaim` volume named after each template that
    some container or init container of this pod template mounts."""
    mounted: set[str] = set()
    for field in ("containers", "initContainers"):
        for container in pod_spec.get(field) or ():
            if isinstance(container, dict):
                for mount in container.get("volumeMounts") or ():
                    if isinstance(mount, dict) and isinstance(mount.get("name"), str):
                        mounted.add(mount["name"])
    volumes: list[Any] = list(pod_spec.get("volumes") or [])
    added = False
    for policy in view.spec.volume_claim_policies or ():
        for template in policy.templates:
            name = template_name(template)
            if name not in mounted:
                continue
            volumes.append(
                {
                    "name": name,
                    "persistentVolumeClaim": {"claimName": pvc_name(view.name, name)},
                }
            )
            added = True
    if added:
        pod_spec["volumes"] = volumes
