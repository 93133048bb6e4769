"""What a cluster's API server supports that kbatchd relies on, asked before acting there."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from daemon.kube.api import KubeApi
from daemon.kube.resources import RESOURCES

PROBE_NAME: Final = "kbatchd-managed-by-probe"


class _Job(msgspec.Struct):
    spec: dict[str, Any] = {}


async def keeps_job_managed_by(api: KubeApi, manager: str, namespace: str = "default") -> bool:
    """Whether the API server keeps `spec.managedBy` on a Job (feature JobManagedBy, on by
    default since 1.32, GA in 1.35). A server with the feature off silently drops the field,
    and its built-in controller then runs every Job; kbatchd must not run them too.

    Asked with a server-side dry run, so nothing is created."""
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": PROBE_NAME, "namespace": namespace},
        "spec": {
            "managedBy": manager,
            "suspend": True,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "probe", "image": "kbatchd.dev/probe"}],
                }
            },
        },
    }
    response = await api.request(
        "POST", RESOURCES["Job"].collection(namespace), query={"dryRun": "All"}, body=body
    )
    if response.status == 409:
        return True  # a Job of that name exists; the dry run got as far as naming, not fields
    if not response.ok:
        raise ProbeError(
            f"cluster {api.cluster}: cannot ask whether Job spec.managedBy is supported: "
            f"HTTP {response.status}: {response.status_message()}",
            response.status,
        )
    return msgspec.json.decode(response.body, type=_Job).spec.get("managedBy") == manager


class ProbeError(Exception):
    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
