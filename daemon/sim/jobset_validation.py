"""The JobSet validating webhook of the simulated cluster (spec B0–B5): what upstream's webhook
rejects on create, plus a `dependsOn` naming its own replicatedJob (which upstream lets through
and which would wait forever), as 422 field errors.

The spec rules are kbatchd's own (`daemon.controllers.jobset.validation`): the reconciler refuses
the same JobSets when they reach a cluster that has no webhook. The rules about claims that
already exist need the store and live here (spec C9.5).
"""

from __future__ import annotations

from typing import Any, Final

from daemon.controllers.jobset.spec import RETAIN, pvc_name, template_name
from daemon.controllers.jobset.validation import validate_raw
from daemon.sim.errors import OMIT, FieldError, invalid
from daemon.sim.resources import lookup
from daemon.sim.store import Store

Obj = dict[str, Any]

_PVCS: Final = lookup("", "v1", "persistentvolumeclaims")


def jobset_create(obj: Obj) -> list[FieldError]:
    name = (obj.get("metadata") or {}).get("name") or ""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [invalid("spec", OMIT, "must be an object")]
    return [invalid(path, OMIT, message) for path, message in validate_raw(name, spec)]


def existing_claims(store: Store, obj: Obj) -> list[FieldError]:
    """A claim the JobSet would create that already exists must come from a `Retain` policy
    with the same spec: the JobSet then reuses it (spec B4)."""
    assert _PVCS is not None
    meta = obj.get("metadata") or {}
    name, namespace = meta.get("name") or "", meta.get("namespace") or ""
    errors: list[FieldError] = []
    policies = (obj.get("spec") or {}).get("volumeClaimPolicies") or ()
    for i, policy in enumerate(policies):
        if not isinstance(policy, dict):
            continue
        when = (policy.get("retentionPolicy") or {}).get("whenDeleted", "Delete")
        for j, template in enumerate(policy.get("templates") or ()):
            if not isinstance(template, dict):
                continue
            claim = pvc_name(name, template_name(template))
            stored = store.get(_PVCS, namespace, claim)
            if stored is None:
                continue
            path = f"spec.volumeClaimPolicies[{i}]"
            if when != RETAIN:
                errors.append(
                    invalid(
                        f"{path}.retentionPolicy.whenDeleted",
                        when,
                        f"retention policy must be Retain for existing PVC {claim}",
                    )
                )
            if (stored.obj.get("spec") or {}) != (template.get("spec") or {}):
                errors.append(
                    invalid(
                        f"{path}.templates[{j}].spec",
                        OMIT,
                        f"must equal the spec of the existing PVC {claim}",
                    )
                )
    return errors
