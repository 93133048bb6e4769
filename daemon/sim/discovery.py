"""Discovery documents: legacy (`/api`, `/apis`, per group-version resource lists), the
aggregated `apidiscovery.k8s.io/v2` form kubectl asks for first, `/version` and the OpenAPI
documents (kubectl fetches them for apply and explain): each group-version's PATCH operations
and its kinds' schemas (`openapi`)."""

from __future__ import annotations

import hashlib
from typing import Any, Final

from daemon.sim import openapi
from daemon.sim.resources import ALL_VERBS, GROUP_VERSIONS, RESOURCES, Resource, resources_in

AGGREGATED: Final = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
AGGREGATED_BETA: Final = "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"

VERSION: Final = {
    "major": "1",
    "minor": "36",
    "emulationMajor": "1",
    "emulationMinor": "36",
    "minCompatibilityMajor": "1",
    "minCompatibilityMinor": "35",
    "gitVersion": "v1.36.0-kbatchd-sim",
    "gitCommit": "0000000000000000000000000000000000000000",
    "gitTreeState": "clean",
    "buildDate": "2026-01-01T00:00:00Z",
    "goVersion": "go1.25.0",
    "compiler": "gc",
    "platform": "linux/amd64",
}

_STATUS_VERBS: Final = ["get", "patch", "update"]


def _hash(resource: Resource) -> str:
    digest = hashlib.sha256(f"{resource.api_version}/{resource.kind}".encode()).digest()
    import base64

    return base64.b64encode(digest[:8]).decode()


def _sub_kind(resource: Resource, sub: str) -> tuple[str, str, str]:
    if sub == "binding":
        return "", "v1", "Binding"
    if sub == "eviction":
        return "policy", "v1", "Eviction"
    return resource.group, resource.version, resource.kind


def resource_list(group: str, version: str) -> dict[str, Any] | None:
    served = resources_in(group, version)
    if not served:
        return None
    entries: list[dict[str, Any]] = []
    for r in served:
        entry: dict[str, Any] = {
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": list(ALL_VERBS),
            "storageVersionHash": _hash(r),
        }
        if r.short_names:
            entry["shortNames"] = list(r.short_names)
        if r.categories:
            entry["categories"] = list(r.categories)
        entries.append(entry)
        for sub in r.subresources:
            sub_group, sub_version, sub_kind = _sub_kind(r, sub)
            sub_entry: dict[str, Any] = {
                "name": f"{r.plural}/{sub}",
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": sub_kind,
                "verbs": _STATUS_VERBS if sub == "status" else ["create"],
            }
            if sub == "eviction":
                sub_entry["group"], sub_entry["version"] = sub_group, sub_version
            entries.append(sub_entry)
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": f"{group}/{version}" if group else version,
        "resources": entries,
    }


def api_versions(address: str) -> dict[str, Any]:
    return {
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
    }


def _group(name: str) -> dict[str, Any]:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in GROUP_VERSIONS[name]]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def group_list() -> dict[str, Any]:
    return {
        "kind": "APIGroupList",
        "apiVersion": "v1",
        "groups": [_group(g) for g in GROUP_VERSIONS],
    }


def group(name: str) -> dict[str, Any] | None:
    if name not in GROUP_VERSIONS:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}


def _aggregated_resource(r: Resource) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": "Namespaced" if r.namespaced else "Cluster",
        "singularResource": r.singular,
        "verbs": list(ALL_VERBS),
    }
    if r.short_names:
        entry["shortNames"] = list(r.short_names)
    if r.categories:
        entry["categories"] = list(r.categories)
    subs = []
    for sub in r.subresources:
        sub_group, sub_version, sub_kind = _sub_kind(r, sub)
        subs.append(
            {
                "subresource": sub,
                "responseKind": {"group": sub_group, "version": sub_version, "kind": sub_kind},
                "verbs": _STATUS_VERBS if sub == "status" else ["create"],
            }
        )
    if subs:
        entry["subresources"] = subs
    return entry


def aggregated(legacy_core: bool, api_version: str) -> dict[str, Any]:
    """`APIGroupDiscoveryList` for `/api` (the core group) or `/apis` (all named groups)."""
    names = [""] if legacy_core else list(GROUP_VERSIONS)
    items = []
    for name in names:
        versions = GROUP_VERSIONS.get(name, ("v1",))
        items.append(
            {
                "metadata": {"name": name, "creationTimestamp": None},
                "versions": [
                    {
                        "version": v,
                        "resources": [_aggregated_resource(r) for r in resources_in(name, v)],
                        "freshness": "Current",
                    }
                    for v in versions
                ],
            }
        )
    return {
        "kind": "APIGroupDiscoveryList",
        "apiVersion": api_version,
        "metadata": {},
        "items": items,
    }


def openapi_v2() -> dict[str, Any]:
    return {
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": {},
        "definitions": {},
    }


def openapi_v3_root() -> dict[str, Any]:
    paths: dict[str, Any] = {}
    for r in RESOURCES:
        prefix = _gv_path(r)
        paths[prefix] = {"serverRelativeURL": f"/openapi/v3/{prefix}?hash=0"}
    return {"paths": paths}


def _gv_path(r: Resource) -> str:
    prefix = f"apis/{r.group}/{r.version}" if r.group else "api/v1"
    return prefix


def openapi_v3_group(path: str) -> dict[str, Any] | None:
    """A group-version document that declares, for each kind, the PATCH operation with the
    `fieldValidation` parameter (kubectl checks for it to choose server-side validation) and
    the kind's schema."""
    served = [r for r in RESOURCES if _gv_path(r) == path]
    if not served:
        return None
    paths: dict[str, Any] = {}
    for r in served:
        scope = "namespaces/{namespace}/" if r.namespaced else ""
        gvk = {"group": r.group, "version": r.version, "kind": r.kind}
        operation = {
            "operationId": f"patch{r.kind}",
            "x-kubernetes-group-version-kind": gvk,
            "x-kubernetes-action": "patch",
            "parameters": [
                {"name": "fieldValidation", "in": "query", "schema": {"type": "string"}},
                {"name": "fieldManager", "in": "query", "schema": {"type": "string"}},
                {"name": "dryRun", "in": "query", "schema": {"type": "string"}},
            ],
            "responses": {"200": {"description": "OK"}},
        }
        paths[f"/{path}/{scope}{r.plural}/{{name}}"] = {"patch": operation}
    return {
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": VERSION["gitVersion"]},
        "paths": paths,
        "components": {"schemas": openapi.schemas(served)},
    }
