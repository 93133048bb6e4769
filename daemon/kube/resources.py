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


RESOURCES: Final = {
    r.kind: r
    for r in (
        Resource("Node", "", "v1", "nodes", namespaced=False),
        Resource("Pod", "", "v1", "pods", namespaced=True),
        Resource("PersistentVolumeClaim", "", "v1", "persistentvolumeclaims", namespaced=True),
        Resource("Service", "", "v1", "services", namespaced=True),
        Resource("Job", "batch", "v1", "jobs", namespaced=True),
        Resource("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets", namespaced=True),
        Resource("Workload", "scheduling.k8s.io", "v1alpha2", "workloads", namespaced=True),
        Resource("PodGroup", "scheduling.k8s.io", "v1alpha2", "podgroups", namespaced=True),
    )
}
