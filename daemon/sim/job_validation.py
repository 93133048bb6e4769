"""Job and JobSet spec validation: create rules, immutable fields, and the pod template
relaxations for suspended Jobs (spec/job-and-jobset.md A2/A3): scheduling directives while
suspended and never started or drained, container resources only once drained."""

from __future__ import annotations

from typing import Any, Final

from daemon.sim.errors import OMIT, FieldError, immutable, invalid, not_supported, required
from daemon.sim.selectors import selector_matches
from daemon.sim.validation import (
    MANAGED_BY,
    condition_true,
    get_path,
    label_errors,
    non_negative,
    pod_spec,
)
from events.jsondata import clone

Obj = dict[str, Any]

# -- jobs ---------------------------------------------------------------------------------

_COMPLETION_MODES: Final = ("NonIndexed", "Indexed")
_REPLACEMENT: Final = ("TerminatingOrFailed", "Failed")
_JOB_RESTART: Final = ("OnFailure", "Never")


def job_create(obj: Obj) -> list[FieldError]:
    errors = job_spec(obj)
    name = get_path(obj, "metadata", "name") or ""
    if not get_path(obj, "spec", "manualSelector") and len(name) > 63:
        errors.append(invalid("spec.template.labels", name, "must be no more than 63 characters"))
    return errors


def job_spec(obj: Obj) -> list[FieldError]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [required("spec")]
    errors: list[FieldError] = []
    for field in (
        "parallelism",
        "completions",
        "backoffLimit",
        "activeDeadlineSeconds",
        "ttlSecondsAfterFinished",
        "backoffLimitPerIndex",
        "maxFailedIndexes",
    ):
        errors += non_negative(spec.get(field), f"spec.{field}")
    mode = spec.get("completionMode")
    if mode not in _COMPLETION_MODES:
        errors.append(not_supported("spec.completionMode", mode, _COMPLETION_MODES))
    if mode == "Indexed" and spec.get("completions") is None:
        errors.append(required("spec.completions", "when completion mode is Indexed"))
    policy = spec.get("podReplacementPolicy")
    if spec.get("podFailurePolicy") is not None and policy != "Failed":
        errors.append(not_supported("spec.podReplacementPolicy", policy, ("Failed",)))
    elif policy not in _REPLACEMENT:
        errors.append(not_supported("spec.podReplacementPolicy", policy, _REPLACEMENT))
    managed_by = spec.get("managedBy")
    if managed_by is not None:
        if not isinstance(managed_by, str) or not MANAGED_BY.match(managed_by):
            errors.append(
                invalid(
                    "spec.managedBy",
                    managed_by,
                    'must be a domain-prefixed path (such as "acme.io/foo")',
                )
            )
        elif len(managed_by) > 63:
            errors.append(
                FieldError(
                    "spec.managedBy",
                    "FieldValueTooLong",
                    "may not be more than 63 bytes",
                    managed_by,
                )
            )
    template = spec.get("template")
    if not isinstance(template, dict):
        return [*errors, required("spec.template")]
    errors += label_errors(
        get_path(template, "metadata", "labels"), "spec.template.metadata.labels"
    )
    errors += pod_spec(template.get("spec"), "spec.template.spec")
    restart = get_path(template, "spec", "restartPolicy")
    if restart not in _JOB_RESTART:
        errors.append(not_supported("spec.template.spec.restartPolicy", restart, _JOB_RESTART))
    selector = spec.get("selector")
    if selector is None:
        errors.append(required("spec.selector"))
    else:
        labels = get_path(template, "metadata", "labels") or {}
        if not selector_matches(selector, labels):
            errors.append(
                invalid(
                    "spec.template.metadata.labels",
                    labels,
                    "`selector` does not match template `labels`",
                )
            )
    return errors


def _strip_node_affinity(affinity: Any) -> Any:
    if not isinstance(affinity, dict):
        return affinity
    rest = {k: v for k, v in affinity.items() if k != "nodeAffinity"}
    return rest or None


def _directives_allowed(old: Obj) -> bool:
    status = old.get("status") or {}
    if get_path(old, "spec", "suspend") is not True:
        return False
    never_started = status.get("startTime") is None
    drained = condition_true(status, "Suspended") and not status.get("active")
    return never_started or drained


def _resources_allowed(old: Obj) -> bool:
    status = old.get("status") or {}
    return (
        get_path(old, "spec", "suspend") is True
        and condition_true(status, "Suspended")
        and not status.get("active")
    )


def _template_without_allowed(old_tpl: Any, new_tpl: Any, old: Obj) -> tuple[Any, Any]:
    """Both templates with the fields that may change right now made equal."""
    old_t = clone(old_tpl) if isinstance(old_tpl, dict) else old_tpl
    new_t = clone(new_tpl) if isinstance(new_tpl, dict) else new_tpl
    if not isinstance(old_t, dict) or not isinstance(new_t, dict):
        return old_t, new_t
    if _directives_allowed(old):
        for t in (old_t, new_t):
            meta = t.setdefault("metadata", {}) if isinstance(t.get("metadata", {}), dict) else {}
            meta.pop("labels", None)
            meta.pop("annotations", None)
            spec = t.get("spec")
            if isinstance(spec, dict):
                for key in ("nodeSelector", "tolerations", "schedulingGates"):
                    spec.pop(key, None)
                affinity = _strip_node_affinity(spec.pop("affinity", None))
                if affinity is not None:
                    spec["affinity"] = affinity
    if _resources_allowed(old):
        for field in ("containers", "initContainers"):
            olds, news = get_path(old_t, "spec", field), get_path(new_t, "spec", field)
            if not isinstance(olds, list) or not isinstance(news, list) or len(olds) != len(news):
                continue
            for old_c, new_c in zip(olds, news, strict=True):
                if not isinstance(old_c, dict) or not isinstance(new_c, dict):
                    continue
                if old_c.get("name") != new_c.get("name"):
                    continue
                for c in (old_c, new_c):
                    resources = c.get("resources")
                    if isinstance(resources, dict):
                        resources.pop("requests", None)
                        resources.pop("limits", None)
    return old_t, new_t


_JOB_IMMUTABLE: Final = (
    "selector",
    "completionMode",
    "podFailurePolicy",
    "successPolicy",
    "backoffLimitPerIndex",
    "managedBy",
    "manualSelector",
)


def job_update(old: Obj, new: Obj) -> list[FieldError]:
    errors = job_spec(new)
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    for field in _JOB_IMMUTABLE:
        if old_spec.get(field) != new_spec.get(field):
            errors.append(immutable(f"spec.{field}", new_spec.get(field)))
    if old_spec.get("completions") != new_spec.get("completions"):
        elastic = (
            new_spec.get("completionMode") == "Indexed"
            and new_spec.get("completions") == new_spec.get("parallelism")
            and new_spec.get("completions") is not None
        )
        if not elastic:
            errors.append(immutable("spec.completions", new_spec.get("completions")))
    old_tpl, new_tpl = _template_without_allowed(
        old_spec.get("template"), new_spec.get("template"), old
    )
    if old_tpl != new_tpl:
        errors.append(immutable("spec.template", new_spec.get("template")))
    return errors


# -- jobsets ------------------------------------------------------------------------------

_JOBSET_IMMUTABLE: Final = (
    "network",
    "successPolicy",
    "failurePolicy",
    "startupPolicy",
    "volumeClaimPolicies",
    "managedBy",
)
_JOBSET_MUTABLE_WHILE_SUSPENDED: Final = ("nodeSelector", "tolerations", "schedulingGates")


def jobset_update(old: Obj, new: Obj) -> list[FieldError]:
    """The JobSet webhook's update rules: most of the spec is immutable; the pod templates'
    labels, annotations, nodeSelector, tolerations and schedulingGates may change while the
    JobSet is (or is becoming) suspended."""
    errors: list[FieldError] = []
    old_spec, new_spec = old.get("spec") or {}, new.get("spec") or {}
    for field in _JOBSET_IMMUTABLE:
        if old_spec.get(field) != new_spec.get(field):
            errors.append(invalid(f"spec.{field}", new_spec.get(field), "field is immutable"))
    suspended = old_spec.get("suspend") is True or new_spec.get("suspend") is True
    olds = clone(old_spec.get("replicatedJobs"))
    news = clone(new_spec.get("replicatedJobs"))
    if suspended and isinstance(olds, list) and isinstance(news, list):
        for rj in olds + news:
            template = get_path(rj, "template", "spec", "template")
            if not isinstance(template, dict):
                continue
            meta = template.get("metadata")
            if isinstance(meta, dict):
                meta.pop("labels", None)
                meta.pop("annotations", None)
            pod = template.get("spec")
            if isinstance(pod, dict):
                for key in _JOBSET_MUTABLE_WHILE_SUSPENDED:
                    pod.pop(key, None)
    if olds != news:
        errors.append(invalid("spec.replicatedJobs", OMIT, "field is immutable"))
    return errors
