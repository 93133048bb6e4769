"""The kinds kbatchd watches and writes, and where they live in the REST API."""

from __future__ import annotations

from typing import Final

import msgspec


class Resource(msgspec.Struct, frozen=True):
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def collection(self, namespace: str = "") -> str:
        """The path of the collection (all namespaces when `namespace` is empty)."""
        root = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if self.namespaced and namespace:
            return f"{root}/namespaces/{namespace}/{self.plural}"
        return f"{root}/{self.plural}"

    def item(self, namespace: str, name: str, subresource: str = "") -> str:
        path = f"{self.collection(namespace)}/{name}"
        return f"{path}/{subresource}" if subresource else path


# Kind -> the versions kbatchd can read, newest first; discovery picks the newest a cluster
# serves (Workload and PodGroup: v1beta1 from Kubernetes 1.37, v1alpha2 in 1.36).
CANDIDATES: Final[dict[str, tuple[Resource, ...]]] = {
    "Node": (Resource("Node", "", "v1", "nodes", namespaced=False),),
    "Pod": (Resource("Pod", "", "v1", "pods", namespaced=True),),
    "PersistentVolumeClaim": (
        Resource("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", namespaced=True),
    ),
    "Service": (Resource("Service", "", "v1", "services", namespaced=True),),
    "Job": (Resource("Job", "batch", "v1", "jobs", namespaced=True),),
    "JobSet": (Resource("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", namespaced=True),),
    "Workload": tuple(
        Resource("Workload", "scheduling.k8s.io", v, "workloads", namespaced=True)
        for v in ("v1beta1", "v1alpha2")
    ),
    "PodGroup": tuple(
        Resource("PodGroup", "scheduling.k8s.io", v, "podgroups", namespaced=True)
        for v in ("v1beta1", "v1alpha2")
    ),
    # Kubernetes 1.37 only, alpha (KEP-6012).
    "CompositePodGroup": (
        Resource("CompositePodGroup", "scheduling.k8s.io", "v1alpha3", "compositepodgroups", True),
    ),
    "PriorityClass": (
        Resource("PriorityClass", "scheduling.k8s.io", "v1", "priorityclasses", namespaced=False),
    ),
}

# Kind -> its resource where no discovery has been read (the simulated cluster's versions).
RESOURCES: Final = {kind: candidates[-1] for kind, candidates in CANDIDATES.items()}
