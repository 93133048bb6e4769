"""The three PATCH flavours: JSON merge patch (RFC 7386), strategic merge patch and JSON patch
(RFC 6902).

Strategic merge needs the patch strategy of each list. The real server reads it from Go struct
tags; here it is a table keyed by field name, which is unambiguous for the kinds served
(lists not in the table are atomic and replaced whole, as `+listType=atomic` fields are).
"""

from __future__ import annotations

from typing import Any, Final

from daemon.sim.errors import ApiError, bad_request
from events.jsondata import clone

JSON = Any


class PatchError(Exception):
    """A patch that parses but cannot be applied (422, like the real server)."""


# field name -> merge key for lists merged element-wise
_MERGE_KEYS: Final[dict[str, str]] = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "schedulingGates": "name",
    "conditions": "type",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "podIPs": "ip",
    "addresses": "type",
    "ports": "containerPort",
}
# lists of scalars merged as sets
_MERGE_SCALARS: Final = frozenset({"finalizers"})


def merge_patch(target: JSON, patch: JSON) -> JSON:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: JSON, patch: JSON) -> JSON:
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch must be a JSON object")
    try:
        return _smp_map(target if isinstance(target, dict) else {}, patch)
    except PatchError as exc:
        raise ApiError(422, "Invalid", str(exc)) from None


def _smp_map(target: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: clone(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return {}
    if directive is not None:
        raise PatchError(f"Unknown patch type: {directive!r}")
    result = dict(target)
    retain = patch.get("$retainKeys")
    if retain is not None:
        if not isinstance(retain, list):
            raise PatchError("$retainKeys must be a list")
        result = {k: v for k, v in result.items() if k in retain}
    for key, value in patch.items():
        if key in ("$retainKeys",) or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field_name = key.split("/", 1)[1]
            current = result.get(field_name)
            if isinstance(current, list) and isinstance(value, list):
                result[field_name] = [v for v in current if v not in value]
            continue
        if value is None:
            result.pop(key, None)
            continue
        old = result.get(key)
        if isinstance(value, dict):
            if isinstance(value.get("$patch"), str) and value["$patch"] == "delete":
                result.pop(key, None)
                continue
            result[key] = _smp_map(old if isinstance(old, dict) else {}, value)
        elif isinstance(value, list):
            result[key] = _smp_list(key, old if isinstance(old, list) else [], value)
        else:
            result[key] = value
    return result


def _merge_key(field_name: str, items: list[Any]) -> str | None:
    key = _MERGE_KEYS.get(field_name)
    if field_name == "ports" and any(isinstance(i, dict) and "port" in i for i in items):
        return "port"  # Service ports merge on `port`, container ports on `containerPort`
    return key


def _smp_list(field_name: str, target: list[Any], patch: list[Any]) -> list[Any]:
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [clone(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    if field_name in _MERGE_SCALARS:
        merged = list(target)
        for item in patch:
            if item not in merged:
                merged.append(item)
        return merged
    key = _merge_key(field_name, target + patch)
    if key is None:
        return [clone(i) for i in patch]
    result = list(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}")
        position = next(
            (
                i
                for i, old in enumerate(result)
                if isinstance(old, dict) and old.get(key) == item[key]
            ),
            None,
        )
        if item.get("$patch") == "delete":
            if position is not None:
                del result[position]
            continue
        if position is None:
            result.append(_smp_map({}, item))
        else:
            result[position] = _smp_map(result[position], item)
    return result


# -- RFC 6902 ---------------------------------------------------------------------------------


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or (path and not path.startswith("/")):
        raise bad_request(f"invalid JSON pointer {path!r}")
    if path == "":
        return []
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _parent(doc: JSON, parts: list[str], path: str) -> JSON:
    current = doc
    for part in parts[:-1]:
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif isinstance(current, list) and part.isdigit() and int(part) < len(current):
            current = current[int(part)]
        else:
            raise PatchError(f"doc is missing path: {path!r}: missing value")
    return current


def _get(doc: JSON, parts: list[str], path: str) -> JSON:
    if not parts:
        return doc
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent[int(last)]
    raise PatchError(f"doc is missing path: {path!r}: missing value")


def _add(doc: JSON, parts: list[str], value: JSON, path: str) -> JSON:
    if not parts:
        return value
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif last.isdigit() and int(last) <= len(parent):
            parent.insert(int(last), value)
        else:
            raise PatchError(f"add operation does not apply: doc is missing path: {path!r}")
    else:
        raise PatchError(f"add operation does not apply: doc is missing path: {path!r}")
    return doc


def _remove(doc: JSON, parts: list[str], path: str) -> JSON:
    if not parts:
        raise PatchError("cannot remove the whole document")
    parent = _parent(doc, parts, path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        del parent[int(last)]
    else:
        raise PatchError(f"remove operation does not apply: doc is missing path: {path!r}")
    return doc


def json_patch(target: JSON, operations: JSON) -> JSON:
    """Apply RFC 6902 operations; a failed `test` or a missing path is a `PatchError`."""
    if not isinstance(operations, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = clone(target)
    for op in operations:
        if not isinstance(op, dict) or not isinstance(op.get("op"), str):
            raise bad_request(f"invalid JSON patch operation: {op!r}")
        kind = op["op"]
        parts = _pointer(op.get("path"))
        path = str(op.get("path"))
        if kind in ("add", "replace", "test") and "value" not in op:
            raise bad_request(f"missing value for {kind} operation at {path!r}")
        if kind == "add":
            doc = _add(doc, parts, clone(op["value"]), path)
        elif kind == "remove":
            doc = _remove(doc, parts, path)
        elif kind == "replace":
            _get(doc, parts, path)
            if parts:
                parent = _parent(doc, parts, path)
                if isinstance(parent, list):
                    parent[int(parts[-1])] = clone(op["value"])
                else:
                    parent[parts[-1]] = clone(op["value"])
            else:
                doc = clone(op["value"])
        elif kind in ("move", "copy"):
            from_parts = _pointer(op.get("from"))
            source = str(op.get("from"))
            value = clone(_get(doc, from_parts, source))
            if kind == "move":
                doc = _remove(doc, from_parts, source)
            doc = _add(doc, parts, value, path)
        elif kind == "test":
            if _get(doc, parts, path) != op["value"]:
                raise PatchError(f"testing value {path} failed: test failed")
        else:
            raise bad_request(f"Unexpected kind: {kind}")
    return doc
