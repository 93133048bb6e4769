"""Kubeconfig files pointing at simulated clusters (written as JSON, which every kubeconfig
reader accepts since JSON is YAML)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def document(clusters: list[tuple[str, str]], token: str | None = None) -> dict[str, Any]:
    """A kubeconfig with one cluster, user and context per `(name, url)`; the first is current."""
    user: dict[str, Any] = {"token": token} if token else {}
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": name, "cluster": {"server": url}} for name, url in clusters],
        "users": [{"name": name, "user": dict(user)} for name, _ in clusters],
        "contexts": [
            {"name": name, "context": {"cluster": name, "user": name, "namespace": "default"}}
            for name, _ in clusters
        ],
        "current-context": clusters[0][0] if clusters else "",
    }


def write(path: str | Path, clusters: list[tuple[str, str]], token: str | None = None) -> Path:
    """Write atomically (a reader never sees half a file) with owner-only permissions."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        json.dump(document(clusters, token), handle, indent=2)
        handle.write("\n")
    os.replace(tmp, path)
    return path
