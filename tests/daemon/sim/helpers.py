"""Request bodies shared by the simulated-cluster tests."""

from __future__ import annotations

from typing import Any


def pod_body(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": dict(annotations)},
        "spec": {"containers": [{"name": "main", "image": "busybox:1.36"}]},
    }


def job_body(name: str, *, suspend: bool = False, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "suspend": suspend,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                }
            },
            **spec,
        },
    }
