"""Which of the kinds kbatchd knows a cluster serves, and at which version: read from the API
server's discovery documents, asked again while the daemon runs, so that a CRD installed or a
feature gate turned on later is picked up without a restart."""

from __future__ import annotations

from typing import Final

import msgspec

from daemon.kube.api import KubeApi, Response, WatchHttpError
from daemon.kube.ingest import INGEST_ERRORS
from daemon.kube.resources import CANDIDATES, Resource


class _Version(msgspec.Struct):
    groupVersion: str


class _Group(msgspec.Struct):
    name: str
    versions: list[_Version] = []


class _Groups(msgspec.Struct):
    groups: list[_Group] = []


class _ApiResource(msgspec.Struct):
    name: str


class _Resources(msgspec.Struct):
    resources: list[_ApiResource] = []


_GROUPS: Final = msgspec.json.Decoder(_Groups)
_RESOURCES: Final = msgspec.json.Decoder(_Resources)

# What to install or switch on where a kind is not served, for the one warning that says so.
MISSING_HINTS: Final = {
    "JobSet": "install the JobSet CRDs (sigs.k8s.io/jobset, config/components/crd)",
    "Workload": (
        "turn on the GenericWorkload feature gate with --runtime-config "
        "scheduling.k8s.io/v1beta1=true (Kubernetes 1.37) or scheduling.k8s.io/v1alpha2=true "
        "(1.36, with GangScheduling)"
    ),
}
MISSING_HINTS["PodGroup"] = MISSING_HINTS["Workload"]
MISSING_HINTS["CompositePodGroup"] = (
    "Kubernetes 1.37: turn on the CompositePodGroup feature gate with --runtime-config "
    "scheduling.k8s.io/v1alpha3=true; JobSets that ask for a composite gang get per-Job "
    "PodGroups meanwhile"
)


async def _get(api: KubeApi, path: str) -> Response:
    response = await api.request("GET", path)
    if not response.ok and response.status != 404:
        raise WatchHttpError(response)
    return response


async def served_resources(api: KubeApi) -> dict[str, Resource]:
    """Kind -> the newest version of it the cluster serves; a kind it serves at no version
    kbatchd knows is left out. The core group and batch/v1 are always served."""
    response = await _get(api, "/apis")
    offered = {
        version.groupVersion
        for group in _GROUPS.decode(response.body).groups
        for version in group.versions
    }
    served: dict[str, Resource] = {}
    listed: dict[str, set[str]] = {}
    for kind, candidates in CANDIDATES.items():
        for resource in candidates:
            if resource.group in ("", "batch"):
                served[kind] = resource
                break
            if resource.api_version not in offered:
                continue
            if resource.api_version not in listed:
                # A group version may be served without every kind (a gate off for one).
                answer = await _get(api, f"/apis/{resource.api_version}")
                names = _RESOURCES.decode(answer.body).resources if answer.ok else []
                listed[resource.api_version] = {r.name for r in names}
            if resource.plural in listed[resource.api_version]:
                served[kind] = resource
                break
    return served


def missing_message(kind: str, candidates: tuple[Resource, ...]) -> str:
    versions = " or ".join(r.api_version for r in candidates)
    return f"{kind} is not served ({versions}): {MISSING_HINTS.get(kind, 'not served')}"


async def listable(api: KubeApi, candidates: tuple[Resource, ...]) -> Resource | None:
    """The first of `candidates` whose collection answers a list; None when every one is
    answered 404 (not served). Any other failure answers the newest: its informer retries."""
    for resource in candidates:
        try:
            response = await api.request("GET", resource.collection(), query={"limit": 1})
        except INGEST_ERRORS:
            return candidates[0]
        if response.ok:
            return resource
        if response.status != 404:
            return candidates[0]
    return None
