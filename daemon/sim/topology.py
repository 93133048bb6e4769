"""GPU cluster topologies as Node objects: generated from a short spec
(``blocks=2,racks=4,hosts=8,gpus=8,cpu=96,memory=1Ti[,pods=110]``; racks per block, hosts per
rack) or read from a JSON (or YAML) file listing the nodes."""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any, Final

from events.quantity import QuantityError, to_units

BLOCK_LABEL: Final = "cloud.provider.com/topology-block"
RACK_LABEL: Final = "cloud.provider.com/topology-rack"
HOST_LABEL: Final = "kubernetes.io/hostname"
GPU: Final = "nvidia.com/gpu"

_COUNTS: Final = ("blocks", "racks", "hosts", "gpus", "pods")
_QUANTITIES: Final = ("cpu", "memory")
_DEFAULTS: Final[dict[str, str]] = {
    "blocks": "1",
    "racks": "1",
    "hosts": "1",
    "gpus": "8",
    "cpu": "96",
    "memory": "1Ti",
    "pods": "110",
}


def node(
    name: str,
    *,
    labels: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
    ready: bool = True,
) -> dict[str, Any]:
    """A Node object as a kubelet (or KWOK) registers it."""
    all_labels = {
        "kubernetes.io/arch": "amd64",
        "kubernetes.io/os": "linux",
        HOST_LABEL: name,
        "type": "kwok",
    }
    all_labels.update(labels or {})
    resources = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    resources.update(allocatable or {})
    spec: dict[str, Any] = {}
    if taints:
        spec["taints"] = taints
    if unschedulable:
        spec["unschedulable"] = True
    condition = {
        "type": "Ready",
        "status": "True" if ready else "False",
        "reason": "KubeletReady" if ready else "KubeletNotReady",
        "message": "kubelet is posting ready status" if ready else "kubelet is not ready",
    }
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": all_labels,
            "annotations": {"kwok.x-k8s.io/node": "fake"},
        },
        "spec": spec,
        "status": {
            "capacity": dict(resources),
            "allocatable": dict(resources),
            "conditions": [condition],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v1.36.0-kbatchd-sim",
                "containerRuntimeVersion": "sim://1.0",
                "kernelVersion": "",
                "osImage": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
                "kubeProxyVersion": "",
            },
        },
    }


def _count(key: str, value: str, *, allow_zero: bool) -> int:
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0 or (number == 0 and not allow_zero):
        kind = "a non-negative" if allow_zero else "a positive"
        raise ValueError(f"topology: {key}={value!r} is not {kind} integer")
    return number


def generate(spec: str) -> list[dict[str, Any]]:
    """Nodes for a ``blocks=..,racks=..,hosts=..,gpus=..,cpu=..,memory=..[,pods=..]`` spec."""
    values = dict(_DEFAULTS)
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep:
            raise ValueError(f"topology: {part!r} is not key=value")
        if key not in _COUNTS and key not in _QUANTITIES:
            known = ", ".join(_COUNTS + _QUANTITIES)
            raise ValueError(f"topology: unknown key {key!r} (value {value!r}); known: {known}")
        values[key] = value
    counts = {k: _count(k, values[k], allow_zero=k == "gpus") for k in _COUNTS}
    for key in _QUANTITIES:
        try:
            to_units(key, values[key])
        except QuantityError:
            raise ValueError(f"topology: {key}={values[key]!r} is not a quantity") from None
    nodes = []
    for b in range(counts["blocks"]):
        for r in range(counts["racks"]):
            for h in range(counts["hosts"]):
                name = f"b{b}-r{r}-h{h}"
                allocatable = {
                    "cpu": values["cpu"],
                    "memory": values["memory"],
                    "pods": values["pods"],
                }
                if counts["gpus"]:
                    allocatable[GPU] = str(counts["gpus"])
                labels = {BLOCK_LABEL: f"b{b}", RACK_LABEL: f"b{b}-r{r}"}
                nodes.append(node(name, labels=labels, allocatable=allocatable))
    return nodes


def _load(path: Path) -> Any:
    text = path.read_text()
    if path.suffix in (".yaml", ".yml"):
        try:
            yaml = importlib.import_module("yaml")
        except ImportError:
            raise ValueError(f"topology: {path}: YAML needs PyYAML; use JSON") from None
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ValueError(f"topology: {path}: invalid YAML: {exc}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"topology: {path}: invalid JSON: {exc}") from None


def from_file(path: str | Path) -> list[dict[str, Any]]:
    """Nodes from a file: ``{"nodes": [...]}`` or a list; each entry is a full Node object or
    ``{name, labels, allocatable, taints, unschedulable, ready}``."""
    path = Path(path)
    try:
        data = _load(path)
    except OSError as exc:
        raise ValueError(f"topology: cannot read {path}: {exc.strerror}") from None
    entries = data.get("nodes") if isinstance(data, dict) else data
    if not isinstance(entries, list):
        raise ValueError(f'topology: {path}: expected a list of nodes or {{"nodes": [...]}}')
    nodes = []
    for i, entry in enumerate(entries):
        where = f"topology: {path}: nodes[{i}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected an object, got {entry!r}")
        if "metadata" in entry:
            if not isinstance(entry["metadata"], dict) or not entry["metadata"].get("name"):
                raise ValueError(f"{where}.metadata.name: required")
            nodes.append({"apiVersion": "v1", "kind": "Node", **entry})
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}.name: required, got {name!r}")
        allocatable = entry.get("allocatable") or {}
        if not isinstance(allocatable, dict):
            raise ValueError(f"{where}.allocatable: expected a map, got {allocatable!r}")
        for resource, value in allocatable.items():
            try:
                to_units(resource, value)
            except QuantityError:
                raise ValueError(
                    f"{where}.allocatable.{resource}: {value!r} is not a quantity"
                ) from None
        nodes.append(
            node(
                name,
                labels={str(k): str(v) for k, v in (entry.get("labels") or {}).items()},
                allocatable={str(k): str(v) for k, v in allocatable.items()},
                taints=entry.get("taints"),
                unschedulable=bool(entry.get("unschedulable", False)),
                ready=bool(entry.get("ready", True)),
            )
        )
    return nodes


def load(spec: str) -> list[dict[str, Any]]:
    """A generator spec (contains ``=``) or a path to a topology file."""
    if "=" in spec:
        return generate(spec)
    return from_file(spec)
