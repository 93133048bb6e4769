"""The API operations on stored objects: create, update, patch, delete (with grace periods,
finalizers, preconditions and propagation policies), pod binding and eviction.

Every operation runs synchronously on the event loop, so each is atomic with respect to the
others, like a single etcd transaction. The HTTP layer and the node agent both call these.
A write takes over the object it is given: parts of it may be stored as they are and shared
with later versions, so a caller never changes it afterwards.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from daemon.sim import jobset_validation, shapes, strategy
from daemon.sim.errors import (
    STALE,
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    invalid_object,
    not_found,
    unsupported_media_type,
)
from daemon.sim.patch import PatchError, json_patch, merge_patch, strategic_merge_patch
from daemon.sim.resources import NAMESPACES, PODS, Resource, lookup
from daemon.sim.store import Obj, Store, Stored, encode, parse_rfc3339, rfc3339

MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"
APPLY_PATCH: Final = "application/apply-patch+yaml"

FOREGROUND: Final = "foregroundDeletion"
ORPHAN: Final = "orphan"
_PRIORITY_CLASSES: Final = lookup("scheduling.k8s.io", "v1", "priorityclasses")


_NAMESPACE_MISMATCH: Final = (
    "the namespace of the provided object does not match the namespace sent on the request"
)


def _uid_mismatch(requested: str, actual: str) -> str:
    return f"Precondition failed: UID in precondition: {requested}, UID in object meta: {actual}"


# What a shape the checks in `shapes` do not describe can still raise deep in defaulting or
# validation: it is the client's malformed object, never a server error.
_MALFORMED: Final = (AttributeError, TypeError, KeyError, ValueError)


def _malformed(resource: Resource, exc: Exception) -> ApiError:
    return bad_request(f"malformed {resource.kind}: {type(exc).__name__}: {exc}")


FIELD_VALIDATIONS: Final = ("Ignore", "Strict", "Warn")


@dataclass(slots=True)
class FieldValidation:
    """What a write asked (`fieldValidation`) for the fields its kind does not declare. They
    are dropped in every mode: Strict refuses the write, Warn answers a warning per field."""

    mode: str = "Warn"
    warnings: list[str] = field(default_factory=list)

    def unknown(self, resource: Resource, paths: list[str], patched: str | None = None) -> None:
        """Act on the unknown fields a decode found; `patched` is what the real server quotes
        when a patch brought them."""
        if not paths or self.mode == "Ignore":
            return
        if self.mode == "Warn":
            self.warnings += [f'unknown field "{path}"' for path in paths]
            return
        text = "strict decoding error: " + ", ".join(f'unknown field "{p}"' for p in paths)
        if patched is None:
            kind, version = resource.kind, resource.version
            raise bad_request(
                f'{kind} in version "{version}" cannot be handled as a {kind}: {text}'
            )
        cause = f"Invalid value: {encode(patched).decode()}: {text}"
        raise ApiError(
            422,
            "Invalid",
            f' "" is invalid: patch: {cause}',
            {"causes": [{"reason": "FieldValueInvalid", "message": cause, "field": "patch"}]},
        )


def go_map(value: Any) -> str:
    """A decoded JSON value as Go's `%v` prints it (how a strategic merge patch is quoted)."""
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_map(value[k])}" for k in sorted(value)) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_map(item) for item in value) + "]"
    if isinstance(value, bool):
        return "true" if value else "false"
    return "<nil>" if value is None else str(value)


@dataclass(frozen=True, slots=True)
class DeleteOptions:
    grace_seconds: int | None = None
    propagation: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    dry_run: bool = False


@dataclass(frozen=True, slots=True)
class DeleteResult:
    obj: Obj
    deleted: bool  # gone now (200) rather than pending grace or finalizers (202)


def _meta(obj: Any) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise bad_request("the object provided is not a JSON object")
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise bad_request("metadata must be a JSON object")
    return meta


class Registry:
    def __init__(self, store: Store):
        self.store = store

    # -- helpers --------------------------------------------------------------------------

    def get(self, resource: Resource, namespace: str, name: str) -> Stored:
        """The stored object, or 404 NotFound."""
        stored = self.store.get(resource, namespace if resource.namespaced else "", name)
        if stored is None:
            raise not_found(resource.plural, resource.group, name)
        return stored

    def _check_type(
        self, resource: Resource, obj: Obj, fields: FieldValidation | None = None
    ) -> None:
        api_version, kind = obj.get("apiVersion"), obj.get("kind")
        if api_version not in (None, "", resource.api_version):
            raise bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({resource.api_version})"
            )
        if kind not in (None, "", resource.kind):
            raise bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({resource.kind})"
            )
        obj["apiVersion"] = resource.api_version
        obj["kind"] = resource.kind
        shapes.check(resource.kind, resource.version, obj, resource.group)
        unknown = shapes.prune(resource.kind, obj, resource.group)
        if fields is not None:
            fields.unknown(resource, unknown)
        # null means unset: drop it so that nothing stores `"status": null` and the like.
        for part in (obj, obj["metadata"]):
            for key in [k for k, v in part.items() if v is None]:
                del part[key]

    def _priority(self, obj: Obj) -> tuple[int, str]:
        """The Priority admission plugin: resolve `priorityClassName` to a number."""
        raw_spec = obj.get("spec")
        spec: dict[str, Any] = raw_spec if isinstance(raw_spec, dict) else {}
        assert _PRIORITY_CLASSES is not None
        name = spec.get("priorityClassName")
        if not name:
            for stored in self.store.iter_objects(_PRIORITY_CLASSES):
                if stored.obj.get("globalDefault"):
                    spec["priorityClassName"] = stored.obj["metadata"]["name"]
                    return int(stored.obj.get("value", 0)), str(
                        stored.obj.get("preemptionPolicy", "PreemptLowerPriority")
                    )
            return 0, "PreemptLowerPriority"
        meta = obj.get("metadata", {})
        found = self._priority_class(name, meta.get("name") or meta.get("generateName", ""))
        return int(found.obj.get("value", 0)), str(
            found.obj.get("preemptionPolicy", "PreemptLowerPriority")
        )

    def _priority_class(self, name: str, obj_name: str, group: str = "") -> Stored:
        """The PriorityClass `name`, or the admission plugin's 403 for the object named
        `obj_name` (a pod, or a PodGroup when `group` is scheduling.k8s.io)."""
        assert _PRIORITY_CLASSES is not None
        found = self.store.get(_PRIORITY_CLASSES, "", name)
        if found is not None:
            return found
        plural = "podgroups" if group else "pods"
        resource = f"{plural}.{group}" if group else plural
        details = {"name": obj_name, **({"group": group} if group else {}), "kind": plural}
        raise ApiError(
            403,
            "Forbidden",
            f'{resource} "{obj_name}" is forbidden: no PriorityClass with name {name} was found',
            details,
        )

    def _podgroup_priority(self, obj: Obj) -> None:
        """The Priority admission plugin on a PodGroup (1.36, WorkloadAwarePreemption): a
        named class fills ``spec.priority``; without one the group has none (priority 0)."""
        spec = obj.get("spec")
        if isinstance(spec, dict) and spec.get("priorityClassName"):
            meta_name = obj.get("metadata", {}).get("name", "")
            found = self._priority_class(spec["priorityClassName"], meta_name, "scheduling.k8s.io")
            spec["priority"] = int(found.obj.get("value", 0))

    # -- create ---------------------------------------------------------------------------

    def create(
        self,
        resource: Resource,
        namespace: str,
        obj: Any,
        *,
        dry_run: bool = False,
        fields: FieldValidation | None = None,
    ) -> Stored:
        meta = _meta(obj)
        self._check_type(resource, obj, fields)
        if resource.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and body_ns != namespace:
                raise bad_request(_NAMESPACE_MISMATCH)
            meta["namespace"] = namespace
            ns = self.store.get(NAMESPACES, "", namespace)
            if ns is None:
                raise not_found("namespaces", "", namespace)
            if ns.obj["metadata"].get("deletionTimestamp"):
                name = meta.get("name") or meta.get("generateName", "")
                raise ApiError(
                    403,
                    "Forbidden",
                    f'{resource.qualified} "{name}" is forbidden: unable to create new content in '
                    f"namespace {namespace} because it is being terminated",
                    {"name": name, "kind": resource.plural},
                )
        else:
            meta.pop("namespace", None)
        if (
            not meta.get("name")
            and isinstance(meta.get("generateName"), str)
            and meta["generateName"]
        ):
            for _ in range(8):
                meta["name"] = meta["generateName"] + self.store.name_suffix()
                if self.store.get(resource, meta.get("namespace", ""), meta["name"]) is None:
                    break
        for key in (
            "resourceVersion",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "managedFields",
        ):
            meta.pop(key, None)
        meta["uid"] = self.store.new_uid()
        meta["creationTimestamp"] = self.store.now()
        if resource.generation:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        name = meta.get("name") or ""
        if (
            isinstance(name, str)
            and name
            and self.store.get(resource, meta.get("namespace", ""), name) is not None
        ):
            raise already_exists(resource.plural, resource.group, name)
        priority = self._priority(obj) if resource is PODS else (0, "PreemptLowerPriority")
        if resource.kind == "PodGroup":
            self._podgroup_priority(obj)
        try:
            strategy.prepare_create(resource, obj, priority)
            errors = strategy.validate_create(resource, obj)
            if resource.kind == "JobSet":
                errors += jobset_validation.existing_claims(self.store, obj)
        except _MALFORMED as exc:
            raise _malformed(resource, exc) from None
        if errors:
            raise invalid_object(resource.kind, resource.group, str(name), errors)
        if dry_run:
            return Stored(obj, b"", self.store.rv)
        return self.store.put(resource, obj)

    # -- update ---------------------------------------------------------------------------

    def update(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        obj: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        fields: FieldValidation | None = None,
    ) -> Stored:
        meta = _meta(obj)
        self._check_type(resource, obj, fields)
        old = self.get(resource, namespace, name)
        old_meta = old.obj["metadata"]
        if meta.get("name") not in (None, "", name):
            raise bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the URL "
                f"({name})"
            )
        if resource.namespaced and meta.get("namespace") not in (None, "", namespace):
            raise bad_request(_NAMESPACE_MISMATCH)
        rv = meta.get("resourceVersion")
        if rv not in (None, "") and rv != old_meta["resourceVersion"]:
            raise conflict(resource.plural, resource.group, name, STALE)
        if rv in (None, "") and resource.crd:
            raise invalid_object(
                resource.kind,
                resource.group,
                name,
                [invalid("metadata.resourceVersion", 0, "must be specified for an update")],
            )
        uid = meta.get("uid")
        if uid not in (None, "") and uid != old_meta["uid"]:
            raise conflict(
                resource.plural,
                resource.group,
                name,
                _uid_mismatch(uid, old_meta["uid"]),
            )
        meta["name"] = name
        if resource.namespaced:
            meta["namespace"] = namespace
        for key in (
            "uid",
            "creationTimestamp",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
        ):
            if key in old_meta:
                meta[key] = old_meta[key]
            else:
                meta.pop(key, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        try:
            if subresource == "status":
                new = strategy.prepare_status_update(resource, old.obj, obj)
                errors = strategy.validate_status_update(resource, old.obj, new)
            else:
                new = obj
                strategy.prepare_update(resource, old.obj, new)
                errors = strategy.validate_update(resource, old.obj, new)
        except _MALFORMED as exc:
            raise _malformed(resource, exc) from None
        if errors:
            raise invalid_object(resource.kind, resource.group, name, errors)
        return self._write(resource, old, new, dry_run=dry_run)

    def write_status(self, resource: Resource, old: Stored, status: Obj) -> Stored:
        """A status write by the simulated cluster's own controllers (the node agent): `status`
        replaces the stored one and nothing else changes.

        The rest of the object is the stored one, already checked, so only `status` is checked
        (its JSON types and the kind's status rules) and the new object shares everything else
        with `old`. `old` must be the current version: a stale one is a conflict, as a stale
        resourceVersion is on the API path. The registry owns `status` from here on.
        """
        meta = old.obj["metadata"]
        name = meta["name"]
        if self.store.get(resource, meta.get("namespace", ""), name) is not old:
            raise conflict(resource.plural, resource.group, name, STALE)
        shapes.check_status(resource.kind, resource.version, status, resource.group)
        # put() stamps the resourceVersion into the metadata: the new version gets its own.
        new = {**old.obj, "metadata": {**meta}, "status": status}
        errors = strategy.validate_status_update(resource, old.obj, new)
        if errors:
            raise invalid_object(resource.kind, resource.group, name, errors)
        return self._write(resource, old, new)

    def _write(self, resource: Resource, old: Stored, new: Obj, *, dry_run: bool = False) -> Stored:
        if new == old.obj:
            return old  # a no-op update is not written and bumps nothing, as in etcd
        if dry_run:
            return Stored(new, b"", old.rv)
        meta = new["metadata"]
        if meta.get("deletionTimestamp") and not meta.get("finalizers"):
            grace = meta.get("deletionGracePeriodSeconds") or 0
            if resource is not PODS or grace == 0:
                removed = self.store.remove(resource, meta.get("namespace", ""), meta["name"], new)
                assert removed is not None
                return removed
        return self.store.put(resource, new)

    # -- patch ----------------------------------------------------------------------------

    def patch(
        self,
        resource: Resource,
        namespace: str,
        name: str,
        content_type: str,
        body: Any,
        *,
        subresource: str = "",
        dry_run: bool = False,
        fields: FieldValidation | None = None,
    ) -> Stored:
        old = self.get(resource, namespace, name)
        current = old.copy()
        try:
            if content_type == MERGE_PATCH:
                if not isinstance(body, dict):
                    raise bad_request("merge patch must be a JSON object")
                patched = merge_patch(current, body)
            elif content_type == STRATEGIC_PATCH and not resource.crd:
                patched = strategic_merge_patch(current, body)
            elif content_type == JSON_PATCH:
                patched = json_patch(current, body)
            else:
                accepted = (
                    (JSON_PATCH, MERGE_PATCH)
                    if resource.crd
                    else (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH)
                )
                raise unsupported_media_type(content_type, accepted)
        except PatchError as exc:
            raise ApiError(422, "Invalid", str(exc), {}) from None
        if not isinstance(patched, dict):
            raise bad_request("the patched object is not a JSON object")
        if fields is not None:
            # The real server decodes the patch result strictly; refusing it, it quotes what
            # it decoded: the patch itself for a strategic merge patch, the patched object
            # (unknown fields and all) otherwise.
            quoted = ""
            if fields.mode == "Strict":
                quoted = (
                    go_map(body) if content_type == STRATEGIC_PATCH else encode(patched).decode()
                )
            unknown = sorted(shapes.prune(resource.kind, patched, resource.group))
            fields.unknown(resource, unknown, quoted)
        meta = patched.get("metadata")
        if isinstance(meta, dict) and not meta.get("resourceVersion"):
            # A patch that drops the version is not a precondition; keep the current one.
            meta["resourceVersion"] = old.obj["metadata"]["resourceVersion"]
        return self.update(
            resource, namespace, name, patched, subresource=subresource, dry_run=dry_run
        )

    # -- delete ---------------------------------------------------------------------------

    def delete(
        self, resource: Resource, namespace: str, name: str, options: DeleteOptions
    ) -> DeleteResult:
        old = self.get(resource, namespace, name)
        old_meta = old.obj["metadata"]
        if options.uid is not None and options.uid != old_meta["uid"]:
            raise conflict(
                resource.plural,
                resource.group,
                name,
                _uid_mismatch(options.uid, old_meta["uid"]),
            )
        if (
            options.resource_version is not None
            and options.resource_version != old_meta["resourceVersion"]
        ):
            raise conflict(
                resource.plural,
                resource.group,
                name,
                "Precondition failed: ResourceVersion in precondition: "
                f"{options.resource_version}, ResourceVersion in meta: "
                f"{old_meta['resourceVersion']}",
            )
        if options.grace_seconds is not None and options.grace_seconds < 0:
            raise invalid_object(
                "DeleteOptions",
                "",
                "",
                [invalid("gracePeriodSeconds", options.grace_seconds, "must be non-negative")],
            )
        policy = options.propagation or self._default_policy(resource)
        if policy not in ("Background", "Foreground", "Orphan"):
            raise bad_request(
                f"propagationPolicy {policy!r} is not one of Background, Foreground, Orphan"
            )
        if options.dry_run:
            return DeleteResult(old.copy(), False)
        # Only the metadata (and a namespace's status) changes: the rest is shared.
        obj = {**old.obj, "metadata": {**old_meta}}
        meta = obj["metadata"]
        finalizers: list[str] = list(meta.get("finalizers") or [])
        if policy == "Orphan":
            self._orphan_dependents(old_meta["uid"])
            finalizers = [f for f in finalizers if f != ORPHAN]
        elif (
            policy == "Foreground"
            and FOREGROUND not in finalizers
            and self.store.dependents.get(old_meta["uid"])
        ):
            finalizers.append(FOREGROUND)
        grace = self._grace(resource, old.obj, options.grace_seconds)
        now = self.store.clock()
        if meta.get("deletionTimestamp"):
            # Already terminating: a delete may only shorten the remaining grace period.
            current = meta.get("deletionGracePeriodSeconds") or 0
            if grace < current:
                meta["deletionGracePeriodSeconds"] = grace
                meta["deletionTimestamp"] = rfc3339(
                    min(now + grace, parse_rfc3339(meta["deletionTimestamp"]))
                )
        else:
            meta["deletionTimestamp"] = rfc3339(now + grace)
            meta["deletionGracePeriodSeconds"] = grace
            if "generation" in meta:
                meta["generation"] += 1
        if finalizers:
            meta["finalizers"] = finalizers
        else:
            meta.pop("finalizers", None)
        if resource is NAMESPACES:
            # The namespace controller empties it first and then drops spec.finalizers.
            obj["status"] = {**(obj.get("status") or {}), "phase": "Terminating"}
            blocked = bool(finalizers) or bool((obj.get("spec") or {}).get("finalizers"))
        else:
            blocked = bool(finalizers)
        if not blocked and meta["deletionGracePeriodSeconds"] == 0:
            removed = self.store.remove(resource, meta.get("namespace", ""), name, obj)
            assert removed is not None
            return DeleteResult(removed.obj, True)
        stored = self.store.put(resource, obj) if obj != old.obj else old
        return DeleteResult(stored.obj, False)

    @staticmethod
    def _default_policy(resource: Resource) -> str:
        # batch/v1 Jobs orphan their pods when the client names no policy (legacy default).
        return "Orphan" if resource.kind == "Job" and resource.group == "batch" else "Background"

    @staticmethod
    def _grace(resource: Resource, obj: Obj, requested: int | None) -> int:
        if resource is not PODS:
            return 0
        spec, status = obj.get("spec") or {}, obj.get("status") or {}
        if not spec.get("nodeName") or status.get("phase") in ("Succeeded", "Failed"):
            return 0  # an unscheduled or finished pod has nothing to stop
        if requested is not None:
            return requested
        grace = spec.get("terminationGracePeriodSeconds")
        return grace if isinstance(grace, int) and grace >= 0 else 30

    def _orphan_dependents(self, uid: str) -> None:
        for dependent in self.store.dependents_of(uid):
            found = self.store.uids.get(dependent.obj["metadata"]["uid"])
            if found is None:
                continue
            obj = dependent.copy()
            refs = [r for r in obj["metadata"].get("ownerReferences") or () if r.get("uid") != uid]
            if refs:
                obj["metadata"]["ownerReferences"] = refs
            else:
                obj["metadata"].pop("ownerReferences", None)
            self._write(found[0], dependent, obj)

    def remove_finalizer(self, resource: Resource, stored: Stored, finalizer: str) -> None:
        obj = stored.copy()
        finalizers = [f for f in obj["metadata"].get("finalizers") or () if f != finalizer]
        if finalizers:
            obj["metadata"]["finalizers"] = finalizers
        else:
            obj["metadata"].pop("finalizers", None)
        self._write(resource, stored, obj)

    # -- pods/binding and pods/eviction -----------------------------------------------------

    def bind(self, namespace: str, name: str, binding: Any) -> Stored:
        if not isinstance(binding, dict) or not isinstance(binding.get("target"), dict):
            raise bad_request("a Binding needs a target")
        target = binding["target"]
        node = target.get("name")
        if not node:
            raise invalid_object("Binding", "", name, [invalid("target.name", node, "must be set")])
        pod = self.get(PODS, namespace, name)
        spec = pod.obj.get("spec") or {}
        why = ""
        if pod.obj["metadata"].get("deletionTimestamp"):
            why = f"pod {name} is being deleted, cannot be assigned to a host"
        elif spec.get("nodeName"):
            why = f'pod {name} is already assigned to node "{spec["nodeName"]}"'
        elif spec.get("schedulingGates"):
            why = f"pod {name} has non-empty .spec.schedulingGates"
        if why:
            raise conflict("pods/binding", "", name, why)
        # Stored objects are never mutated: the bound pod copies only the dicts it changes.
        obj = {**pod.obj, "metadata": {**pod.obj["metadata"]}, "spec": {**spec, "nodeName": node}}
        annotations = (binding.get("metadata") or {}).get("annotations")
        if isinstance(annotations, dict) and annotations:
            meta = obj["metadata"]
            meta["annotations"] = {**(meta.get("annotations") or {}), **annotations}
        status = obj["status"] = {**(pod.obj.get("status") or {})}
        conditions = [c for c in status.get("conditions") or () if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": self.store.now(),
            }
        )
        status["conditions"] = conditions
        return self.store.put(PODS, obj)

    def evict(self, namespace: str, name: str, eviction: Any) -> DeleteResult:
        if not isinstance(eviction, dict):
            raise bad_request("an Eviction must be a JSON object")
        pod = self.get(PODS, namespace, name)
        raw = eviction.get("deleteOptions") or {}
        options = delete_options(raw if isinstance(raw, dict) else {}, {})
        if pod.obj["metadata"].get("deletionTimestamp") is None and (
            pod.obj.get("status") or {}
        ).get("phase") not in ("Succeeded", "Failed"):
            obj = pod.copy()
            status = obj.setdefault("status", {})
            conditions = [
                c for c in status.get("conditions") or () if c.get("type") != "DisruptionTarget"
            ]
            conditions.append(
                {
                    "type": "DisruptionTarget",
                    "status": "True",
                    "reason": "EvictionByEvictionAPI",
                    "message": "Eviction API: evicting",
                    "lastProbeTime": None,
                    "lastTransitionTime": self.store.now(),
                }
            )
            status["conditions"] = conditions
            self.store.put(PODS, obj)
        return self.delete(PODS, namespace, name, options)


def delete_options(body: dict[str, Any], query: dict[str, str]) -> DeleteOptions:
    """DeleteOptions from a request body and/or query parameters (the query wins)."""
    grace: Any = query.get("gracePeriodSeconds", body.get("gracePeriodSeconds"))
    policy: Any = query.get("propagationPolicy", body.get("propagationPolicy"))
    orphan = query.get("orphanDependents", body.get("orphanDependents"))
    if policy is None and orphan is not None:
        policy = "Orphan" if str(orphan).lower() == "true" else "Background"
    pre = body.get("preconditions") or {}
    if not isinstance(pre, dict):
        raise bad_request("preconditions must be an object")
    dry_run = query.get("dryRun") or body.get("dryRun")
    try:
        grace_value = None if grace is None else int(grace)
    except (TypeError, ValueError):
        raise bad_request(f"gracePeriodSeconds: invalid value {grace!r}") from None
    return DeleteOptions(
        grace_seconds=grace_value,
        propagation=policy if isinstance(policy, str) else None,
        uid=pre.get("uid"),
        resource_version=pre.get("resourceVersion"),
        dry_run=bool(dry_run),
    )
