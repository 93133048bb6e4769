"""The kinds the simulated API server serves, with what discovery advertises for each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

ALL_VERBS: Final = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)


# Compared and hashed by identity: each kind is one object of the table below, and tables
# keyed by it are consulted on every write.
@dataclass(frozen=True, slots=True, eq=False)
class Resource:
    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    # Subresources beyond the object itself: "status", "binding", "eviction".
    subresources: tuple[str, ...] = ()
    # CRDs accept no strategic merge patch and bump generation on any non-metadata change.
    crd: bool = False
    # Whether metadata.generation is maintained (the real server leaves it unset for some kinds).
    generation: bool = True
    categories: tuple[str, ...] = ()

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_version(self) -> str:
        return self.api_version

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def qualified(self) -> str:
        """`pods` or `jobs.batch`: how error messages name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural


RESOURCES: Final[tuple[Resource, ...]] = (
    Resource(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        False,
        ("ns",),
        ("status",),
        generation=False,
    ),
    Resource("", "v1", "nodes", "node", "Node", False, ("no",), ("status",), generation=False),
    Resource(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        True,
        ("po",),
        ("status", "binding", "eviction"),
        categories=("all",),
    ),
    Resource(
        "",
        "v1",
        "persistentvolumeclaims",
        "persistentvolumeclaim",
        "PersistentVolumeClaim",
        True,
        ("pvc",),
        ("status",),
        generation=False,
    ),
    Resource(
        "",
        "v1",
        "services",
        "service",
        "Service",
        True,
        ("svc",),
        ("status",),
        generation=False,
        categories=("all",),
    ),
    Resource("", "v1", "events", "event", "Event", True, ("ev",), generation=False),
    Resource("batch", "v1", "jobs", "job", "Job", True, (), ("status",), categories=("all",)),
    Resource(
        "jobset.x-k8s.io",
        "v1alpha2",
        "jobsets",
        "jobset",
        "JobSet",
        True,
        (),
        ("status",),
        crd=True,
    ),
    Resource(
        "scheduling.k8s.io", "v1alpha2", "workloads", "workload", "Workload", True, (), ("status",)
    ),
    Resource(
        "scheduling.k8s.io", "v1alpha2", "podgroups", "podgroup", "PodGroup", True, (), ("status",)
    ),
    Resource(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        False,
        ("pc",),
        generation=False,
    ),
    Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", True, (), generation=False),
    Resource("events.k8s.io", "v1", "events", "event", "Event", True, ("ev",), generation=False),
)

# Group order as the real server lists them; the first version of a group is its preferred one.
GROUP_VERSIONS: Final[dict[str, tuple[str, ...]]] = {
    "batch": ("v1",),
    "coordination.k8s.io": ("v1",),
    "events.k8s.io": ("v1",),
    "scheduling.k8s.io": ("v1", "v1alpha2"),
    "jobset.x-k8s.io": ("v1alpha2",),
}

_BY_PATH: Final[dict[tuple[str, str, str], Resource]] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}


def lookup(group: str, version: str, plural: str) -> Resource | None:
    return _BY_PATH.get((group, version, plural))


def resources_in(group: str, version: str) -> list[Resource]:
    return [r for r in RESOURCES if r.group == group and r.version == version]


def by_kind(api_version: str, kind: str) -> Resource | None:
    for resource in RESOURCES:
        if resource.api_version == api_version and resource.kind == kind:
            return resource
    return None


NAMESPACES: Final = _BY_PATH[("", "v1", "namespaces")]
NODES: Final = _BY_PATH[("", "v1", "nodes")]
PODS: Final = _BY_PATH[("", "v1", "pods")]
JOBS: Final = _BY_PATH[("batch", "v1", "jobs")]
JOBSETS: Final = _BY_PATH[("jobset.x-k8s.io", "v1alpha2", "jobsets")]
